"""soft0's NIC wakes a sleeper with a futex only when one sleeps: on its memory (a WRITE) and on its CQ
(a receive). A real NIC cannot wake a CPU polling memory: on a device rdmalab.proc.waiting naps instead."""
import threading
import time
from errno import EINTR

import pytest

from rdmalab import verbs as v
from rdmalab.proc import waiting
from rdmalab.verbs import rc

e = v.enums


@pytest.fixture
def loopback():
    """Two connected RC QPs of this process, an MR to write from and one to write into."""
    with v.device.Context(name=v.choose_route().device) as ctx:
        pd = v.pd.PD(ctx)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        src, dst = v.mr.MR(pd, 4096, access), v.mr.MR(pd, 4096, access)
        cq = v.cq.CQ(ctx, 16)
        cap = v.qp.QPCap(max_send_wr=8, max_recv_wr=8)
        a, b = (v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(2))
        ea, eb = rc.endpoint(ctx, a, dst), rc.endpoint(ctx, b, dst)
        rc.connect(ctx, a, ea, eb, access)
        rc.connect(ctx, b, eb, ea, access)
        yield a, src, dst, cq, b


def write(qp, src, dst, value):
    src.write(bytes([value]) * 8, 8)
    wr = v.wr.SendWR(wr_id=value, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[v.wr.SGE(src.buf, 8, src.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf)
    qp.post_send(wr)


@pytest.mark.skipif(v.PROVIDER != "soft", reason="soft0's NIC rings a futex; a real NIC cannot wake a CPU "
                                                  "polling memory, so on a device waits nap instead")
def test_a_write_wakes_a_sleeper_on_its_memory_and_makes_no_wake_call_when_none_sleeps(loopback, monkeypatch):
    qp, src, dst, cq, _ = loopback
    wakes = []
    real_wake = waiting.futex_wake
    monkeypatch.setattr(waiting, "futex_wake", lambda address: (wakes.append(address), real_wake(address)))
    write(qp, src, dst, 1)
    assert wakes == [] and dst.read(8, 0) == b"\x01" * 8   # nobody sleeps: no syscall on the data path
    mem = v.as_array(dst)
    slept = threading.Event()
    real_sleep = dst._bell.sleep

    def sleep(token, seconds):
        slept.set()
        return real_sleep(token, 5.0)   # long: only the write's wake-up (or a 5 s timeout) ends it

    monkeypatch.setattr(dst._bell, "sleep", sleep)
    done = []
    waiter = threading.Thread(target=lambda: done.append(
        waiting.until(lambda: mem[0] == 2, 30, "the write", bell=dst._bell, busy=False)))
    waiter.start()
    assert slept.wait(10)
    write(qp, src, dst, 2)
    waiter.join(30)
    assert done == [None] and len(wakes) == 1
    assert cq.poll(4)[0] == 2   # both writes completed


@pytest.mark.skipif(v.PROVIDER != "soft", reason="the emulated NIC's CQ bell; rxe0 sleeps in naps here")
def test_a_poller_asleep_on_a_cq_is_woken_by_a_receive(loopback):
    qp, src, dst, cq, peer = loopback
    peer.post_recv(v.wr.RecvWR(wr_id=7, num_sge=1, sg=[v.wr.SGE(dst.buf, 64, dst.lkey)]))
    got = []

    def poll_until_the_receive():
        while 7 not in {wc.wr_id for wc in got}:
            got.extend(waiting.poll(cq, 1, 30, "the receive"))

    poller = threading.Thread(target=poll_until_the_receive)
    poller.start()
    time.sleep(0.05)
    src.write(b"hello", 5)
    qp.post_send(v.wr.SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(src.buf, 5, src.lkey)]))
    poller.join(30)
    got.extend(waiting.poll(cq, 1, 5, "the send") if 1 not in {wc.wr_id for wc in got} else [])
    # (the send completes inside post_send, just after the receive it filled: the poller may see 7 first)
    assert {wc.wr_id for wc in got} == {1, 7} and all(wc.status == 0 for wc in got)


@pytest.mark.skipif(v.PROVIDER != "soft", reason="soft0's naps; a real device's get_cq_event is a blocking read, "
                    "which conformance's test_events shows a signal ends")
def test_get_cq_event_ends_with_eintr_on_a_signal_even_when_waits_nap(loopback, monkeypatch):
    """Where futexes do not sleep, get_cq_event naps; a signal must still end it with EINTR, as it ends the
    real blocking read (a nap in time.sleep goes back to sleep after the handler, and waited for ever)."""
    import signal
    monkeypatch.setattr(waiting, "_libc", False)   # waits nap, as in a sandbox without futexes
    ctx = loopback[3]._context
    channel = v.cq.CompChannel(ctx)
    armed = v.cq.CQ(ctx, 4, None, channel, 0)
    armed.req_notify()
    calls = []

    def handler(*_):   # a handler that returns, as most do; after 2 s it gives up on the wait, failing the test
        calls.append(1)
        if len(calls) > 40:
            raise TimeoutError("get_cq_event slept on through 40 signals")
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.2, 0.05)
    try:
        with pytest.raises(v.pyverbs_error.PyverbsRDMAError) as raised:
            channel.get_cq_event(armed)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert raised.value.error_code == EINTR
    armed.close()
    channel.close()


@pytest.mark.skipif(v.PROVIDER != "soft", reason="soft0's NIC writes a receive's completion and its QP's state "
                                                  "one after the other; rxe0 has done both before post_send returns")
def test_a_poller_that_sees_a_failed_receive_sees_its_qp_in_err(loopback, monkeypatch):
    """On the udp link, the NIC process fails the receive and then enters ERR: a poller in between must still
    find the QP in ERR, as a program written for rxe does (it polls, then queries). Freeze the NIC between the two."""
    qp, src, dst, cq, peer = loopback
    from rdmalab.verbs.soft import responder
    real_enter = responder.enter
    monkeypatch.setattr(responder, "enter", lambda header, state: None)   # the NIC, not there yet
    peer.post_recv(v.wr.RecvWR(wr_id=7, num_sge=1, sg=[v.wr.SGE(dst.buf, 4, dst.lkey)]))
    qp.post_send(v.wr.SendWR(wr_id=8, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(src.buf, 8, src.lkey)]))
    monkeypatch.setattr(responder, "enter", real_enter)
    received = [wc for wc in cq.poll(8)[1] if wc.wr_id == 7]
    assert [wc.status for wc in received] == [e.IBV_WC_LOC_QP_OP_ERR]   # too small, as rxe says
    assert peer.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_ERR
