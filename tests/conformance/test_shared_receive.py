"""Shared receive queues (issue 14): two QPs taking receives from one SRQ, RNR when it is empty, its
limits and its limit event. Every expectation is what rxe0 (Linux 6.1) does, probed in the guest."""
import time
from errno import EINVAL, ENOMEM, EOPNOTSUPP

import pytest

from rdmalab import verbs as v
from .conftest import ALL_ACCESS, RETRY_FOREVER, e, poll, rdma_error, recv_wr, send_wr, to_init, to_rtr, to_rts



def make_srq(pd, max_wr=16, max_sge=1, srq_limit=0):
    return v.srq.SRQ(pd, v.srq.SrqInitAttr(v.srq.SrqAttr(max_wr=max_wr, max_sge=max_sge, srq_limit=srq_limit)))


class Shared:
    """Two receiving QPs (r1, r2) on one SRQ, each with its CQ (rcq1, rcq2) and connected to a sending QP
    of its own (s1, s2). (soft0 hands out the completions of several QPs on one CQ queue by queue, rxe in
    the order they came: with a CQ each, both give the same order.) retry_cnt 7: a sender waits out RNR NAKs
    on an empty SRQ, and rxe's ACK timer, not restarted by them, must not end the wait (conftest.RETRY_FOREVER)."""

    def __init__(self, ctx, gid_index, pd, max_wr=16):
        self.ctx, self.srq = ctx, make_srq(pd, max_wr)
        self.rcq1, self.rcq2, self.scq = v.cq.CQ(ctx, 64), v.cq.CQ(ctx, 64), v.cq.CQ(ctx, 64)
        cap = v.qp.QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)

        def make(cq, srq=None):
            return v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=cap))
        self.r1, self.r2 = make(self.rcq1, self.srq), make(self.rcq2, self.srq)
        self.s1, self.s2 = make(self.scq), make(self.scq)
        for a, b in ((self.r1, self.s1), (self.r2, self.s2)):
            to_init(a)
            to_init(b)
            to_rtr(ctx, gid_index, a, b.qp_num)
            to_rtr(ctx, gid_index, b, a.qp_num)
            to_rts(a, retry_cnt=RETRY_FOREVER)
            to_rts(b, retry_cnt=RETRY_FOREVER)
        self.inbox = v.mr.MR(pd, 4096, ALL_ACCESS)
        self.src = v.mr.MR(pd, 4096, ALL_ACCESS)
        self.src.write(b"A" * 16 + b"B" * 16, 32)

    def post(self, count, first_wr_id=100, length=64):
        for i in range(count):
            self.srq.post_recv(recv_wr(self.inbox, length, first_wr_id + i, offset=64 * i))

    def send(self, qp, wr_id, offset=0):
        qp.post_send(send_wr(self.src, 16, e.IBV_WR_SEND, wr_id=wr_id, offset=offset))

    def close(self):
        for obj in (self.r1, self.r2, self.s1, self.s2, self.srq, self.inbox, self.src, self.rcq1, self.rcq2, self.scq):
            obj.close()


@pytest.fixture
def shared(ctx, gid_index, pd):
    made = Shared(ctx, gid_index, pd)
    yield made
    made.close()


def test_two_qps_take_the_srqs_receives_in_order(shared):
    s = shared
    s.post(4)
    for wr_id, (qp, offset) in enumerate([(s.s2, 0), (s.s1, 16), (s.s2, 0)]):
        s.send(qp, wr_id, offset)
    sent = poll(s.scq, 3)
    got1, got2 = poll(s.rcq1, 1), poll(s.rcq2, 2)
    assert [(c["wr_id"], c["status"]) for c in sent] == [(0, 0), (1, 0), (2, 0)]
    assert [(c["wr_id"], c["status"], c["opcode"], c["byte_len"], c["wc_flags"]) for c in got1 + got2] == \
        [(101, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 16, e.IBV_WC_GRH)] + \
        [(wr_id, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 16, e.IBV_WC_GRH) for wr_id in (100, 102)]
    assert [c["qp_num"] for c in got1 + got2] == [s.r1.qp_num, s.r2.qp_num, s.r2.qp_num]   # the QP it came to
    assert [s.inbox.read(1, 64 * i) for i in range(4)] == [b"A", b"B", b"A", b"\x00"]


def test_an_empty_srq_answers_rnr_until_a_receive_is_posted(shared):
    s = shared
    s.send(s.s1, 9)
    time.sleep(0.2)
    assert s.scq.poll(1)[0] == 0   # the sender waits on RNR NAKs (rnr_retry 7: forever)
    s.post(1, first_wr_id=200)
    [sent] = poll(s.scq)   # (soft0 retries when the sender's CQ is polled; rxe on its own)
    [got] = poll(s.rcq1)
    assert (got["wr_id"], got["status"], sent["wr_id"], sent["status"]) == (200, 0, 9, 0)


def test_a_qp_on_an_srq_refuses_its_own_receives_and_reports_no_receive_queue(shared):
    s = shared
    assert rdma_error(lambda: s.r1.post_recv(recv_wr(s.inbox, 8, 1))) == EINVAL
    attr, _ = s.r1.query(e.IBV_QP_CAP)
    assert (attr.cap.max_recv_wr, attr.cap.max_recv_sge) == (0, 0)


def test_a_qp_in_error_does_not_flush_the_srq(shared):
    s = shared
    s.post(2)
    s.r1.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    assert poll(s.rcq1, 1, timeout=0.5) == []
    s.send(s.s2, 1)
    [got] = poll(s.rcq2)
    assert (got["wr_id"], got["status"]) == (100, e.IBV_WC_SUCCESS)


def test_srq_sizes_round_up_and_limits_are_enforced(ctx, pd):
    srq = make_srq(pd, max_wr=16)
    q = srq.query()
    assert (q.max_wr, q.max_sge, q.srq_limit) == (31, 1, 0)   # a power of two less one, as rxe's queues
    srq.close()
    device = ctx.query_device()
    assert (device.max_srq_wr, device.max_srq_sge) == (1 << 20, 27)
    for max_wr, max_sge in ((0, 1), ((1 << 20) + 1, 1), (16, 28)):
        assert rdma_error(lambda w=max_wr, s=max_sge: make_srq(pd, w, s)) == EINVAL


def test_a_full_srq_refuses_posts_before_it_checks_sges(pd):
    srq = make_srq(pd, max_wr=3)
    mr = v.mr.MR(pd, 4096, ALL_ACCESS)
    for i in range(3):
        srq.post_recv(recv_wr(mr, 8, i))
    assert rdma_error(lambda: srq.post_recv(recv_wr(mr, 8, 3))) == ENOMEM
    two = v.wr.RecvWR(wr_id=4, num_sge=2, sg=[v.wr.SGE(mr.buf, 8, mr.lkey)] * 2)
    assert rdma_error(lambda: srq.post_recv(two)) == ENOMEM
    srq.close()
    mr.close()


def test_too_many_sges_in_an_srq_receive(pd):
    srq = make_srq(pd, max_wr=3)
    mr = v.mr.MR(pd, 4096, ALL_ACCESS)
    two = v.wr.RecvWR(wr_id=4, num_sge=2, sg=[v.wr.SGE(mr.buf, 8, mr.lkey)] * 2)
    assert rdma_error(lambda: srq.post_recv(two)) == EINVAL
    srq.close()
    mr.close()


def test_srq_modify_resize_and_limit(pd):
    srq = make_srq(pd, max_wr=4, srq_limit=2)
    assert (srq.query().max_wr, srq.query().srq_limit) == (7, 2)   # a limit given at creation is armed
    assert rdma_error(lambda: srq.modify(v.srq.SrqAttr(srq_limit=8), e.IBV_SRQ_LIMIT)) == EINVAL
    assert rdma_error(lambda: srq.modify(v.srq.SrqAttr(srq_limit=4), e.IBV_SRQ_LIMIT)) is None
    assert rdma_error(lambda: srq.modify(v.srq.SrqAttr(max_wr=10), e.IBV_SRQ_MAX_WR)) is None
    assert srq.query().max_wr == 15
    assert rdma_error(lambda: srq.modify(v.srq.SrqAttr(max_wr=2), e.IBV_SRQ_MAX_WR)) == EINVAL   # below the limit
    assert rdma_error(srq.get_srq_num) == EOPNOTSUPP   # (an XRC SRQ's)
    srq.close()


def test_the_limit_event_comes_when_fewer_than_the_limit_are_left(shared):
    """(The limit read back says whether the event came: raising it disarms the limit. No thread waits in
    get_async_event: pyverbs holds the GIL while it blocks.)"""
    s = shared
    s.post(10)
    s.srq.modify(v.srq.SrqAttr(srq_limit=7), e.IBV_SRQ_LIMIT)
    limits = []
    for i in range(4):
        s.send(s.s1, i)
        poll(s.scq)
        poll(s.rcq1)
        time.sleep(0.1)
        limits.append(s.srq.query().srq_limit)
    assert limits == [7, 7, 7, 0]   # 7 left raised nothing; 6 < 7 raised the event, which disarmed the limit
    event = s.ctx.get_async_event()
    event.ack()
    assert event.event_type == e.IBV_EVENT_SRQ_LIMIT_REACHED


def test_receives_posted_before_a_resize_are_taken_after_it(shared):
    s = shared
    s.post(3)
    s.srq.modify(v.srq.SrqAttr(max_wr=40), e.IBV_SRQ_MAX_WR)
    assert s.srq.query().max_wr == 63
    for i in (3, 4):
        s.srq.post_recv(recv_wr(s.inbox, 64, 100 + i, offset=64 * i))
    for i in range(5):
        s.send(s.s1, i, offset=16 * (i % 2))
        poll(s.scq)
    got = poll(s.rcq1, 5)
    assert [(c["wr_id"], c["status"]) for c in got] == [(100 + i, e.IBV_WC_SUCCESS) for i in range(5)]
    assert [s.inbox.read(1, 64 * i) for i in range(5)] == [b"A", b"B", b"A", b"B", b"A"]
