"""`python -m rdmalab.verbs.run` runs programs written for real pyverbs, unchanged."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_PROGRAM = os.path.join(ROOT, "..", "shared", "reference", "softroce-vm", "loopback_write.py")


def run(program, *args):
    return subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", program, *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})


def test_our_pyverbs_example_runs_unchanged_on_the_emulated_nic():
    result = run(os.path.join(ROOT, "examples", "rdma_write_loopback.py"))
    assert result.returncode == 0, result.stderr
    assert "soft0: completion status 0" in result.stdout and "no receiver code ran" in result.stdout


@pytest.mark.skipif(not os.path.exists(SHARED_PROGRAM), reason="the steering repo's shared/ is not beside this clone")
def test_the_reference_softroce_program_runs_unchanged():
    result = run(SHARED_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert "bytes landed: True" in result.stdout


def test_a_missing_program_is_named():
    result = run("no-such-program.py")
    assert result.returncode == 2 and "no such program: no-such-program.py" in result.stderr
