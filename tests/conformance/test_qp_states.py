"""The RC state machine: required masks, illegal jumps, cached and queried state, queue sizes."""
import time
from errno import EINVAL, ENODATA

import pytest

from rdmalab import verbs as v

from .conftest import (ALL_ACCESS, RTR_MASK, e, poll, rdma_error, recv_wr, rtr_attr, send_wr, states, to_init, to_rtr,
                       to_rts)


@pytest.fixture
def cq(ctx):
    with v.cq.CQ(ctx, 16) as c:
        yield c


@pytest.fixture
def qp(pd, cq):
    q = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
    yield q
    q.close()


def modify(qp, state, mask=0, **attrs):
    a = v.qp.QPAttr(qp_state=state)
    for k, val in attrs.items():
        setattr(a, k, val)
    return rdma_error(lambda: qp.modify(a, e.IBV_QP_STATE | mask))


def test_new_qp_is_in_reset(qp):
    assert states(qp) == (e.IBV_QPS_RESET, e.IBV_QPS_RESET)


def test_queue_capacities_round_up_to_a_power_of_two_minus_one(qp):
    _, init = qp.query(e.IBV_QP_CAP)
    assert (init.cap.max_send_wr, init.cap.max_recv_wr) == (7, 7)
    assert init.cap.max_send_sge == 1 and init.cap.max_inline_data == 16


@pytest.mark.parametrize("missing", [e.IBV_QP_PKEY_INDEX, e.IBV_QP_PORT, e.IBV_QP_ACCESS_FLAGS])
def test_reset_to_init_needs_pkey_port_and_access(qp, missing):
    mask = (e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS) & ~missing
    assert modify(qp, e.IBV_QPS_INIT, mask, port_num=1, pkey_index=0, qp_access_flags=ALL_ACCESS) == EINVAL
    assert states(qp) == (e.IBV_QPS_RESET, e.IBV_QPS_RESET)


def test_port_two_is_refused_in_init(qp):
    mask = e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
    assert modify(qp, e.IBV_QPS_INIT, mask, port_num=2, pkey_index=0, qp_access_flags=ALL_ACCESS) == EINVAL


@pytest.mark.parametrize("target", [e.IBV_QPS_RTR, e.IBV_QPS_RTS, e.IBV_QPS_ERR])
def test_illegal_jumps_from_reset_fail_with_einval_and_change_nothing(qp, target):
    assert modify(qp, target) == EINVAL
    assert states(qp) == (e.IBV_QPS_RESET, e.IBV_QPS_RESET)


def test_init_to_rtr_without_the_address_vector_fails(ctx, gid_index, qp):
    to_init(qp)
    a = rtr_attr(ctx, gid_index, qp.qp_num)
    assert rdma_error(lambda: qp.modify(a, RTR_MASK & ~e.IBV_QP_AV)) == EINVAL
    assert states(qp) == (e.IBV_QPS_INIT, e.IBV_QPS_INIT)


def test_rtr_to_rts_needs_every_required_attribute(ctx, gid_index, qp):
    to_init(qp)
    to_rtr(ctx, gid_index, qp, qp.qp_num)
    assert modify(qp, e.IBV_QPS_RTS, e.IBV_QP_SQ_PSN) == EINVAL
    assert states(qp) == (e.IBV_QPS_RTR, e.IBV_QPS_RTR)
    to_rts(qp)
    assert states(qp) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)


def test_the_full_path_and_back(ctx, gid_index, qp):
    to_init(qp)
    assert modify(qp, e.IBV_QPS_INIT, e.IBV_QP_ACCESS_FLAGS, qp_access_flags=ALL_ACCESS) is None  # INIT->INIT
    assert modify(qp, e.IBV_QPS_RTS) == EINVAL                                                      # INIT->RTS
    to_rtr(ctx, gid_index, qp, qp.qp_num)
    to_rts(qp)
    assert modify(qp, e.IBV_QPS_RTS) is None      # RTS->RTS
    assert modify(qp, e.IBV_QPS_INIT) == EINVAL   # RTS->INIT
    assert modify(qp, e.IBV_QPS_ERR) is None
    assert modify(qp, e.IBV_QPS_RTS) == EINVAL    # ERR->RTS
    assert modify(qp, e.IBV_QPS_RESET) is None
    assert states(qp) == (e.IBV_QPS_RESET, e.IBV_QPS_RESET)


def test_pyverbs_to_rts_helper_walks_all_the_way(ctx, gid_index, qp):
    a = rtr_attr(ctx, gid_index, qp.qp_num)
    a.pkey_index, a.qp_access_flags = 0, ALL_ACCESS
    a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = 0, 14, 7, 7, 1
    qp.to_rts(a)
    assert states(qp) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)


@pytest.mark.parametrize("stop", ["reset", "init", "rtr"])
def test_post_send_before_rts_fails_with_einval(ctx, gid_index, pd, qp, stop):
    mr = v.mr.MR(pd, 64, ALL_ACCESS)
    if stop != "reset":
        to_init(qp)
    if stop == "rtr":
        to_rtr(ctx, gid_index, qp, qp.qp_num)
    w = send_wr(mr, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(mr.rkey, mr.buf)
    assert rdma_error(lambda: qp.post_send(w)) == EINVAL


def test_post_recv_fails_in_reset_and_works_in_init(pd, qp):
    mr = v.mr.MR(pd, 64, ALL_ACCESS)
    w = v.wr.RecvWR(wr_id=1, num_sge=1, sg=[v.wr.SGE(mr.buf, 8, mr.lkey)])
    assert rdma_error(lambda: qp.post_recv(w)) == EINVAL
    to_init(qp)
    assert rdma_error(lambda: qp.post_recv(w)) is None


def test_too_many_send_sges_at_creation_is_refused(pd, cq):
    attr = v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(max_send_sge=1000))
    assert rdma_error(lambda: v.qp.QP(pd, attr)) == EINVAL


def test_rtr_needs_a_global_route_on_roce(ctx, gid_index, qp):
    if ctx.query_port(1).link_layer != e.IBV_LINK_LAYER_ETHERNET:
        pytest.skip("InfiniBand port: a local route needs no GRH")
    to_init(qp)
    a = rtr_attr(ctx, gid_index, qp.qp_num)
    a.ah_attr = v.addr.AHAttr(port_num=1, is_global=0)
    assert rdma_error(lambda: qp.modify(a, RTR_MASK)) == EINVAL


def test_an_empty_source_gid_index_is_enodata(ctx, gid_index, qp):
    to_init(qp)
    empty = next(i for i in range(2, 64) if str(ctx.query_gid(1, i)) == ":".join(["0000"] * 8))
    assert rdma_error(lambda: qp.modify(rtr_attr(ctx, empty, qp.qp_num), RTR_MASK)) == ENODATA
    assert states(qp) == (e.IBV_QPS_INIT, e.IBV_QPS_INIT)


# ---------------------------------------------------------------- SQD: the send queue drained (probed on rxe0)

def to_sqd(ctx, qp, mask=0, **attrs):
    """Move `qp` to SQD: (errno or None, the async event that came of it, or -1: none within 0.5 s). The event
    is taken here, so that no later test reads it (the context, and its event queue, is the session's)."""
    from .test_events import next_async_event
    return modify(qp, e.IBV_QPS_SQD, mask, **attrs), next_async_event(ctx)


def sqd_write(p, wr_id, offset):
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=wr_id, offset=offset)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf + offset)
    return rdma_error(lambda: p.a.post_send(w))


def test_in_sqd_the_send_queue_starts_nothing_and_the_receive_queue_goes_on(ctx, make_pair):
    """RTS to SQD raises IBV_EVENT_SQ_DRAINED (once, with or without en_sqd_async_notify, which query reports as
    0). A WR posted in SQD is taken, but nothing goes out, not even after SQD to RTS: only at the next post,
    which carries out both, in order. Meanwhile the QP takes what its peer sends; SQD to SQD may change
    attributes (here the ACK timeout)."""
    from .test_events import next_async_event
    p = make_pair()
    p.src.write(b"SQ" * 16, 32)
    while next_async_event(ctx, 0.1) != -1:   # (one an earlier test left)
        pass
    assert to_sqd(ctx, p.a, e.IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify=1) == (None, e.IBV_EVENT_SQ_DRAINED)
    assert next_async_event(ctx, 0.3) == -1
    assert states(p.a) == (e.IBV_QPS_SQD, e.IBV_QPS_SQD)
    assert int(p.a.query(e.IBV_QP_EN_SQD_ASYNC_NOTIFY)[0].en_sqd_async_notify) == 0
    assert sqd_write(p, 11, 0) is None
    assert poll(p.cq_a, 1, 0.5) == [] and p.dst.read(8, 0) == bytes(8)
    p.a.post_recv(recv_wr(p.dst, 64, wr_id=21, offset=1024))
    p.b.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=12))
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b)] == [(12, e.IBV_WC_SUCCESS)]
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a)] == [(21, e.IBV_WC_SUCCESS)]
    assert to_sqd(ctx, p.a, e.IBV_QP_TIMEOUT, timeout=10) == (None, -1)   # (SQD to SQD: no second event)
    assert modify(p.a, e.IBV_QPS_RTS) is None and states(p.a) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)
    assert poll(p.cq_a, 1, 0.5) == []
    assert sqd_write(p, 13, 16) is None
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a, 2)] == [(11, e.IBV_WC_SUCCESS), (13, e.IBV_WC_SUCCESS)]
    assert p.dst.read(32, 0) == b"SQ" * 4 + bytes(8) + b"SQ" * 4 + bytes(8)


def test_sqd_to_err_flushes_what_it_held_and_sqd_moves_only_to_rts_sqd_err_or_reset(ctx, make_pair):
    p = make_pair()
    assert to_sqd(ctx, p.a) == (None, e.IBV_EVENT_SQ_DRAINED) and sqd_write(p, 31, 0) is None
    assert modify(p.a, e.IBV_QPS_ERR) is None
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a)] == [(31, e.IBV_WC_WR_FLUSH_ERR)]
    q = make_pair()
    assert to_sqd(ctx, q.a) == (None, e.IBV_EVENT_SQ_DRAINED)
    assert modify(q.a, e.IBV_QPS_RTR) == EINVAL and states(q.a)[1] == e.IBV_QPS_SQD
    assert modify(q.a, e.IBV_QPS_RESET) is None
    assert to_sqd(ctx, q.a) == (EINVAL, -1)   # from RESET


def test_a_send_waiting_out_rnr_naks_is_not_resent_in_sqd(ctx, make_pair):
    """On rxe0 the SEND, RNR NAKed, is not sent again once the QP is in SQD: the receive posted then stays
    untaken and nothing completes (IBV_EVENT_SQ_DRAINED comes at once all the same)."""
    p = make_pair()
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=41))
    time.sleep(0.2)
    assert to_sqd(ctx, p.a) == (None, e.IBV_EVENT_SQ_DRAINED)
    time.sleep(0.5)   # (a resend already on its way, sent before SQD, meets no receive either)
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=42))
    assert poll(p.cq_a, 1, 1.0) == [] and poll(p.cq_b, 1, 0.5) == []
    assert states(p.a) == (e.IBV_QPS_SQD, e.IBV_QPS_SQD)
