"""Numeric RDMALAB_* settings: a bad value stops the program with a message naming it, never a traceback."""
import os
import subprocess
import sys

import pytest

from rdmalab import settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("text, expected", [("", 50), ("  ", 50), ("0", 0), ("12.5", 12.5), ("1e6", 1e6)])
def test_a_setting_in_range_or_unset_is_taken(text, expected):
    assert settings.number("X", 50, 0, 1e6, environ={"X": text}) == expected
    assert settings.number("X", 50, 0, 1e6, environ={}) == 50


@pytest.mark.parametrize("text", ["abc", "-1", "inf", "nan", "1e7"])
def test_a_setting_out_of_range_or_not_a_number_names_itself_and_the_fix(text):
    with pytest.raises(SystemExit) as stopped:
        settings.number("RDMALAB_X", 50, 0, 1e6, "a time in microseconds", environ={"RDMALAB_X": text})
    message = str(stopped.value)
    assert f"RDMALAB_X={text!r}" in message and "a time in microseconds" in message and "unset it" in message


@pytest.mark.parametrize("variable, value, more", [
    ("RDMALAB_SPIN_US", "abc", {}), ("RDMALAB_SHM_DIR", "/nonexistent/rdmalab", {}),
    ("RDMALAB_SOFT_LINK", "carrier-pigeon", {}), ("RDMALAB_LOCAL_PEERS", "-3", {}),
    ("RDMALAB_SOFT_HOST", "localhost:1", {"RDMALAB_SOFT_LINK": "udp"})])
def test_the_cli_says_which_setting_is_wrong_without_a_traceback(variable, value, more):
    done = subprocess.run([sys.executable, "-m", "rdmalab", "bench", "write_lat", "-s", "8", "-n", "50"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT, RDMALAB_PROVIDER="soft", **more, **{variable: value}))
    assert done.returncode != 0, done.stdout + done.stderr
    assert variable in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_doctor_runs_whatever_a_setting_it_does_not_use_says():
    """RDMALAB_TIME_SCALE is read when a wait needs it, not when a module is imported: the doctor, which waits
    for no peer, still runs (it had died at import of the AllReduce's transports)."""
    done = subprocess.run([sys.executable, "-m", "rdmalab", "doctor"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT, RDMALAB_PROVIDER="soft", RDMALAB_TIME_SCALE="x"))
    assert done.returncode == 0, done.stderr


def test_the_time_scale_is_checked_where_a_wait_reads_it(monkeypatch):
    monkeypatch.setenv("RDMALAB_TIME_SCALE", "x")
    with pytest.raises(SystemExit, match="RDMALAB_TIME_SCALE='x'"):
        settings.time_scale()
