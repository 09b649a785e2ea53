"""The AllReduce lesson's ranks and the sentences under its tables (rdmalab.lessons.ranks_and_cpus): a CPU for each
rank, and a conclusion only from a run nothing disturbed."""
import multiprocessing
import os

import pytest

from rdmalab.allreduce.report import Report
from rdmalab.lessons import ranks_and_cpus
from rdmalab.proc import handover

MIB = 1 << 20


def report(times_us, ranks=2, spread=1.1, waited=0.01, sizes=(64 << 10, MIB)):
    rows = [{"size": s, "count": s // 4, "type": "float32",
             **{p: {"time_us": t, "algbw": s / t / 1e3, "busbw": s / t / 1e3 * 2 * (ranks - 1) / ranks, "wrong": 0,
                    "spread": spread, "waited": waited} for p in ("out", "in")}} for s, t in zip(sizes, times_us)]
    return Report({"ranks": ranks, "algorithm": "ring", "transport": "rdma", "device": "soft0", "rows": rows})


def said(capsys):
    return " ".join(capsys.readouterr().out.split())   # the sentences, unwrapped


@pytest.mark.parametrize("cpus, most, ranks, says", [
    (1.0, 4, 2, "2 ranks on 1 usable CPU: an AllReduce needs two, so they take turns"),
    (0.5, 4, 2, "take turns"),
    (2.0, 4, 2, "2 ranks, one CPU each (2 usable here)"),
    (3.0, 4, 3, "3 ranks, one CPU each"),
    (16.0, 4, 4, "4 ranks, one CPU each (16 usable here)"),
    (16.0, 2, 2, "2 ranks, one CPU each")])
def test_a_cpu_for_each_rank_two_to_four_and_it_says_so(capsys, cpus, most, ranks, says):
    assert ranks_and_cpus.one_cpu_each(most, cpus=cpus) == ranks
    assert says in said(capsys)


def test_naive_against_ring_concludes_from_a_steady_run_only(capsys):
    ranks_and_cpus.naive_against_ring(report([200, 2000], ranks=4), report([150, 1000], ranks=4))
    text = said(capsys)
    assert "1 MiB: naive 2000 us, ring 1000 us" in text
    assert "on 4 ranks, the naive AllReduce took 2.00x the ring's time" in text and "p/2 = 2x" in text
    ranks_and_cpus.naive_against_ring(report([200, 2000]), report([150, 1000], spread=3.0, waited=0.3))
    text = said(capsys)
    assert ("this run was disturbed (the ring: its rounds differed by up to 3.0x and a rank waited for a CPU 30% of "
            "the time): it cannot say which algorithm is faster") in text and "took" not in text


def test_the_transports_takeaway_is_the_runs_own_or_says_it_was_disturbed(capsys):
    mpi = {"rows": [{"size": 64 << 10, "busbw": 1.0}, {"size": MIB, "busbw": 2.0}]}
    ring, tcp = report([150, 1000]), report([400, 4000])
    ranks_and_cpus.takeaway(ring, tcp, mpi, report([160, 1250]), handover_us=38.0)
    text = said(capsys)
    assert "the same ring moved 1.05 GB/s of busbw over RDMA and 0.26 over TCP (4.0x)" in text
    assert "Your ring moved 0.84, 80% of the library's" in text
    ranks_and_cpus.takeaway(ring, tcp, mpi, report([160, 1250], waited=0.5), handover_us=38.0)
    text = said(capsys)
    assert "disturbed (your ring: a rank waited for a CPU 50% of the time): these figures cannot rank" in text
    assert "moved" not in text


def test_a_host_that_keeps_the_cpus_far_apart_is_a_disturbance_the_takeaway_names(capsys):
    mpi = {"rows": [{"size": 64 << 10, "busbw": 1.0}, {"size": MIB, "busbw": 2.0}]}
    ranks_and_cpus.takeaway(report([150, 1000]), report([400, 4000]), mpi, handover_us=290.0)
    text = " ".join(said(capsys).split())
    assert "disturbed (the host had put this machine's two CPUs far apart: they handed 512 KiB over in 290 us" in text
    assert "cannot rank" in text and "moved" not in text


def test_the_hand_over_probe_measures_two_cpus_and_leaves_nothing_behind():
    before = set(os.listdir("/dev/shm"))
    us = handover.handover_us(steps=20)
    assert us is None if len(os.sched_getaffinity(0)) < 2 else us > 0
    assert set(os.listdir("/dev/shm")) == before and not multiprocessing.active_children()


def test_sharing_cpus_is_compared_with_the_run_that_gave_each_rank_one(capsys):
    mpi = {"rows": [{"size": 64 << 10, "busbw": 1.0}, {"size": MIB, "busbw": 2.0}]}
    shared = {"ranks": 4, "cpus": 2, "rdma": report([3000], ranks=4, waited=0.4, sizes=(MIB,)),
              "tcp": report([9000], ranks=4, waited=0.5, sizes=(MIB,)), "mpi": {"rows": [{"size": MIB, "busbw": 0.2}]}}
    ranks_and_cpus.sharing({"rdma": report([150, 1000]), "tcp": report([400, 4000]), "mpi": mpi}, shared)
    text = said(capsys)
    assert "2 ranks, own CPUs 4 ranks, 2 CPUs waited for a CPU" in text and "the TCP ring 0.26 0.17 50%" in text
    assert "a rank waited for a CPU up to 50% of the time" in text and "10% for MPICH (shared memory)" in text
    ranks_and_cpus.sharing({"rdma": report([150, 1000], spread=2.0), "tcp": report([400, 4000]), "mpi": mpi}, shared)
    assert "itself disturbed at 1 MiB (the RDMA ring: its rounds differed by up to 2.0x)" in said(capsys)
