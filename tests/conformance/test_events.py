"""Completion channels and CQ events: one event per req_notify, for completions that arrive after it;
solicited-only arming; what get_cq_event does when no event comes (it blocks until a signal, errno 4).
Observed on rxe0 with pyverbs 44 and matched by soft0 (tests run the same on both)."""
import signal
import time
from errno import EINVAL

import pytest

from rdmalab import verbs as v

from .conftest import RETRY_FOREVER, e, observe, poll, rdma_error, recv_wr, send_wr


@pytest.fixture
def channel(ctx):
    ch = v.cq.CompChannel(ctx)
    yield ch
    ch.close()


def next_event(channel, cq, seconds=0.5):
    """'event' if get_cq_event(cq) returns within `seconds`; else the errno that ended it (a SIGALRM
    ends a blocking get_cq_event with 4, EINTR, on every device: nothing here can hang). The alarm
    repeats: a signal that lands just before the blocking call starts would be missed by it."""
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        channel.get_cq_event(cq)
        result = "event"
    except v.pyverbs_error.PyverbsRDMAError as error:
        result = error.error_code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    observe("get_cq_event", result)
    return result


def write(p, wr_id=1):
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=wr_id)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)


def test_an_armed_cq_raises_one_event_for_its_next_completions(make_pair, channel):
    p = make_pair(channel=channel)
    p.cq_a.req_notify()
    write(p, 1)
    write(p, 2)
    assert next_event(channel, p.cq_a) == "event"
    assert [c["wr_id"] for c in poll(p.cq_a, 2)] == [1, 2]
    p.cq_a.ack_events(1)
    write(p, 3)                                     # not armed again: no event
    assert next_event(channel, p.cq_a) == 4
    assert [c["wr_id"] for c in poll(p.cq_a)] == [3]


def test_completions_already_in_the_cq_raise_no_event(make_pair, channel):
    p = make_pair(channel=channel)
    write(p, 1)
    time.sleep(0.5)   # (a NIC completes after post_send returns: rxe in microseconds, soft0's udp link later)
    p.cq_a.req_notify()
    assert next_event(channel, p.cq_a) == 4         # only a completion after arming raises one
    write(p, 2)
    assert next_event(channel, p.cq_a) == "event"
    assert [c["wr_id"] for c in poll(p.cq_a, 2)] == [1, 2]
    p.cq_a.ack_events(1)


def test_get_cq_event_blocks_with_nothing_armed(make_pair, channel):
    p = make_pair(channel=channel)
    write(p, 1)
    assert next_event(channel, p.cq_a) == 4
    assert len(poll(p.cq_a)) == 1


def test_a_receive_raises_an_event_on_the_receivers_channel(make_pair, channel):
    p = make_pair(channel=channel)
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=7))
    p.cq_b.req_notify()
    p.src.write(b"hello", 5)
    p.a.post_send(send_wr(p.src, 5, e.IBV_WR_SEND, wr_id=1))
    assert next_event(channel, p.cq_b) == "event"
    [wc] = poll(p.cq_b)
    assert (wc["wr_id"], wc["opcode"], wc["byte_len"]) == (7, e.IBV_WC_RECV, 5)
    p.cq_b.ack_events(1)


def test_one_channel_hands_out_its_cqs_events_in_the_order_they_were_raised(make_pair, channel):
    # cq_a (the sender's) was made first; the receive completes as the SEND arrives, the send only once its ACK
    # is back: rxe0 queues the receiver's event first (tests/wild/cq_channel_two_cqs.py in a program's shape)
    p = make_pair(channel=channel)
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=2))
    p.cq_a.req_notify()
    p.cq_b.req_notify()
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=1))
    assert [c["wr_id"] for c in poll(p.cq_b) + poll(p.cq_a)] == [2, 1]   # both in: both events raised
    assert next_event(channel, p.cq_b) == "event"
    assert next_event(channel, p.cq_a) == "event"
    p.cq_a.ack_events(1)
    p.cq_b.ack_events(1)


def test_a_send_that_met_rnr_completes_while_its_program_waits_for_the_event(make_pair, channel):
    # the retry after an RNR NAK is the NIC's timer (rxe: the kernel's): it must run while the program
    # blocks in get_cq_event, not only when the program polls. The receive is posted before the wait,
    # once the SEND has met the empty queue: no thread posts it during the wait, because pyverbs'
    # get_cq_event holds the GIL and no other thread of the program runs until it returns.
    # retry_cnt 7: rxe's ACK timer, not restarted by RNR NAKs, must not end the wait (conftest.RETRY_FOREVER)
    p = make_pair(channel=channel, retry_cnt=RETRY_FOREVER)
    p.cq_a.req_notify()
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=1))   # no receive posted yet: RNR NAK
    assert poll(p.cq_a, 1, timeout=0.1) == []                  # it waits to retry, for ever (rnr_retry 7)
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=2))
    assert next_event(channel, p.cq_a, seconds=5) == "event"   # the retry, made while the program sleeps
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a)] == [(1, e.IBV_WC_SUCCESS)]
    assert [c["wr_id"] for c in poll(p.cq_b)] == [2]
    p.cq_a.ack_events(1)


def test_solicited_only_arming_waits_for_a_solicited_receive(make_pair, channel):
    p = make_pair(channel=channel)
    for i in range(2):
        p.b.post_recv(recv_wr(p.dst, 64, wr_id=10 + i))
    p.cq_b.req_notify(True)
    p.cq_a.req_notify(True)
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=1))
    assert next_event(channel, p.cq_b) == 4          # not solicited: no event, still armed
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=2, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_SOLICITED))
    assert next_event(channel, p.cq_b) == "event"
    assert [c["wr_id"] for c in poll(p.cq_b, 2)] == [10, 11]
    assert next_event(channel, p.cq_a) == 4          # a send completion is never solicited
    assert [c["wr_id"] for c in poll(p.cq_a, 2)] == [1, 2]
    p.cq_b.ack_events(1)


def test_flushed_receives_raise_an_event_even_on_a_cq_armed_for_solicited_ones(make_pair, channel):
    """Probed on rxe0: a QP moved to ERR flushes its receives at once, and their completions raise the
    event of a CQ armed for solicited completions only (a flush is an error, which wakes any sleeper)."""
    p = make_pair(channel=channel)
    for i in range(3):
        p.b.post_recv(recv_wr(p.dst, 64, wr_id=500 + i))
    p.cq_b.req_notify(True)
    p.b.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    assert next_event(channel, p.cq_b) == "event"
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b, 3)] == [(500 + i, e.IBV_WC_WR_FLUSH_ERR) for i in range(3)]
    p.cq_b.ack_events(1)


def next_async_event(ctx, seconds=0.5):
    """The next asynchronous event's type, or the error code that ended the wait (a SIGALRM: pyverbs
    raises ibv_get_async_event's return value, -1, not errno)."""
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
    try:
        event = ctx.get_async_event()
        result = event.event_type
        event.ack()
    except v.pyverbs_error.PyverbsRDMAError as error:
        result = error.error_code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return result


def test_a_cq_that_overflows_keeps_what_fits_and_raises_an_error_event_per_completion_lost(ctx, make_pair):
    """Probed on rxe0: a CQ holds `cqe` completions (rxe rounds 4 up to 7); the completions that do not fit
    are dropped, each raising IBV_EVENT_CQ_ERR; the QPs stay in RTS and the CQ goes on working."""
    p = make_pair(cap=v.qp.QPCap(max_send_wr=32, max_recv_wr=4))
    small = v.cq.CQ(ctx, 4)
    qp = v.qp.QP(p.pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=small, rcq=small, cap=v.qp.QPCap(32, 4)))
    from .conftest import to_init, to_rtr, to_rts
    import rdmalab.verbs as verbs
    gid_index = verbs.routable_gid_index(ctx, 1)
    to_init(qp)
    to_rtr(ctx, gid_index, qp, p.b.qp_num)
    to_rts(qp)
    p.b.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)   # b now serves qp instead of p.a
    to_init(p.b)
    to_rtr(ctx, gid_index, p.b, qp.qp_num)
    to_rts(p.b)
    posted = small.cqe + 5
    for i in range(posted):
        w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=100 + i)
        w.set_wr_rdma(p.dst.rkey, p.dst.buf)
        qp.post_send(w)
    time.sleep(0.5)   # (every WRITE done, on a wire too)
    kept = poll(small, posted, timeout=1.0)
    assert [(c["wr_id"], c["status"]) for c in kept] == [(100 + i, e.IBV_WC_SUCCESS) for i in range(small.cqe)]
    events = []
    while len(events) <= posted:
        got = next_async_event(ctx)
        if got == -1:
            break
        events.append(got)
    assert events == [e.IBV_EVENT_CQ_ERR] * (posted - small.cqe)
    assert qp.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_RTS
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=999)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    qp.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(small)] == [(999, e.IBV_WC_SUCCESS)]
    qp.close()
    small.close()


def test_acknowledging_any_count_is_accepted(make_pair, channel):
    p = make_pair(channel=channel)
    p.cq_a.req_notify()
    write(p, 1)
    assert next_event(channel, p.cq_a) == "event"
    for count in (0, 1, 3):   # libibverbs takes what it is given; pyverbs settles the count at close
        p.cq_a.ack_events(count)
    assert len(poll(p.cq_a)) == 1


def test_a_comp_vector_the_device_lacks_is_einval(ctx):
    assert rdma_error(lambda: v.cq.CQ(ctx, 8, None, None, ctx.num_comp_vectors)) == EINVAL


def test_a_channel_of_another_context_is_ebadf(ctx):
    name = v.device.get_device_list()[0].name.decode()
    with v.device.Context(name=name) as other:
        foreign = v.cq.CompChannel(other)
        assert rdma_error(lambda: v.cq.CQ(ctx, 8, None, foreign, 0)) == 9
        foreign.close()


@pytest.mark.parametrize("requested", [1, 2, 3, 4, 5, 100, 1000])
def test_a_cq_reports_the_size_it_really_has(ctx, requested):
    with v.cq.CQ(ctx, requested) as cq:
        observe("cqe", cq.cqe)
        assert cq.cqe == (1 << requested.bit_length()) - 1   # rxe: a power of two, less one slot
