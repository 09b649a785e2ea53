"""The hand-built AllReduce: correct against numpy on both transports, every algorithm and dtype,
in place and out of place, odd sizes; a killed rank is a clear error within seconds, leaving nothing."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rdmalab import verbs as v
from rdmalab.allreduce.algorithms import ALGORITHMS, REGISTRY
from rdmalab.allreduce.cluster import Cluster, ClusterError
from rdmalab.allreduce.ranks import count_wrong
from rdmalab.proc import waiting, watchdog
from rdmalab.verbs.soft.shm import pid_alive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = ("float32", "float64", "int32", "int64")


def test_the_bound_catches_a_wrong_element():
    terms = [np.random.default_rng(r).standard_normal(1000).astype(np.float32) for r in range(4)]
    exact = sum(t.astype(np.float64) for t in terms)
    abs_sum = sum(np.abs(t.astype(np.float64)) for t in terms)
    result = sum(terms)                       # float32 rounding: inside the bound
    assert count_wrong(result, exact, abs_sum, 4) == 0
    result[17] += 1e-3
    assert count_wrong(result, exact, abs_sum, 4) == 1
    ints = np.arange(10, dtype=np.int32)
    assert count_wrong(ints, ints.astype(np.int32) + np.eye(10, dtype=np.int32)[3], None, 2) == 1


def wrong_cases(transport, dtypes, counts):
    cases = [(count, dtype, algorithm, in_place) for algorithm in ALGORITHMS for dtype in dtypes
             for count in counts for in_place in (True, False)]
    with Cluster(ranks=4, transport=transport, max_bytes=1 << 20, algorithms=ALGORITHMS) as c:
        wrong = c.check(cases)
    return [case for case, w in zip(cases, wrong) if w]


@pytest.mark.host_only
@pytest.mark.parametrize("transport", ["rdma", "tcp"])
def test_every_algorithm_dtype_and_odd_size_on_four_ranks(transport):
    assert wrong_cases(transport, DTYPES, (1, 3, 1001, 65537)) == []


def test_every_algorithm_on_four_ranks_over_the_device():
    # the transport's part (a float and an integer type, counts below, at and above one chunk per
    # rank), small enough for the Soft-RoCE guest; the full dtype matrix runs on the host
    assert wrong_cases("rdma", ("float32", "int64"), (3, 65537)) == []


@pytest.mark.host_only
@pytest.mark.parametrize("ranks", [1, 3, 5, 6, 7, 8])   # 2 and 4 are tested above and below
def test_every_algorithm_on_other_rank_counts(ranks):
    algorithms = ("naive", "ring") + (("hd",) if ranks & (ranks - 1) == 0 else ())   # hd: powers of two
    with Cluster(ranks=ranks, transport="rdma", max_bytes=1 << 17, algorithms=algorithms) as c:
        cases = [(count, dtype, algorithm, True) for count in (1, ranks - 1 or 1, 7, 10007)
                 for dtype in ("float32", "int64") for algorithm in algorithms]
        assert c.check(cases) == [0] * len(cases)
        # each rank knows how many local ranks share the CPUs, so that none spins while another waits for a CPU
        policies = c.view.apply_sync(waiting.policy)
        assert [(p.peers, p.spin_s > 0) for p in policies] == [(ranks, p.cpus >= max(2, ranks)) for p in policies]


@pytest.mark.host_only
def test_64_mib_on_two_ranks():
    count = (64 << 20) // 4
    with Cluster(ranks=2, transport="rdma", max_bytes=64 << 20) as c:
        assert [r["wrong"] for r in c.allreduce(count, "float32", "ring", iters=1, warmup=0)] == [0, 0]


def test_hd_refuses_a_rank_count_that_is_not_a_power_of_two_before_any_rank_runs():
    c = Cluster(ranks=3, transport="tcp", max_bytes=1 << 12, start=False)
    with pytest.raises(ValueError, match="hd needs a power-of-two number of ranks, not 3: use ring"):
        c.allreduce(10, "float32", "hd", iters=1)
    with pytest.raises(ValueError, match="dtype float16: choose one of float32, float64, int32, int64"):
        c.check([(10, "float32", "ring", True), (10, "float16", "ring", True)])
    out = subprocess.run([sys.executable, "-m", "rdmalab", "allreduce", "--ranks", "3", "--algo", "hd"],
                         capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert (out.returncode, out.stderr) == (1, "rdmalab: hd needs a power-of-two number of ranks, not 3: use ring\n")


def test_a_cluster_larger_than_memory_is_refused_before_it_starts():
    with open("/proc/meminfo") as f:
        available = int(next(line for line in f if line.startswith("MemAvailable:")).split()[1]) * 1024
    c = Cluster(ranks=2, transport="rdma", max_bytes=available // 4, start=False)   # 2 x 3 x a quarter
    with pytest.raises(ClusterError, match=r"2 ranks with [\d.]+ [MG]iB buffers need about [\d.]+ GiB of memory .* "
                                           r"available: use a smaller size or fewer ranks"):
        c.start()
    assert c.client is None and c.pids == []


def test_ranks_that_fail_alike_are_reported_once():
    # functions made outside any module, as a notebook's are: the engines cannot import this test file
    fail_on_odd_ranks = eval('lambda comm: {}["missing"] if comm.rank % 2 else comm.rank', {})
    with Cluster(ranks=4, transport="tcp", max_bytes=1 << 12) as c:
        with pytest.raises(ClusterError) as caught:
            c.run(fail_on_odd_ranks)
        assert str(caught.value) == "ranks 1, 3 failed: KeyError: 'missing'"
        assert c.run(eval("lambda comm: comm.rank", {})) == [0, 1, 2, 3]   # the cluster is still usable


def test_a_killed_rank_is_a_clear_error_within_seconds_and_nothing_leaks():
    c = Cluster(ranks=3, transport="rdma", max_bytes=4 << 20)
    victim = c.pids[1]
    survivors = [c.pids[0], c.pids[2]]
    killed_at = []

    def kill():
        killed_at.append(time.monotonic())
        os.kill(victim, signal.SIGKILL)

    killer = threading.Timer(2.0, kill)
    killer.start()
    try:
        with pytest.raises(ClusterError, match="rank 1 died"):
            c.allreduce((4 << 20) // 4, "float32", "ring", iters=100000, warmup=0, check=False)
        # 10 s on a real machine; RDMALAB_TIME_SCALE stretches it under CPU emulation (the Soft-RoCE guest)
        limit = 10 * float(os.environ.get("RDMALAB_TIME_SCALE", 1))
        assert time.monotonic() - killed_at[0] < limit, f"the others must learn of the death within {limit:.0f} s"
    finally:
        killer.cancel()
        c.close()
    for pid in survivors + [victim]:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") and \
                open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.1)
    if v.PROVIDER == "soft":   # the victim's segments too: Cluster.close() removed them
        from rdmalab.verbs.soft import shm
        assert [name for pid in survivors + [victim] for name in shm.leftovers(pid)] == []


def test_closing_a_cluster_leaves_none_of_its_processes():
    before = set(watchdog.descendants(os.getpid()))
    with Cluster(ranks=2, transport="tcp", max_bytes=1 << 12):
        brought = {pid: watchdog.started(pid) for pid in watchdog.descendants(os.getpid()) if pid not in before}
        assert len(brought) >= 4, "a controller, two engines and the watchdog at least"
    alive = [pid for pid, start in brought.items() if watchdog.started(pid) == start and pid_alive(pid)]
    assert alive == [], f"still running after close(): {alive}"


OWNER = """
import sys, time
from rdmalab.allreduce.cluster import Cluster
c = Cluster(ranks=2, transport="rdma", max_bytes=1 << 20)
print(" ".join(map(str, c.pids)), flush=True)
time.sleep(600)
"""


@pytest.mark.host_only   # processes, not the device: the guest has enough to do
def test_a_killed_owner_leaves_no_cluster_process_and_no_shared_memory():
    # a notebook kernel killed with kill -9 (or by the OOM killer) cannot close its cluster
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        engines = [int(pid) for pid in owner.stdout.readline().split()]
        assert len(engines) == 2, "the cluster did not start"
        below = {pid: watchdog.started(pid) for pid in watchdog.descendants(owner.pid)}
        assert set(engines) <= set(below)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30 * float(os.environ.get("RDMALAB_TIME_SCALE", 1))
    while time.monotonic() < deadline:
        alive = [pid for pid, start in below.items() if watchdog.started(pid) == start and pid_alive(pid)]
        if not alive:
            break
        time.sleep(0.2)
    assert alive == [], f"processes of the dead owner's cluster still running: {alive}"
    if v.PROVIDER == "soft":
        from rdmalab.verbs.soft import shm
        assert [name for pid in engines for name in shm.leftovers(pid)] == []


@pytest.mark.host_only
def test_cli_prints_nccl_tests_columns():
    out = subprocess.run([sys.executable, "-m", "rdmalab", "allreduce", "--ranks", "2", "--size", "1K,4K",
                          "--iters", "2"], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if "redop" in line).split()
    assert header == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                      "time", "algbw", "busbw", "#wrong"]
    rows = [line.split() for line in lines if line and not line.startswith("#")]
    assert [r[:5] for r in rows] == [["1024", "256", "float", "sum", "-1"], ["4096", "1024", "float", "sum", "-1"]]
    assert all(r[8] == "0" and r[12] == "0" for r in rows)
    assert any(line.startswith("# Avg bus bandwidth    : ") for line in lines)
    assert "# Out of bounds values : 0 OK" in lines


@pytest.mark.host_only
def test_mpi_launcher_and_inspecting_ranks_through_the_view():
    with Cluster(ranks=2, transport="rdma", launcher="mpi", max_bytes=1 << 16) as c:
        assert c.check([(1000, "float32", "ring", True), (7, "int64", "hd", False)]) == [0, 0]
        c.view.execute("answer = rank * 10")            # what %%px does in a notebook
        assert c.view["answer"] == [0, 10] and c.client[1]["rank"] == 1


def test_every_registered_algorithm_is_priced_by_the_model_and_offered_by_the_command():
    """A new algorithm is one registry entry (its method) and its cost terms: everything else takes it from there."""
    from rdmalab import cli
    from rdmalab.allreduce import model
    choices = next(a for a in cli.parser()._subparsers._group_actions[0].choices["allreduce"]._actions
                   if a.dest == "algo").choices
    assert tuple(REGISTRY) == ALGORITHMS and tuple(choices) == ALGORITHMS
    for name in ALGORITHMS:
        assert set(ALGORITHMS) <= set(model.PRICED) and model.terms(name, 4, 1 << 20)[1] > 0


@pytest.mark.host_only
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_rings_in_a_row_carry_their_credits_and_nothing_lands_on_bytes_not_yet_added(ranks):
    """The ring asks its neighbours for credits (the handshake) only when something else used the transport
    since its last call: a ring that follows a ring relies on the go-ahead of that call. Run on lesson 09's
    checking transport, whose vector clocks see any put land on bytes their target has not used yet, rings
    in a row, with a naive AllReduce between two of them, give the right sums and no such put, and the rings
    ask for credits on the first call and on the one after the naive only."""
    from rdmalab.lessons import checking
    asked = []

    def rings_and_a_naive(comm, x):
        order = getattr(comm, "calls", 0)
        comm.calls = order + 1
        before = comm.ring_credit == comm.t.exchanged()
        comm.allreduce_validated(x, "naive" if order == 2 else "ring")
        if order != 2:
            asked.append((comm.rank, order, not before))

    for seed in range(4):
        asked.clear()
        for count, dtype in ((7, "float32"), (1003, "int32")):
            run = checking.run(rings_and_a_naive, ranks, count, dtype, seed=seed, calls=5)
            assert run.overwrite is None and run.stopped is None and not run.errors, run
            for got, want in zip(run.results, run.expected):
                assert all(np.allclose(r, want.astype(r.dtype), rtol=1e-5, atol=1e-3) for r in got)
        calls_that_asked = {order for rank, order, handshake in asked if handshake}
        assert calls_that_asked == {0, 3}, asked      # the first ring, and the ring after the naive



def test_a_put_of_unregistered_or_strided_bytes_is_refused_with_the_fix():
    def bad_puts(comm):   # (defined here: the ranks get its code, not this module)
        import numpy as np
        x = comm.buffer(64, "float32")
        said = []
        for src in (np.zeros(16, np.float32), x[::2]):   # memory no MR covers; a strided view of the data region
            try:
                comm.t.put(1 - comm.rank, src, "data", 0)
                said.append(None)
            except ValueError as error:
                said.append(str(error))
        return said
    bad_puts.__module__ = "__main__"   # (sent by value, as a notebook's function is)
    with Cluster(ranks=2, transport="rdma", max_bytes=1 << 16) as c:
        said = c.run(bad_puts)[0]
    assert "registered region only" in said[0], said
    assert "contiguous bytes: a slice x[a:b], not x[::2]" in said[1], said
