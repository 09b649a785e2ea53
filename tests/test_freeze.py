"""Lessons 05 and 06's experiments (rdmalab.lessons.freeze, target; 06's one_cpu): a stopped process's memory
is reached by RDMA, never by TCP; the lesson's plumbing continues the target whatever the learner's function does; on one CPU
a READ needs no turn of the target's CPU, a TCP request does.

The claims hold on every device, so the tests run on soft0 here and on rxe0 in the Soft-RoCE guest
(make test-softroce), where the kernel, not the initiator, serves the operations."""
import os
import signal
import time

import pytest

from rdmalab import verbs as v
from rdmalab.lessons import freeze, one_cpu
from rdmalab.lessons.checks.one_sided import stop_and_reach
from rdmalab.lessons.target import RemoteBuffer
from rdmalab.proc import procstat
from rdmalab.verbs import rc

e = v.enums


@pytest.fixture
def lesson():
    """What lesson 05 has when its exercise runs: post(), the CQ, the local MR, the target, and the QP."""
    ctx = v.device.Context(name=v.choose_route().device)
    pd = v.pd.PD(ctx)
    cq = v.cq.CQ(ctx, 64)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(64, 4), sq_sig_all=0))
    local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    target = RemoteBuffer()
    mine = rc.endpoint(ctx, qp, local)
    rc.connect(ctx, qp, mine, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
    target.connect(mine)

    post = freeze.poster(qp, local, target)   # as the lesson defines it

    yield post, cq, local, target, qp
    target.close()
    for obj in (qp, local, cq, pd, ctx):
        obj.close()


def running(target):
    return procstat.stat_fields(target.pid)[0] != "T" and target.read(4) is not None   # it answers: it runs


def test_rdma_reaches_a_stopped_process_and_tcp_stalls_on_it(lesson):
    post, cq, local, target, qp = lesson
    result = freeze.run(stop_and_reach, post, cq, local, target)
    d = result.data
    assert result.error is None and d["stopped_throughout"] and not d["left_stopped"]
    assert [op["status"] for op in d["rdma"]] == [0, 0, 0] and d["rdma_completed"] == d["rdma_posted"] == 3
    assert result.answer["read_back"] == d["pattern"] and result.answer["old_counter"] == d["counter_before"]
    assert d["tcp_stalled"] and 0 < d["tcp_bytes_before_stall"] == result.answer["tcp_bytes"] < 256 << 20
    # continued, the target finds what RDMA left, and every byte TCP had held back
    assert d["target_found_pattern"] and d["counter_after"] == d["counter_before"] + 1
    assert d["tcp_bytes_received"] == d["tcp_bytes_sent"]
    assert "stopped (SIGSTOP) throughout" in str(result) and running(target)


def test_whatever_the_function_does_the_target_is_continued_and_the_cq_left_empty(lesson):
    post, cq, local, target, qp = lesson

    def fails_while_stopped(pid, post, cq, local, sock):
        os.kill(pid, signal.SIGSTOP)
        post(e.IBV_WR_RDMA_WRITE, 64, 1024, 0)   # and never polls it
        1 / 0

    result = freeze.run(fails_while_stopped, post, cq, local, target)
    assert isinstance(result.error, ZeroDivisionError) and result.data["left_stopped"] and running(target)
    assert cq.poll(1)[0] == 0   # the WRITE's completion was polled for the lesson

    def blocks(pid, post, cq, local, sock):
        os.kill(pid, signal.SIGSTOP)
        while True:
            sock.sendall(bytes(1 << 16))   # a blocking socket: it would wait for ever

    started = time.monotonic()
    result = freeze.run(blocks, post, cq, local, target)
    assert isinstance(result.error, TimeoutError) and "blocked for" in str(result.error)
    assert time.monotonic() - started < freeze.HANG_S + 10 and running(target)

    def out_of_bounds(pid, post, cq, local, sock):
        post(e.IBV_WR_RDMA_WRITE, 64, 4090, 0)   # past the target's 4 KiB: refused before the NIC fails the QP

    result = freeze.run(out_of_bounds, post, cq, local, target)
    assert isinstance(result.error, ValueError) and "do not fit" in str(result.error)
    assert freeze.run(stop_and_reach, post, cq, local, target).data["stopped_throughout"]   # the QP still works


def test_on_one_cpu_a_read_needs_no_turn_of_the_target_and_a_tcp_request_does(lesson):
    post, cq, local, target, qp = lesson
    n, loops = 200, {}
    before_affinity = os.sched_getaffinity(0)
    with one_cpu.pinned(target.pid) as cpu, target.serving() as server:
        assert os.sched_getaffinity(0) == os.sched_getaffinity(target.pid) == {cpu}

        def one_read():
            post(e.IBV_WR_RDMA_READ, 8, local_offset=512)
            assert rc.wait_for_completion(cq).status == e.IBV_WC_SUCCESS

        def one_request():
            server.sendall(bytes(8))
            assert len(server.recv(8)) == 8

        for test, one in (("read_lat", one_read), ("tcp_rr", one_request)):
            before = procstat.snapshot(target.pid)
            start = time.perf_counter()
            for _ in range(n):
                one()
            loops[test] = (time.perf_counter() - start) / n * 1e6, procstat.since(before)
    assert os.sched_getaffinity(0) == before_affinity and target.served == n
    result = one_cpu.OneCpu.from_loops(cpu, n, loops)
    assert result.target_switches("read_lat") < 0.05 and result.target_switches("tcp_rr") > 0.5
    assert "RDMA READ / TCP request-response" in str(result) and "<img" in result._repr_html_()
