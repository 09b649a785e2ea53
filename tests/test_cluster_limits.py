"""A local cluster is weighed before it starts: more ranks than the CPUs can carry are refused, with
the fix, before any process starts; fewer, but more than the CPUs, are started with a word on what
they cost. An owner stopped while its cluster starts (SIGTERM, SIGHUP, SIGKILL) leaves no process and
no shared memory behind."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rdmalab import cli
from rdmalab import verbs as v
from rdmalab.allreduce import cluster
from rdmalab.allreduce.cluster import Cluster, ClusterError
from rdmalab.proc import watchdog
from rdmalab.verbs.soft import shm
from rdmalab.verbs.soft.shm import pid_alive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = float(os.environ.get("RDMALAB_TIME_SCALE", 1))


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(cluster, "usable_cpus", lambda: 2.0)


@pytest.fixture
def no_process_may_start(monkeypatch):
    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"a process was started: {args}")
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def test_too_many_local_ranks_are_refused_in_one_line_before_anything_starts(two_cpus, no_process_may_start, capsys):
    before = set(watchdog.descendants(os.getpid()))
    assert cli.main(["allreduce", "--ranks", "200", "--size", "1K"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("rdmalab: 200 local ranks are too many for 2 usable CPUs (at most 16, 8 per CPU; "
                          "starting them would take about "), err
    assert ': use at most 16 ranks, or spread them over nodes with launcher="slurm", "mpi" or "ssh"' in err
    assert "--oversubscribe" in err
    assert set(watchdog.descendants(os.getpid())) == before


@pytest.mark.parametrize("ranks, oversubscribe, said", [
    (2, False, None),                                               # one per CPU: nothing to say
    (16, False, r"16 ranks on 2 usable CPUs: about [\d.]+ (s|min) to start, and ranks that share a CPU take turns"),
    (17, True, r"17 ranks on 2 usable CPUs: about [\d.]+ (s|min) to start"),   # past the limit, asked for
])
def test_ranks_beyond_the_cpus_are_started_with_their_cost_said(two_cpus, no_process_may_start, ranks,
                                                                  oversubscribe, said):
    lines = []
    c = Cluster(ranks=ranks, transport="tcp", max_bytes=1 << 12, start=False, progress=lines.append,
                oversubscribe=oversubscribe)
    with pytest.raises(AssertionError, match="a process was started"):   # it went on to start them
        c.start()
    c.close()
    if said is None:
        assert lines == []
    else:
        assert len(lines) == 1 and re.match(said, lines[0]), lines


def test_the_python_api_refuses_too_many_ranks_too(two_cpus, no_process_may_start):
    c = Cluster(ranks=17, transport="tcp", max_bytes=1 << 12, start=False)
    with pytest.raises(ClusterError, match=r"^17 local ranks are too many for 2 usable CPUs .* "
                                           r"oversubscribe=True"):
        c.start()
    assert c.client is None and c.pids == []


# ---------------------------------------------------------------- an owner stopped while its cluster starts

def _cluster_id(pid):
    """The IPP_CLUSTER_ID an ipyparallel process was started with, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    return env.get(b"IPP_CLUSTER_ID")


def _is_engine(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"ipyparallel.engine" in f.read()
    except OSError:
        return False


def _cluster_processes(cluster_id):
    """Every process started with this IPP_CLUSTER_ID, whoever its parent is now (init, once its owner died)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _cluster_id(p) == cluster_id and pid_alive(int(p))]


@pytest.mark.host_only   # processes, not the device
@pytest.mark.parametrize("signum, moment", [
    (signal.SIGTERM, "launching"),    # `timeout`, a batch system: engines are still being launched
    (signal.SIGHUP, "launching"),     # a closed terminal
    (signal.SIGKILL, "launching"),    # nothing can run in the owner: the watchdog must know the engines already
    (signal.SIGTERM, "connecting"),   # the ranks hold shared memory
], ids=["SIGTERM-launching", "SIGHUP-launching", "SIGKILL-launching", "SIGTERM-connecting"])
def test_an_owner_stopped_while_its_cluster_starts_leaves_no_process_and_no_shared_memory(signum, moment):
    if moment == "connecting" and v.PROVIDER != "soft":
        pytest.skip("shared memory is the emulated NIC's")
    # a large size and many iterations: the run outlasts the moment the test looks for
    owner = subprocess.Popen([sys.executable, "-m", "rdmalab", "allreduce", "--ranks", "4", "--size", "4M",
                              "--iters", "100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT))
    seen = {}   # every process ever seen below the owner: pid -> start time
    try:
        deadline = time.monotonic() + 120 * SCALE
        while True:
            assert owner.poll() is None, f"the owner ended first: {owner.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, f"no {moment} seen"
            for pid in watchdog.descendants(owner.pid):
                seen.setdefault(pid, watchdog.started(pid))
            engines = [pid for pid in seen if _is_engine(pid)]
            if engines and (moment == "launching" or any(shm.leftovers(pid) for pid in engines)):
                break
            time.sleep(0.01)
        cluster_id = _cluster_id(engines[0])
        owner.send_signal(signum)
        _, err = owner.communicate(timeout=120 * SCALE)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
    if signum != signal.SIGKILL:   # it shut the cluster down itself, and says so
        assert owner.returncode == 128 + signum, err[-2000:]
        assert f"stopped by {signal.Signals(signum).name}" in err
    assert cluster_id
    deadline = time.monotonic() + 30 * SCALE
    while True:
        alive = sorted({pid for pid, start in seen.items() if watchdog.started(pid) == start and pid_alive(pid)}
                       | set(_cluster_processes(cluster_id)))
        segments = [name for pid in seen for name in shm.leftovers(pid)]
        if (not alive and not segments) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert alive == [], f"processes of the stopped owner's cluster still running: {alive}"
    assert segments == [], f"shared memory of the stopped owner's cluster left: {segments}"
