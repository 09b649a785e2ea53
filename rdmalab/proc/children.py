"""Helper processes that speak JSON lines on stdin/stdout: rdmalab.bench's two sides, lesson 05's
target (rdmalab.lessons.target) and a cluster's watchdog (rdmalab.proc.watchdog). One way to start
them and stop them, leaving nothing behind, and one protocol: Helper on this side, serve() on theirs.
"""
import ctypes
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time
import warnings

from rdmalab.errors import RdmalabError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARENT_ENV = "RDMALAB_HELPER_PARENT"   # the pid of the process that started a helper
PR_SET_PDEATHSIG = 1
CLOSE_WAIT_S = 2.0   # how long an asked helper may take to close before it is sent SIGTERM
# ssh to another host of a cluster: keys only (never a password prompt nobody sees), and an unreachable
# host or a session whose host went away ends in seconds, not minutes
SSH_ARGS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3")


def spawn(module, *args, new_session=False, host=None, **env):
    """`python -m module args...` with this checkout importable and numpy's BLAS on one thread
    (its spinning threads would be counted as the helper's CPU time); `new_session` keeps signals
    sent to this process's group (a kernel being killed) away from it. `host`: on that host instead,
    over ssh, with the same Python and checkout paths there (a shared or identical installation) and this
    process's RDMALAB_* settings; it ends when the ssh session does (end_with_parent: sshd is its parent)."""
    if host is None:
        environ = dict(os.environ, OPENBLAS_NUM_THREADS="1", **{PARENT_ENV: str(os.getpid())},
                       PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
        command = [sys.executable, "-m", module, *args]
    else:
        environ, command = os.environ, ["ssh", *SSH_ARGS, host, *remote_command(module, *args, **env)]
    return subprocess.Popen(command, env=environ, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=new_session)


def remote_environment(**env):
    """What a process this one starts on another host carries there: this process's RDMALAB_* settings, this
    checkout importable (at the same path), numpy's BLAS on one thread; then `env`."""
    there = {k: v for k, v in os.environ.items() if k.startswith("RDMALAB_") and k != PARENT_ENV}
    there.update(OPENBLAS_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    there.update(env)
    return there


def remote_command(module, *args, **env):
    """The words of a shell command that runs `python -m module args...` on another host as spawn() runs it
    here: the same Python, remote_environment(), each word quoted."""
    return ["exec", "env", *(shlex.quote(f"{k}={v}") for k, v in remote_environment(**env).items()),
            *map(shlex.quote, [sys.executable, "-m", module, *map(str, args)])]


def stop(proc):
    """Ask the helper to close (it releases its verbs objects); if it is busy, SIGTERM (which a helper
    that called end_with_parent() takes as the same request); if it still does not end, kill it and
    remove the shared memory it left. Then close the pipes."""
    if proc.poll() is None:
        try:
            proc.stdin.write(json.dumps({"op": "close"}) + "\n")
            proc.stdin.flush()
            proc.wait(timeout=CLOSE_WAIT_S)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            end(proc)
    if proc.returncode:   # killed, or stopped in the middle of its cleanup: remove what it left
        _reap_segments()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except (OSError, ValueError):
            pass


def end(proc, patience=5):
    """End a process that will not end by itself: SIGTERM, then SIGKILL if it lingers `patience` s."""
    try:
        proc.terminate()
        proc.wait(timeout=patience)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:   # stuck inside the kernel (state D): report it, never hang
            warnings.warn(f"process {proc.pid} ({' '.join(map(str, proc.args))}) does not die after SIGKILL; "
                          f"it is stuck in the kernel (see /proc/{proc.pid}/stack)", RuntimeWarning, stacklevel=3)


_reapers = []   # what removes the shared memory a killed helper left behind: rdmalab.verbs registers soft0's


def reap_with(reaper):
    """Call reaper() once a helper had to be killed (it could not release its resources). rdmalab.verbs registers
    soft0's, which removes the segments of processes that are gone: proc imports nothing of verbs."""
    if reaper not in _reapers:
        _reapers.append(reaper)


def _reap_segments():
    for reaper in _reapers:
        reaper()


def end_with_parent():
    """Called by a helper as it starts: when the process that started it dies, however it dies, the
    kernel sends this helper SIGTERM (Linux's PR_SET_PDEATHSIG), which, like SIGTERM from anyone,
    ends it through SystemExit, so that its `finally` and atexit cleanup run (its verbs objects and
    their shared memory are released) rather than it running on, re-parented, for the rest of a
    measurement."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):   # it died before the line above: no signal will come
        sys.exit(128 + signal.SIGTERM)


# ---------------------------------------------------------------- one protocol, both ends

class HelperError(RdmalabError):
    """A helper process failed, died or fell silent; the message says which and why."""


class Helper:
    """This side of a helper process: send() a request (a JSON line), reply() for its answer.

    A reply that carries "error" raises HelperError with it; so does the helper dying or staying
    silent past `timeout`, or a `watch`ed helper (its peer) dying meanwhile. `name` says who in
    every message ("the target", "lesson 05's target"); `error`, the class of what it raises."""

    def __init__(self, name, module, *args, timeout=120.0, error=HelperError, host=None, **env):
        self.name, self.timeout, self.error = name, timeout, error
        self.proc = spawn(module, *args, host=host, **env)
        self.pid = self.proc.pid   # (with `host`: the local ssh's; the helper may say its own)

    def send(self, **message):
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._died()

    def reply(self, timeout=None, watch=()):
        deadline = time.monotonic() + (timeout or self.timeout)
        while not select.select([self.proc.stdout], [], [], 0.2)[0]:
            for other in watch:
                if other.proc.poll() is not None:
                    raise self.error(f"{other.died()}, while {self.name} was working")
            if self.proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise self.error(f"{self.name} gave no answer within {timeout or self.timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            self._died()
        answer = json.loads(line)
        if "error" in answer:
            raise self.error(f"{self.name} failed: {answer['error']}")
        return answer

    def ask(self, reply_within=None, **message):
        """send(), then reply(); `reply_within` seconds instead of the helper's usual timeout."""
        self.send(**message)
        return self.reply(reply_within)

    def _died(self):
        raise self.error(self.died())

    def died(self):
        """'NAME died (exit N): its last line on stderr', once it has ended."""
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        err = self.proc.stderr.read().strip().splitlines() if self.proc.stderr else []
        return f"{self.name} died (exit {self.proc.returncode}): {err[-1] if err else 'no message'}"

    def close(self):
        stop(self.proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def answer(message):
    """The helper's side: one JSON line on stdout."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(handlers, stop_on_error=False):
    """The helper's side: for each request line on stdin, call handlers[op](**rest) and answer what it
    returns (a handler that answers early itself returns None). {"op": "close"} or the end of stdin
    ends the loop. A handler's exception is answered as {"error": "Type: message"}; with
    stop_on_error the loop then ends too."""
    for line in sys.stdin:
        message = json.loads(line)
        op = message.pop("op", None)
        if op == "close":
            return
        try:
            handler = handlers.get(op)
            if handler is None:
                raise ValueError(f"unknown operation {op!r}")
            result = handler(**message)
        except Exception as error:
            answer({"error": f"{type(error).__name__}: {error}"})
            if stop_on_error:
                return
            continue
        if result is not None:
            answer(result)
