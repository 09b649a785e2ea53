"""rdmalab.proc.waiting: spin, yield, then sleep until woken; the policy follows the usable CPUs and backs
off when spinning gets preempted; soft0's NIC wakes a sleeper with a futex only when one sleeps."""
import threading
import time

import pytest

from rdmalab import verbs as v
from rdmalab.proc import waiting
from rdmalab.verbs import rc

e = v.enums


@pytest.mark.parametrize("cpus, spins, yields", [(4, True, False), (2, True, False), (1, False, True),
                                                 (0.5, False, True)])
def test_the_policy_spins_only_with_two_cpus_and_yields_only_with_fewer(cpus, spins, yields):
    p = waiting.Policy(cpus)
    assert (p.spin_s > 0) == spins and (p.yields > 0) == yields


def test_a_preempted_spin_sleeps_at_once_for_a_while_then_tries_again():
    p = waiting.Policy(2)
    assert p.busy_waiting(100.0)
    p.preempted(100.0)
    assert not p.busy_waiting(100.1) and p.busy_waiting(100.0 + waiting.CALM_S[0])
    p.preempted(101.0)
    assert not p.busy_waiting(101.0 + waiting.CALM_S[0])   # it doubles while spinning keeps being preempted
    p.undisturbed()
    assert p.calm == waiting.CALM_S[0]


def test_a_wait_that_never_ends_is_a_timeout_naming_what_it_waited_for():
    with pytest.raises(TimeoutError, match="the peer's flag"):
        waiting.until(lambda: False, 0.05, "the peer's flag")


def test_a_dead_peer_ends_the_wait_early():
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        waiting.until(lambda: False, 60, "rank 1", alive=lambda: False)
    assert time.monotonic() - started < 30   # a liveness bound, not a speed: 60 s would be the timeout


def test_a_wait_returns_when_another_thread_makes_it_true():
    box = []
    threading.Timer(0.05, box.append, [1]).start()
    waiting.until(lambda: bool(box), 10, "the timer")
    assert box == [1]


def test_without_futexes_waits_nap_say_so_once_and_still_end(monkeypatch, capsys):
    monkeypatch.setattr(waiting, "_libc", False)
    monkeypatch.setattr(waiting, "_warned", False)
    box = []
    threading.Timer(0.02, box.append, [1]).start()

    class Bell:   # would be used if futexes worked
        def arm(self):
            raise AssertionError("no futex: the bell must not be used")

    waiting.until(lambda: bool(box), 10, "the timer", bell=Bell(), busy=False)
    waiting.until(lambda: True, 10, "nothing")
    waiting.until(lambda: bool(box), 10, "the timer again", bell=Bell(), busy=False)
    assert capsys.readouterr().err.count("no futex") == 1


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
    real_sleep = dst.bell.sleep

    def sleep(token, seconds):
        slept.set()
        real_sleep(token, 5.0)   # long: only the write's wake-up (or a 5 s timeout) ends it

    monkeypatch.setattr(dst.bell, "sleep", sleep)
    done = []
    waiter = threading.Thread(target=lambda: done.append(
        waiting.until(lambda: mem[0] == 2, 30, "the write", bell=dst.bell, busy=False)))
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
    assert {wc.wr_id for wc in got} == {1, 7} and all(wc.status == 0 for wc in got)
