"""The RC state machine: required masks, illegal jumps, cached and queried state, queue sizes."""
from errno import EINVAL, ENODATA

import pytest

from rdmalab import verbs as v

from .conftest import ALL_ACCESS, RTR_MASK, e, rdma_error, rtr_attr, send_wr, states, to_init, to_rtr, to_rts


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
