"""Failures: the completion status each side gets, the QP states after, and memory left untouched.

Every expectation here is what real Soft-RoCE (rxe, Linux 6.1) does; several differ from what the
man pages suggest (an unknown lkey is LOC_QP_OP_ERR, a too-small receive fails the responder with
LOC_QP_OP_ERR and the requester with REM_OP_ERR).
"""
import time
from errno import EINVAL

import pytest

from rdmalab import verbs as v

from .conftest import (ALL_ACCESS, RETRY_FOREVER, RTR_MASK, e, poll, rdma_error, recv_wr, rtr_attr, send_wr, states,
                       to_init, to_rtr, to_rts)

RTS, ERR = e.IBV_QPS_RTS, e.IBV_QPS_ERR
NO_WRITE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
NO_READ = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC
NO_ATOMIC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def rdma(p, opcode, rkey=None, offset=0, length=8, **kw):
    w = send_wr(p.src, length, opcode, **kw)
    if opcode in (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP):
        w.set_wr_atomic(p.dst.rkey if rkey is None else rkey, p.dst.buf + offset, 1, 0)
    else:
        w.set_wr_rdma(p.dst.rkey if rkey is None else rkey, p.dst.buf + offset)
    return w


def scenario_bad_rkey(p):
    return rdma(p, e.IBV_WR_RDMA_WRITE, rkey=p.dst.rkey ^ 0x100)


def scenario_remote_out_of_bounds(p):
    return rdma(p, e.IBV_WR_RDMA_WRITE, offset=4096 - 8, length=64)


def scenario_mr_without_remote_write(p):
    p.keep = v.mr.MR(p.pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(p.keep.rkey, p.keep.buf)
    return w


def scenario_mr_without_remote_read(p):
    p.keep = v.mr.MR(p.pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_READ)
    w.set_wr_rdma(p.keep.rkey, p.keep.buf)
    return w


def scenario_read_out_of_bounds(p):
    return rdma(p, e.IBV_WR_RDMA_READ, offset=4090, length=16)


def scenario_atomic_out_of_bounds(p):
    return rdma(p, e.IBV_WR_ATOMIC_FETCH_AND_ADD, offset=4096)


def scenario_deregistered_mr(p):
    mr = v.mr.MR(p.pd, 64, ALL_ACCESS)
    key, addr = mr.rkey, mr.buf
    mr.close()
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(key, addr)
    return w


def scenario_mr_of_another_pd(p):
    p.keep_pd = v.pd.PD(p.ctx)
    p.keep = v.mr.MR(p.keep_pd, 64, ALL_ACCESS)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(p.keep.rkey, p.keep.buf)
    return w


def scenario_write(p):
    return rdma(p, e.IBV_WR_RDMA_WRITE)


def scenario_read(p):
    return rdma(p, e.IBV_WR_RDMA_READ)


def scenario_atomic(p):
    return rdma(p, e.IBV_WR_ATOMIC_FETCH_AND_ADD)


def scenario_bad_lkey(p):
    return rdma(p, e.IBV_WR_RDMA_WRITE, lkey=p.src.lkey ^ 0x100)


def scenario_local_out_of_bounds(p):
    w = send_wr(p.src, 64, e.IBV_WR_RDMA_WRITE, offset=4096 - 8)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    return w


def scenario_read_into_mr_without_local_write(p):
    p.keep = v.mr.MR(p.pd, 64, 0)
    w = send_wr(p.keep, 8, e.IBV_WR_RDMA_READ)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    return w


def scenario_unknown_opcode(p):
    return rdma(p, 77)


def scenario_send_without_receive(p):
    return send_wr(p.src, 8, e.IBV_WR_SEND)


def scenario_write_imm_without_receive(p):
    return rdma(p, e.IBV_WR_RDMA_WRITE_WITH_IMM, imm=5)


def scenario_send_into_small_receive(p):
    p.b.post_recv(recv_wr(p.dst, 16, wr_id=77))
    p.b.post_recv(recv_wr(p.dst, 16, wr_id=78))
    return send_wr(p.src, 32, e.IBV_WR_SEND)


def scenario_send_into_receive_with_bad_lkey(p):
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=79, lkey=0xBAD))
    return send_wr(p.src, 32, e.IBV_WR_SEND)


def scenario_receive_in_mr_without_local_write(p):
    p.keep = v.mr.MR(p.pd, 64, e.IBV_ACCESS_REMOTE_READ)
    p.b.post_recv(recv_wr(p.keep, 64, wr_id=5))
    return send_wr(p.src, 8, e.IBV_WR_SEND)


def scenario_lkey_of_another_pd(p):
    p.keep_pd = v.pd.PD(p.ctx)
    p.keep = v.mr.MR(p.keep_pd, 64, ALL_ACCESS)
    w = send_wr(p.keep, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    return w


# name, pair options, requester status, responder completions, requester state, responder state
CASES = [
    (scenario_bad_rkey, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_remote_out_of_bounds, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_mr_without_remote_write, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_mr_without_remote_read, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_read_out_of_bounds, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_atomic_out_of_bounds, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_deregistered_mr, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_mr_of_another_pd, {}, e.IBV_WC_REM_ACCESS_ERR, [], ERR, ERR),
    (scenario_write, {"access_b": NO_WRITE}, e.IBV_WC_REM_INV_REQ_ERR, [], ERR, ERR),
    (scenario_read, {"access_b": NO_READ}, e.IBV_WC_REM_INV_REQ_ERR, [], ERR, ERR),
    (scenario_atomic, {"access_b": NO_ATOMIC}, e.IBV_WC_REM_INV_REQ_ERR, [], ERR, ERR),
    # a responder given no resources for READs and atomics (max_dest_rd_atomic 0) refuses them
    (scenario_read, {"max_dest_rd_atomic_b": 0}, e.IBV_WC_REM_INV_REQ_ERR, [], ERR, ERR),
    (scenario_atomic, {"max_dest_rd_atomic_b": 0}, e.IBV_WC_REM_INV_REQ_ERR, [], ERR, ERR),
    (scenario_bad_lkey, {}, e.IBV_WC_LOC_QP_OP_ERR, [], ERR, RTS),
    (scenario_local_out_of_bounds, {}, e.IBV_WC_LOC_PROT_ERR, [], ERR, RTS),
    (scenario_read_into_mr_without_local_write, {}, e.IBV_WC_LOC_PROT_ERR, [], ERR, RTS),
    (scenario_unknown_opcode, {}, e.IBV_WC_LOC_QP_OP_ERR, [], ERR, RTS),
    # retry_cnt 7 (for ever): rxe's ACK timer runs on through RNR NAKs, and a stall could otherwise end the
    # wait with RETRY_EXC_ERR before the RNR NAKs are counted out; its retries only bring more RNR NAKs
    (scenario_send_without_receive, {"rnr_retry": 0, "retry_cnt": RETRY_FOREVER}, e.IBV_WC_RNR_RETRY_EXC_ERR, [],
     ERR, RTS),
    (scenario_send_without_receive, {"rnr_retry": 2, "retry_cnt": RETRY_FOREVER}, e.IBV_WC_RNR_RETRY_EXC_ERR, [],
     ERR, RTS),
    (scenario_write_imm_without_receive, {"rnr_retry": 1, "retry_cnt": RETRY_FOREVER}, e.IBV_WC_RNR_RETRY_EXC_ERR,
     [], ERR, RTS),
    (scenario_send_into_small_receive, {}, e.IBV_WC_REM_OP_ERR,
     [(77, e.IBV_WC_LOC_QP_OP_ERR), (78, e.IBV_WC_WR_FLUSH_ERR)], ERR, ERR),
    (scenario_send_into_receive_with_bad_lkey, {}, e.IBV_WC_REM_OP_ERR, [(79, e.IBV_WC_LOC_QP_OP_ERR)], ERR, ERR),
    (scenario_receive_in_mr_without_local_write, {}, e.IBV_WC_REM_OP_ERR, [(5, e.IBV_WC_LOC_QP_OP_ERR)], ERR, ERR),
    (scenario_lkey_of_another_pd, {}, e.IBV_WC_LOC_QP_OP_ERR, [], ERR, RTS),
]


def case_id(case):
    """The scenario's name and what the options change: send_without_receive-rnr_retry2, write-qp_forbids_it."""
    scenario, options = case[0], case[1]
    parts = [scenario.__name__.removeprefix("scenario_")]
    parts += [f"rnr_retry{options['rnr_retry']}"] if "rnr_retry" in options else []
    parts += ["qp_forbids_it"] if "access_b" in options else []
    parts += ["no_rd_atomic_resources"] if "max_dest_rd_atomic_b" in options else []
    return "-".join(parts)


@pytest.mark.parametrize("scenario, options, status, responder, state_a, state_b", CASES, ids=[case_id(c) for c in CASES])
def test_error_completion_states_and_untouched_memory(make_pair, scenario, options, status, responder, state_a, state_b):
    p = make_pair(**options)
    p.src.write(b"z" * 64, 64)
    before = p.dst.read(4096, 0)
    p.a.post_send(scenario(p))
    [wc] = poll(p.cq_a, 1, 5.0)
    assert (wc["status"], wc["opcode"], wc["byte_len"]) == (status, 0, 0)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b, len(responder) or 1, 1.0 if responder else 0.2)] == responder
    assert p.a.qp_state == RTS  # libibverbs' cached state changes only on modify() or query()
    assert states(p.a) == (RTS, state_a)
    assert states(p.b)[1] == state_b
    assert p.a.qp_state == state_a
    assert p.dst.read(4096, 0) == before  # a rejected operation leaves the target untouched


def test_without_rd_atomic_resources_a_write_still_lands(make_pair):
    p = make_pair(max_dest_rd_atomic_b=0)   # max_dest_rd_atomic limits READs and atomics only
    p.src.write(b"w" * 8, 8)
    p.a.post_send(scenario_write(p))
    [wc] = poll(p.cq_a, 1, 5.0)
    assert (wc["status"], states(p.a)[1], states(p.b)[1]) == (e.IBV_WC_SUCCESS, RTS, RTS)
    assert p.dst.read(8, 0) == b"w" * 8


def test_after_an_error_later_wrs_flush(make_pair):
    p = make_pair()
    p.a.post_send(scenario_bad_rkey(p))
    poll(p.cq_a)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=99, flags=0)  # unsignaled: flushes still complete
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    assert [(c["wr_id"], c["status"], c["opcode"]) for c in poll(p.cq_a)] == [(99, e.IBV_WC_WR_FLUSH_ERR, 0)]
    assert p.dst.read(8, 0) == bytes(8)


def test_responder_receives_are_flushed_when_a_remote_error_kills_its_qp(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=1))
    p.a.post_send(scenario_bad_rkey(p))
    poll(p.cq_a)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b)] == [(1, e.IBV_WC_WR_FLUSH_ERR)]


def test_moving_to_err_flushes_posted_receives(make_pair):
    p = make_pair()
    for i in range(3):
        p.b.post_recv(recv_wr(p.dst, 64, wr_id=100 + i))
    p.b.modify(v.qp.QPAttr(qp_state=ERR), e.IBV_QP_STATE)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b, 3)] == [(100 + i, e.IBV_WC_WR_FLUSH_ERR) for i in range(3)]


def test_a_receive_posted_after_the_flush_of_err_stays_without_completion(make_pair):
    # the receives a QP held were flushed when it entered ERR; rxe 6.1 takes one posted after that
    # (no errno) and never completes it, where a send posted in ERR is flushed (below)
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=100))
    p.b.modify(v.qp.QPAttr(qp_state=ERR), e.IBV_QP_STATE)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b)] == [(100, e.IBV_WC_WR_FLUSH_ERR)]
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=101))
    assert poll(p.cq_b, timeout=0.5) == []


def test_send_posted_in_err_flushes(make_pair):
    p = make_pair()
    p.b.modify(v.qp.QPAttr(qp_state=ERR), e.IBV_QP_STATE)
    w = send_wr(p.dst, 8, e.IBV_WR_RDMA_WRITE, wr_id=22)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.b.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b)] == [(22, e.IBV_WC_WR_FLUSH_ERR)]


def test_peer_in_err_never_answers_retry_exceeded(make_pair):
    p = make_pair()
    p.b.modify(v.qp.QPAttr(qp_state=ERR), e.IBV_QP_STATE)
    p.a.post_send(scenario_write(p))
    assert [c["status"] for c in poll(p.cq_a, 1, 10)] == [e.IBV_WC_RETRY_EXC_ERR]
    assert states(p.a)[1] == ERR


def test_nonexistent_destination_qp_retry_exceeded(ctx, gid_index, make_pair):
    p = make_pair(connect=False)
    to_init(p.a)
    to_rtr(ctx, gid_index, p.a, 0xFFFFF0)
    to_rts(p.a)
    p.a.post_send(scenario_write(p))
    assert [c["status"] for c in poll(p.cq_a, 1, 10)] == [e.IBV_WC_RETRY_EXC_ERR]


@pytest.mark.parametrize("retry_cnt, fails", [(6, True), (7, False)])
def test_retry_cnt_7_retries_without_end(ctx, gid_index, make_pair, retry_cnt, fails):
    # rxe reads retry_cnt 7 as "forever", as the spec does rnr_retry 7: with a 1 ms ACK timeout,
    # 6 retries fail within milliseconds; 7 keep going
    p = make_pair(connect=False)
    to_init(p.a)
    to_rtr(ctx, gid_index, p.a, 0xFFFFF0)
    to_rts(p.a, timeout=8, retry_cnt=retry_cnt)
    p.a.post_send(scenario_write(p))
    assert [c["status"] for c in poll(p.cq_a, 1, 1.5)] == ([e.IBV_WC_RETRY_EXC_ERR] if fails else [])
    assert states(p.a)[1] == (ERR if fails else RTS)


@pytest.mark.parametrize("sq_psn, rq_psn", [(0, 1000), (1000, 0)])
def test_psn_mismatch_retry_exceeded_and_nothing_lands(ctx, gid_index, make_pair, sq_psn, rq_psn):
    p = make_pair(connect=False)
    to_init(p.a)
    to_init(p.b)
    to_rtr(ctx, gid_index, p.a, p.b.qp_num)
    to_rtr(ctx, gid_index, p.b, p.a.qp_num, rq_psn=rq_psn)
    to_rts(p.a, sq_psn=sq_psn)
    to_rts(p.b)
    p.src.write(b"PSNPSNPS", 8)
    p.a.post_send(scenario_write(p))
    assert [c["status"] for c in poll(p.cq_a, 1, 10)] == [e.IBV_WC_RETRY_EXC_ERR]
    assert p.dst.read(8, 0) == bytes(8)
    assert states(p.b)[1] == RTS


@pytest.mark.parametrize("opcode", [e.IBV_WR_RDMA_WRITE, e.IBV_WR_SEND])
@pytest.mark.parametrize("behind", [1, 2])
def test_a_message_that_begins_behind_the_expected_psn_is_an_invalid_request(ctx, gid_index, make_pair, opcode,
                                                                               behind):
    # 3000 bytes go as 3 packets at MTU 1024. Starting 1 or 2 PSNs behind what the responder expects, its
    # first packets are duplicates (dropped), and the packet at the expected PSN is a middle or last one
    # of a message the responder never saw begin: it NAKs an invalid request and enters ERR (its posted
    # receive is flushed); nothing lands
    p = make_pair(connect=False)
    to_init(p.a)
    to_init(p.b)
    to_rtr(ctx, gid_index, p.a, p.b.qp_num)
    to_rtr(ctx, gid_index, p.b, p.a.qp_num, rq_psn=1000)
    to_rts(p.a, sq_psn=1000 - behind)
    to_rts(p.b)
    p.src.write(b"P" * 3000, 3000)
    p.b.post_recv(recv_wr(p.dst, 4096, wr_id=9))
    p.a.post_send(rdma(p, opcode, length=3000) if opcode != e.IBV_WR_SEND else send_wr(p.src, 3000, opcode))
    assert [c["status"] for c in poll(p.cq_a, 1, 10)] == [e.IBV_WC_REM_INV_REQ_ERR]
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b)] == [(9, e.IBV_WC_WR_FLUSH_ERR)]
    assert (states(p.a)[1], states(p.b)[1]) == (ERR, ERR)
    assert p.dst.read(3000, 0) == bytes(3000)


@pytest.mark.parametrize("length, landed, receive_late", [(3000, False, False), (1000, True, False), (3000, False, True)])
def test_a_write_with_imm_must_fit_the_responders_path_mtu(ctx, gid_index, make_pair, length, landed, receive_late):
    # The sender's path MTU is 4096, the responder's 1024. 3000 bytes go as one packet, which the responder
    # does not take (more than one of its MTUs left, so a packet must carry exactly 1024): as for a WRITE,
    # an invalid request, both QPs in ERR, nothing lands. The message had taken the posted receive, which
    # fails with the request's status. 1000 bytes fit both MTUs: the receive completes with the immediate.
    # Posted before its receive, the message is first RNR NAKed (the receive is checked before the key and
    # the length), and refused the same way once the receive comes.
    p = make_pair(connect=False)
    to_init(p.a)
    to_init(p.b)
    wide = rtr_attr(ctx, gid_index, p.b.qp_num)
    wide.path_mtu = e.IBV_MTU_4096
    p.a.modify(wide, RTR_MASK)
    to_rtr(ctx, gid_index, p.b, p.a.qp_num)
    to_rts(p.a, retry_cnt=RETRY_FOREVER)   # (rxe keeps its ACK timer running through RNR NAKs: see conftest)
    to_rts(p.b)
    p.src.write(b"M" * length, length)
    if not receive_late:
        p.b.post_recv(recv_wr(p.dst, 8, wr_id=9))
    p.a.post_send(rdma(p, e.IBV_WR_RDMA_WRITE_WITH_IMM, length=length, imm=7))
    if receive_late:
        assert poll(p.cq_a, 1, 0.3) == []   # RNR NAKed: it waits for a receive
        p.b.post_recv(recv_wr(p.dst, 8, wr_id=9))
    status = e.IBV_WC_SUCCESS if landed else e.IBV_WC_REM_INV_REQ_ERR
    assert [c["status"] for c in poll(p.cq_a, 1, 10)] == [status]
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b)] == [(9, status)]
    assert (states(p.a)[1], states(p.b)[1]) == ((RTS, RTS) if landed else (ERR, ERR))
    assert p.dst.read(length, 0) == (b"M" * length if landed else bytes(length))


MTUS = {1024: e.IBV_MTU_1024, 4096: e.IBV_MTU_4096}


@pytest.mark.parametrize("opcode", [e.IBV_WR_RDMA_WRITE, e.IBV_WR_SEND, e.IBV_WR_RDMA_READ])
@pytest.mark.parametrize("requester_mtu, responder_mtu", [(4096, 1024), (1024, 4096)])
@pytest.mark.parametrize("length", [1000, 3000, 4096])
def test_when_the_two_sides_path_mtus_differ(ctx, gid_index, make_pair, opcode, requester_mtu, responder_mtu,
                                              length):
    # Linux 6.1's rxe, as rxe0 showed it (2026-12-06): a message of one packet at the smaller MTU goes through.
    # Longer: a WRITE is an invalid request (check_rkey: every packet but the last one MTU), both QPs in ERR,
    # nothing lands; a SEND is not held to the MTU and lands whole. A READ is answered in packets of the
    # responder's MTU: from a smaller responder MTU the requester takes the response for the PSN it reserved,
    # whose bytes land, and not the rest, then resends until retry_cnt runs out: RETRY_EXC_ERR, the requester
    # in ERR, the responder still in RTS. From a larger one it takes the single response whole.
    p = make_pair(connect=False)
    to_init(p.a)
    to_init(p.b)
    for qp, dest, mtu in ((p.a, p.b.qp_num, requester_mtu), (p.b, p.a.qp_num, responder_mtu)):
        attr = rtr_attr(ctx, gid_index, dest)
        attr.path_mtu = MTUS[mtu]
        qp.modify(attr, RTR_MASK)
    to_rts(p.a, retry_cnt=2)
    to_rts(p.b)
    source, target = (p.dst, p.src) if opcode == e.IBV_WR_RDMA_READ else (p.src, p.dst)
    source.write(b"M" * length, length)
    if opcode == e.IBV_WR_SEND:
        p.b.post_recv(recv_wr(p.dst, 4096, wr_id=9))
        p.a.post_send(send_wr(p.src, length, opcode))
    else:
        p.a.post_send(rdma(p, opcode, length=length))
    one_packet = length <= min(requester_mtu, responder_mtu)
    refused = not one_packet and (opcode == e.IBV_WR_RDMA_WRITE or opcode == e.IBV_WR_RDMA_READ
                                  and requester_mtu > responder_mtu)
    status = e.IBV_WC_SUCCESS if not refused else \
        e.IBV_WC_REM_INV_REQ_ERR if opcode == e.IBV_WR_RDMA_WRITE else e.IBV_WC_RETRY_EXC_ERR
    assert [c["status"] for c in poll(p.cq_a, 1, 15)] == [status]
    receives = [(c["wr_id"], c["status"], c["byte_len"]) for c in poll(p.cq_b, 1, 0.3)]
    assert receives == ([(9, e.IBV_WC_SUCCESS, length)] if opcode == e.IBV_WR_SEND else [])
    assert (states(p.a)[1], states(p.b)[1]) == ((RTS, RTS) if not refused else (ERR, RTS) if
                                                opcode == e.IBV_WR_RDMA_READ else (ERR, ERR))
    landed = target.read(length, 0)
    expected = length if not refused else 0 if opcode == e.IBV_WR_RDMA_WRITE else responder_mtu
    assert landed == b"M" * expected + bytes(length - expected)


def test_a_full_receive_queue_is_enomem(make_pair):
    p = make_pair(cap=v.qp.QPCap(max_send_wr=2, max_recv_wr=2))  # capacity 3 each
    results = [rdma_error(lambda i=i: p.b.post_recv(recv_wr(p.dst, 8, wr_id=400 + i))) for i in range(5)]
    assert results == [None, None, None, 12, 12]


def test_a_receives_slot_is_free_once_its_message_lands_polled_or_not(make_pair):
    # rxe consumes a receive's WQE as it writes the completion: the slot is free before the program polls it
    # (probed on rxe0: a full receive queue takes one more receive once a SEND has landed, unpolled)
    p = make_pair(cap=v.qp.QPCap(max_send_wr=2, max_recv_wr=2))  # capacity 3 each
    for i in range(3):
        p.b.post_recv(recv_wr(p.dst, 8, wr_id=400 + i))
    assert rdma_error(lambda: p.b.post_recv(recv_wr(p.dst, 8, wr_id=403))) == 12
    p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=300))
    assert [c["status"] for c in poll(p.cq_a, 1)] == [e.IBV_WC_SUCCESS]
    assert rdma_error(lambda: p.b.post_recv(recv_wr(p.dst, 8, wr_id=404))) is None   # its completion not polled yet
    assert rdma_error(lambda: p.b.post_recv(recv_wr(p.dst, 8, wr_id=405))) == 12
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b, 1)] == [(400, e.IBV_WC_SUCCESS)]
    assert rdma_error(lambda: p.b.post_recv(recv_wr(p.dst, 8, wr_id=406))) == 12   # polling frees nothing more


def test_rnr_waits_for_a_late_receive_and_a_full_send_queue_is_enomem(make_pair):
    # No receive posted: the SENDs sit in the send queue, retrying after RNR NAKs, until receives come.
    # (rxe frees a receive slot as a message lands, so receives are posted only into free space here.)
    # retry_cnt 7: rxe's ACK timer, not restarted by RNR NAKs, must not end the wait (conftest.RETRY_FOREVER)
    p = make_pair(cap=v.qp.QPCap(max_send_wr=2, max_recv_wr=2), retry_cnt=RETRY_FOREVER)  # capacity 3 each
    results = [rdma_error(lambda i=i: p.a.post_send(send_wr(p.src, 8, e.IBV_WR_SEND, wr_id=300 + i))) for i in range(5)]
    assert results == [None, None, None, 12, 12]
    assert poll(p.cq_a, 1, 0.3) == []
    for i in range(3):
        p.b.post_recv(recv_wr(p.dst, 8, wr_id=400 + i))
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a, 3)] == [(300 + i, e.IBV_WC_SUCCESS) for i in range(3)]
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_b, 3)] == [(400 + i, e.IBV_WC_SUCCESS) for i in range(3)]


@pytest.mark.parametrize("kind", ["send", "inline send", "write with immediate"])
def test_a_message_that_met_rnr_lands_while_only_the_receiver_polls(make_pair, kind):
    # The retry after an RNR NAK is the NIC's timer (rxe: the kernel's): the receive completes though the
    # sender's program neither polls nor waits on its CQ (in two processes it may be blocked waiting for the
    # receiver, on a socket). Its WR's completion is there when it polls at last.
    # retry_cnt 7: rxe's ACK timer, not restarted by RNR NAKs, must not end the wait (conftest.RETRY_FOREVER)
    p = make_pair(retry_cnt=RETRY_FOREVER)
    p.src.write(b"a late receive", 14)
    if kind == "write with immediate":
        w = rdma(p, e.IBV_WR_RDMA_WRITE_WITH_IMM, length=14, imm=7)
    else:
        w = send_wr(p.src, 14, e.IBV_WR_SEND,
                    flags=e.IBV_SEND_SIGNALED | (e.IBV_SEND_INLINE if kind == "inline send" else 0))
    p.a.post_send(w)                                     # no receive posted yet: RNR NAK, then retries
    time.sleep(0.05)
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=2, offset=1024 if kind == "write with immediate" else 0))
    assert [(c["wr_id"], c["status"], c["byte_len"]) for c in poll(p.cq_b)] == [(2, e.IBV_WC_SUCCESS, 14)]
    assert p.dst.read(14, 0) == b"a late receive"
    assert [(c["wr_id"], c["status"]) for c in poll(p.cq_a)] == [(1, e.IBV_WC_SUCCESS)]
    assert states(p.a) == (RTS, RTS) and states(p.b) == (RTS, RTS)


@pytest.mark.parametrize("build", ["unaligned", "short"])
def test_malformed_atomics_are_refused_at_post(make_pair, build):
    p = make_pair()
    w = send_wr(p.src, 8 if build == "unaligned" else 4, e.IBV_WR_ATOMIC_FETCH_AND_ADD)
    w.set_wr_atomic(p.dst.rkey, p.dst.buf + (1 if build == "unaligned" else 0), 3, 0)
    assert rdma_error(lambda: p.a.post_send(w)) == EINVAL
    assert poll(p.cq_a, 1, 0.2) == []


def test_too_many_sges_and_oversized_inline_are_refused_at_post(make_pair):
    p = make_pair()
    w = v.wr.SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=3, sg=[v.wr.SGE(p.src.buf, 8, p.src.lkey)] * 3)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    assert rdma_error(lambda: p.a.post_send(w)) == EINVAL
    w = send_wr(p.src, 100, e.IBV_WR_RDMA_WRITE, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    assert rdma_error(lambda: p.a.post_send(w)) == EINVAL
    sg = [v.wr.SGE(p.dst.buf, 4, p.dst.lkey)] * 3
    assert rdma_error(lambda: p.b.post_recv(v.wr.RecvWR(wr_id=9, num_sge=3, sg=sg))) == EINVAL
    assert states(p.a) == (RTS, RTS)
