"""Helper processes that speak JSON lines on stdin/stdout: rdmalab.bench's two sides, lesson 04's
target (rdmalab.remote) and a cluster's watchdog (rdmalab.watchdog). One way to start them and one
way to stop them, leaving nothing behind."""
import json
import os
import subprocess
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn(module, *args, new_session=False, **env):
    """`python -m module args...` with this checkout importable and numpy's BLAS on one thread
    (its spinning threads would be counted as the helper's CPU time); `new_session` keeps signals
    sent to this process's group (a kernel being killed) away from it."""
    environ = dict(os.environ, OPENBLAS_NUM_THREADS="1",
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.Popen([sys.executable, "-m", module, *args], env=environ, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=new_session)


def stop(proc):
    """Ask the helper to close (it releases its verbs objects), kill it if it does not, close the pipes."""
    if proc.poll() is None:
        try:
            proc.stdin.write(json.dumps({"op": "close"}) + "\n")
            proc.stdin.flush()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:   # stuck inside the kernel (state D): report it, never hang
                warnings.warn(f"helper process {proc.pid} ({' '.join(proc.args[2:])}) does not die after SIGKILL; "
                              f"it is stuck in the kernel (see /proc/{proc.pid}/stack)", RuntimeWarning, stacklevel=2)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except (OSError, ValueError):
            pass
