"""Edges rxe0 was probed on (issue 14): zero-length operations, a chain longer than the send queue's
free slots, and WRs posted before RTS. soft0 matches each; the tests run the same on both."""
from errno import EINVAL, ENOMEM

import pytest

from rdmalab import verbs as v
from .conftest import ALL_ACCESS, e, observe, poll, rdma_error, recv_wr, send_wr, states, to_init, to_rtr, to_rts

BOGUS_KEY = 0xABCD12


def one_sided(p, opcode, length=0, rkey=None, lkey=None, num_sge=None):
    w = send_wr(p.src, length, opcode, wr_id=1, lkey=lkey)
    if num_sge is not None:
        w.num_sge = num_sge
    w.set_wr_rdma(p.dst.rkey if rkey is None else rkey, p.dst.buf)
    p.a.post_send(w)
    return poll(p.cq_a)


@pytest.mark.parametrize("opcode", ["IBV_WR_RDMA_WRITE", "IBV_WR_RDMA_READ"])
@pytest.mark.parametrize("keys", ["valid", "rkey 0", "bogus rkey", "bogus lkey"])
def test_a_zero_length_rdma_operation_checks_no_key(make_pair, opcode, keys):
    p = make_pair()
    p.dst.write(b"B" * 16, 16)
    rkey = {"rkey 0": 0, "bogus rkey": BOGUS_KEY}.get(keys)
    lkey = BOGUS_KEY if keys == "bogus lkey" else None
    [wc] = one_sided(p, getattr(e, opcode), 0, rkey, lkey)
    assert (wc["status"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, 0)
    assert states(p.a)[1] == states(p.b)[1] == e.IBV_QPS_RTS
    assert p.dst.read(16, 0) == b"B" * 16


@pytest.mark.parametrize("opcode", ["IBV_WR_RDMA_WRITE", "IBV_WR_RDMA_READ"])
def test_num_sge_set_to_zero_after_building_makes_an_empty_operation(make_pair, opcode):
    p = make_pair()
    p.src.write(b"A" * 16, 16)
    p.dst.write(b"B" * 16, 16)
    [wc] = one_sided(p, getattr(e, opcode), 8, BOGUS_KEY, num_sge=0)
    assert (wc["status"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, 0)
    assert p.dst.read(16, 0) == b"B" * 16 and p.src.read(16, 0) == b"A" * 16


def test_a_send_into_a_receive_without_sges(make_pair):
    p = make_pair()
    empty = recv_wr(p.dst, 64, wr_id=9)
    empty.num_sge = 0
    p.b.post_recv(empty)
    p.a.post_send(send_wr(p.src, 0, e.IBV_WR_SEND, wr_id=1))       # zero bytes fit
    assert [(c["status"], c["byte_len"]) for c in poll(p.cq_a)] == [(e.IBV_WC_SUCCESS, 0)]
    assert [(c["status"], c["opcode"]) for c in poll(p.cq_b)] == [(e.IBV_WC_SUCCESS, e.IBV_WC_RECV)]
    p.b.post_recv(empty)
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=2))       # eight do not
    assert [c["status"] for c in poll(p.cq_a)] == [e.IBV_WC_REM_OP_ERR]
    assert [c["status"] for c in poll(p.cq_b)] == [e.IBV_WC_LOC_QP_OP_ERR]
    assert states(p.a)[1] == states(p.b)[1] == e.IBV_QPS_ERR


def test_a_zero_length_write_with_imm_delivers_only_its_immediate(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=9))
    w = send_wr(p.src, 0, e.IBV_WR_RDMA_WRITE_WITH_IMM, wr_id=1, imm=0x1234)
    w.set_wr_rdma(BOGUS_KEY, p.dst.buf)
    p.a.post_send(w)
    assert [c["status"] for c in poll(p.cq_a)] == [e.IBV_WC_SUCCESS]
    [wc] = poll(p.cq_b)
    assert (wc["status"], wc["opcode"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 0)


def test_a_chain_longer_than_the_free_slots_posts_what_fits_and_names_the_rest(make_pair):
    p = make_pair(cap=v.qp.QPCap(max_send_wr=4, max_recv_wr=4), sq_sig_all=1)
    slots = p.a.query(e.IBV_QP_CAP)[0].cap.max_send_wr   # rxe grants 7 for 4
    chain = [send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=i + 1) for i in range(slots + 3)]
    for w, nxt in zip(chain, chain[1:]):
        w.set_wr_rdma(p.dst.rkey, p.dst.buf)
        w.next_wr = nxt
    chain[-1].set_wr_rdma(p.dst.rkey, p.dst.buf)
    bad = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=999999)
    assert rdma_error(lambda: p.a.post_send(chain[0], bad)) == ENOMEM
    observe("bad_wr", bad.wr_id)
    assert bad.wr_id == slots + 1
    assert [c["wr_id"] for c in poll(p.cq_a, slots + 3, timeout=1.0)] == list(range(1, slots + 1))
    assert states(p.a)[1] == e.IBV_QPS_RTS


def test_a_wr_posted_in_rtr_is_refused_then_runs_at_the_next_post_in_rts(make_pair, ctx, gid_index):
    p = make_pair(connect=False)
    to_init(p.a)
    to_init(p.b, ALL_ACCESS)
    to_rtr(ctx, gid_index, p.a, p.b.qp_num)
    to_rtr(ctx, gid_index, p.b, p.a.qp_num)
    early = send_wr(p.src, 4, e.IBV_WR_RDMA_WRITE, wr_id=1)
    early.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.src.write(b"EARL", 4)
    assert rdma_error(lambda: p.a.post_send(early)) == EINVAL
    to_rts(p.a)
    to_rts(p.b)
    assert poll(p.cq_a, 1, timeout=0.5) == []            # reaching RTS alone runs nothing
    late = send_wr(p.src, 4, e.IBV_WR_RDMA_WRITE, wr_id=2, offset=4)
    late.set_wr_rdma(p.dst.rkey, p.dst.buf + 4)
    p.src.write(b"LATE", 4, 4)
    p.a.post_send(late)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a, 2)] == [(1, 0), (2, 0)]
    assert p.dst.read(8, 0) == b"EARLLATE"


def test_a_whole_chain_posted_in_rtr_is_kept(make_pair, ctx, gid_index):
    p = make_pair(connect=False)
    to_init(p.a)
    to_init(p.b, ALL_ACCESS)
    to_rtr(ctx, gid_index, p.a, p.b.qp_num)
    to_rtr(ctx, gid_index, p.b, p.a.qp_num)
    first, second = send_wr(p.src, 4, e.IBV_WR_RDMA_WRITE, wr_id=1), send_wr(p.src, 4, e.IBV_WR_RDMA_WRITE, wr_id=2)
    first.set_wr_rdma(p.dst.rkey, p.dst.buf)
    second.set_wr_rdma(p.dst.rkey, p.dst.buf + 4)
    first.next_wr = second
    p.src.write(b"CHAN", 4)
    assert rdma_error(lambda: p.a.post_send(first)) == EINVAL
    to_rts(p.a)
    to_rts(p.b)
    late = send_wr(p.src, 4, e.IBV_WR_RDMA_WRITE, wr_id=3)
    late.set_wr_rdma(p.dst.rkey, p.dst.buf + 8)
    p.a.post_send(late)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a, 3)] == [(1, 0), (2, 0), (3, 0)]
    assert p.dst.read(12, 0) == b"CHAN" * 3


def test_a_wr_posted_in_rtr_is_flushed_when_the_qp_enters_err(make_pair, ctx, gid_index):
    p = make_pair(connect=False)
    to_init(p.a)
    to_rtr(ctx, gid_index, p.a, p.b.qp_num)
    early = send_wr(p.src, 4, e.IBV_WR_RDMA_WRITE, wr_id=1)
    early.set_wr_rdma(p.dst.rkey, p.dst.buf)
    assert rdma_error(lambda: p.a.post_send(early)) == EINVAL
    p.a.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a)] == [(1, e.IBV_WC_WR_FLUSH_ERR)]


@pytest.mark.parametrize("build", [
    "SGE length -1", "SGE length 2**32", "SGE lkey -1", "rkey -1", "remote address -1", "QPCap max_send_wr -1",
    "RecvWR wr_id -1"])
def test_a_field_that_does_not_fit_its_c_type_is_refused_when_set(make_pair, build):
    # pyverbs keeps WRs, SGEs and caps in their C structs: -1 is no 4 GiB length, 2**32 no uint32_t.
    # Nothing is posted, and the target's memory stays as it was.
    p = make_pair()
    p.dst.write(b"B" * 16, 16)
    steps = {
        "SGE length -1": lambda: v.wr.SGE(p.src.buf, -1, p.src.lkey),
        "SGE length 2**32": lambda: v.wr.SGE(p.src.buf, 1 << 32, p.src.lkey),
        "SGE lkey -1": lambda: v.wr.SGE(p.src.buf, 8, -1),
        "rkey -1": lambda: send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE).set_wr_rdma(-1, p.dst.buf),
        "remote address -1": lambda: send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE).set_wr_rdma(p.dst.rkey, -1),
        "QPCap max_send_wr -1": lambda: v.qp.QPCap(max_send_wr=-1),
        "RecvWR wr_id -1": lambda: recv_wr(p.dst, 8, wr_id=-1),
    }
    with pytest.raises(OverflowError):
        steps[build]()
    assert poll(p.cq_a, timeout=0.1) == [] and p.dst.read(16, 0) == b"B" * 16
