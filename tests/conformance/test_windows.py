"""Memory windows (issue 14): binding type 1 and type 2 windows, access through a window's key, and
invalidation, local (LOCAL_INV) and remote (SEND_WITH_INV). Every expectation is what rxe0 (Linux 6.1)
does, probed in the guest; some are not what the spec says:
- a request through a window is checked against its MR's bounds, not the window's;
- a SEND_WITH_INV of a key the responder may not invalidate fails the receive (REM_INV_REQ_ERR) and the
  responder's QP, yet the sender's SEND succeeds;
- the receive of a SEND_WITH_INV carries wc_flags 5 (GRH and the kernel's WITH_INVALIDATE bit, which
  libibverbs reads as IP_CSUM_OK) and the invalidated key in imm_data.
"""
import time
from errno import EINVAL

import pytest

from rdmalab import verbs as v
from .conftest import ALL_ACCESS, e, observe, poll, rdma_error, recv_wr, send_wr, states

WINDOW_ACCESS = ALL_ACCESS | e.IBV_ACCESS_MW_BIND
RTS, ERR = e.IBV_QPS_RTS, e.IBV_QPS_ERR


def next_key(key):
    """ibv_inc_rkey: the key with its low byte (the tag) incremented."""
    return key & ~0xFF | (key + 1) & 0xFF


@pytest.fixture
def pair(make_pair):
    """A connected pair whose responder b has an MR `win` that windows may be bound to."""
    p = make_pair()
    p.win = v.mr.MR(p.pd, 4096, WINDOW_ACCESS)
    p.win.write(b"W" * 64, 64)
    p.src.write(b"S" * 64, 64)
    yield p
    observe("window MR", p.win.read(64, 0).decode())


def bind_type2(p, mw, qp=None, cq=None, offset=256, length=512, access=e.IBV_ACCESS_REMOTE_WRITE, mr=None):
    """Post a BIND_MW WR (on b unless told); returns (the window's new key, the bind's completion)."""
    qp, cq = qp or p.b, cq or p.cq_b
    mr = mr or p.win
    w = v.wr.SendWR(wr_id=3, opcode=e.IBV_WR_BIND_MW)
    w.set_bind_wr(mw, v.mr.MWBindInfo(mr, mr.buf + offset, length, access))
    qp.post_send(w)
    [wc] = poll(cq)
    return w.rkey, wc


def bind_type1(p, mw, qp=None, cq=None, offset=256, length=512, access=e.IBV_ACCESS_REMOTE_WRITE):
    qp, cq = qp or p.b, cq or p.cq_b
    qp.bind_mw(mw, v.mr.MWBind(v.mr.MWBindInfo(p.win, p.win.buf + offset, length, access), e.IBV_SEND_SIGNALED,
                               wr_id=4))
    [wc] = poll(cq)
    return wc


def write(p, rkey, offset, length=8, opcode=e.IBV_WR_RDMA_WRITE, wr_id=7):
    """a writes (or reads) `length` bytes at offset `offset` of b's window MR through `rkey`: a's completion."""
    w = send_wr(p.src, length, opcode, wr_id=wr_id)
    w.set_wr_rdma(rkey, p.win.buf + offset)
    p.a.post_send(w)
    [wc] = poll(p.cq_a)
    return wc


def invalidate(qp, cq, key):
    w = v.wr.SendWR(wr_id=9, opcode=e.IBV_WR_LOCAL_INV)
    w.imm_data = key
    qp.post_send(w)
    [wc] = poll(cq)
    return wc


def poll_invalidated(cq, key):
    """poll() for the receive of a SEND_WITH_INV, whose imm_data (the key) is recorded only as whether it
    is `key`: keys differ from one device to another."""
    wcs, deadline = [], time.monotonic() + 3
    while not wcs and time.monotonic() < deadline:
        wcs = cq.poll(1)[1]
    got = [dict(wr_id=w.wr_id, status=w.status, opcode=w.opcode, byte_len=w.byte_len, wc_flags=w.wc_flags,
                imm_data_is_the_key=w.imm_data == key) for w in wcs]
    observe("completions", got)
    return got


def test_a_type2_window_bound_on_the_responder_opens_its_mr_under_a_new_key(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    before = mw.rkey
    key, wc = bind_type2(p, mw)
    assert (wc["status"], wc["opcode"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW, 0)
    assert key == next_key(before) and mw.rkey == before   # libibverbs' copy stays: the new key is the WR's
    assert key != p.win.rkey
    wc = write(p, key, 256)
    assert (wc["status"], wc["opcode"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE, 8)
    assert p.win.read(8, 256) == b"S" * 8
    mw.close()


@pytest.mark.parametrize("where", ["before the window", "after it", "across its end", "past the MR"])
def test_a_window_is_checked_against_its_mrs_bounds_as_rxe_does(pair, where):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw, offset=256, length=512)
    offset, length = {"before the window": (0, 8), "after it": (1024, 8), "across its end": (760, 16),
                      "past the MR": (4090, 16)}[where]
    wc = write(p, key, offset, length)
    expected = e.IBV_WC_REM_ACCESS_ERR if where == "past the MR" else e.IBV_WC_SUCCESS
    assert wc["status"] == expected
    assert states(p.b)[1] == (ERR if where == "past the MR" else RTS)
    mw.close()


def test_a_type2_window_serves_only_the_qp_it_was_bound_on(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, wc = bind_type2(p, mw, qp=p.a, cq=p.cq_a)   # bound on the requester's QP, not the responder's
    assert wc["status"] == e.IBV_WC_SUCCESS
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR
    assert states(p.a)[1] == states(p.b)[1] == ERR
    mw.close()


def test_a_window_grants_only_its_own_access(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw, access=e.IBV_ACCESS_REMOTE_WRITE)
    assert write(p, key, 256, opcode=e.IBV_WR_RDMA_READ)["status"] == e.IBV_WC_REM_ACCESS_ERR
    mw.close()


def test_a_window_may_grant_reads_and_atomics(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw, offset=64, access=e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)
    p.win.write((41).to_bytes(8, "little"), 8, 64)
    wc = write(p, key, 64, opcode=e.IBV_WR_RDMA_READ)
    assert wc["status"] == e.IBV_WC_SUCCESS and p.src.read(8, 0) == (41).to_bytes(8, "little")
    w = send_wr(p.src, 8, e.IBV_WR_ATOMIC_FETCH_AND_ADD, wr_id=8)
    w.set_wr_atomic(key, p.win.buf + 64, 1, 0)
    p.a.post_send(w)
    [wc] = poll(p.cq_a)
    assert wc["status"] == e.IBV_WC_SUCCESS and p.win.read(8, 64) == (42).to_bytes(8, "little")
    mw.close()


def test_local_invalidation_closes_the_window_and_leaves_the_mrs_own_key(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw)
    wc = invalidate(p.b, p.cq_b, key)
    assert (wc["status"], wc["opcode"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV, 0)
    assert states(p.b)[1] == RTS
    assert write(p, p.win.rkey, 1024)["status"] == e.IBV_WC_SUCCESS   # the MR's own rkey still works
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR
    mw.close()


def test_a_window_invalidated_can_be_bound_again_only_under_the_key_the_nic_has(pair):
    """libibverbs never updates a type 2 window's rkey, so set_bind_wr() offers the first bind's key again:
    the NIC, which moved on to that key, refuses the bind (MW_BIND_ERR)."""
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw)
    invalidate(p.b, p.cq_b, key)
    again, wc = bind_type2(p, mw, length=256)
    assert again == key and wc["status"] == e.IBV_WC_MW_BIND_ERR
    assert states(p.b)[1] == ERR
    mw.close()


def test_remote_invalidation_closes_the_window(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw)
    inbox = v.mr.MR(p.pd, 64, ALL_ACCESS)
    p.b.post_recv(recv_wr(inbox, 64, wr_id=5))
    w = send_wr(p.src, 16, e.IBV_WR_SEND_WITH_INV, wr_id=11)
    w.imm_data = key
    p.a.post_send(w)
    [sent] = poll(p.cq_a)
    [got] = poll_invalidated(p.cq_b, key)
    assert (sent["status"], sent["opcode"], sent["byte_len"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_SEND, 16)
    assert (got["status"], got["opcode"], got["byte_len"], got["wc_flags"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 16, 5)
    assert got["imm_data_is_the_key"]
    assert inbox.read(16, 0) == b"S" * 16
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR
    mw.close()
    inbox.close()


@pytest.mark.parametrize("what", ["an MR's key", "an unknown key"])
def test_remote_invalidation_of_a_key_that_is_no_window_fails_the_receive_only(pair, what):
    p = pair
    inbox = v.mr.MR(p.pd, 64, ALL_ACCESS)
    p.b.post_recv(recv_wr(inbox, 64, wr_id=5))
    w = v.wr.SendWR(wr_id=11, opcode=e.IBV_WR_SEND_WITH_INV)
    w.imm_data = p.win.rkey if what == "an MR's key" else 0x12345678
    p.a.post_send(w)
    [sent] = poll(p.cq_a)
    [got] = poll(p.cq_b)
    assert sent["status"] == e.IBV_WC_SUCCESS
    assert (got["status"], got["byte_len"]) == (e.IBV_WC_REM_INV_REQ_ERR, 0)
    assert states(p.a)[1] == RTS and states(p.b)[1] == ERR
    inbox.close()


def test_local_invalidation_of_an_mrs_key_fails(pair):
    p = pair
    wc = invalidate(p.b, p.cq_b, p.win.rkey)
    assert wc["status"] == e.IBV_WC_LOC_QP_OP_ERR
    assert states(p.b)[1] == ERR


def test_an_unbound_type1_window_opens_nothing(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_1)
    assert write(p, mw.rkey, 0)["status"] == e.IBV_WC_REM_ACCESS_ERR
    mw.close()


def test_a_type1_window_is_bound_by_bind_mw_and_rebinding_moves_its_key(make_pair):
    p = make_pair()
    p.win = v.mr.MR(p.pd, 4096, WINDOW_ACCESS)
    p.src.write(b"S" * 64, 64)
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_1)
    before = mw.rkey
    wc = bind_type1(p, mw)
    assert (wc["status"], wc["opcode"], wc["wr_id"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW, 4)
    assert mw.rkey == next_key(before)   # ibv_bind_mw updates libibverbs' copy
    key = mw.rkey
    assert write(p, key, 256)["status"] == e.IBV_WC_SUCCESS
    wc = bind_type1(p, mw, qp=p.a, cq=p.cq_a, offset=0, length=1024)   # any QP of the PD may rebind it
    assert wc["status"] == e.IBV_WC_SUCCESS and mw.rkey == next_key(key)
    assert write(p, mw.rkey, 600)["status"] == e.IBV_WC_SUCCESS
    assert p.win.read(8, 600) == b"S" * 8
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR   # the old key died with the rebind
    mw.close()
    p.win.close()


def test_a_type1_window_rebound_with_length_0_opens_nothing(make_pair):
    p = make_pair()
    p.win = v.mr.MR(p.pd, 4096, WINDOW_ACCESS)
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_1)
    bind_type1(p, mw)
    key = mw.rkey
    wc = bind_type1(p, mw, length=0, access=0)
    assert wc["status"] == e.IBV_WC_SUCCESS and mw.rkey == next_key(key)
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR
    mw.close()
    p.win.close()


def test_a_window_closed_takes_its_key_with_it(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw)
    assert write(p, key, 256)["status"] == e.IBV_WC_SUCCESS
    mw.close()
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR


def test_an_mr_with_a_window_bound_is_not_deregistered(pair):
    p = pair
    mr = v.mr.MR(p.pd, 4096, WINDOW_ACCESS)
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    bind_type2(p, mw, mr=mr)
    assert rdma_error(mr.close) == EINVAL
    mw.close()
    assert rdma_error(mr.close) is None


@pytest.mark.parametrize("mw_type", [0, 3])
def test_only_types_1_and_2_exist(pd, mw_type):
    assert rdma_error(lambda: v.mr.MW(pd, mw_type)) == EINVAL


@pytest.mark.parametrize("case", ["bound already", "window of another PD", "length 0", "outside the MR",
                                  "MR without MW_BIND", "writable window on an MR without LOCAL_WRITE"])
def test_a_type2_bind_a_rule_forbids_completes_with_mw_bind_err(pair, case):
    p = pair
    pd = v.pd.PD(p.ctx) if case == "window of another PD" else p.pd
    mw = v.mr.MW(pd, e.IBV_MW_TYPE_2)
    mr = p.win
    if case in ("MR without MW_BIND", "writable window on an MR without LOCAL_WRITE"):
        mr = v.mr.MR(p.pd, 4096, ALL_ACCESS if case == "MR without MW_BIND"
                     else e.IBV_ACCESS_MW_BIND | e.IBV_ACCESS_REMOTE_READ)
    if case == "bound already":
        bind_type2(p, mw)
    offset, length = {"length 0": (0, 0), "outside the MR": (4000, 512)}.get(case, (0, 512))
    _, wc = bind_type2(p, mw, offset=offset, length=length, mr=mr)
    assert wc["status"] == e.IBV_WC_MW_BIND_ERR
    assert states(p.b)[1] == ERR
    mw.close()
    if pd is not p.pd:
        pd.close()


def test_a_type1_window_may_also_be_bound_by_a_bind_mw_wr(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_1)
    key, wc = bind_type2(p, mw)
    assert wc["status"] == e.IBV_WC_SUCCESS
    assert write(p, key, 256)["status"] == e.IBV_WC_SUCCESS
    mw.close()


def test_a_type1_window_cannot_be_invalidated(pair):
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_1)
    bind_type1(p, mw)
    assert invalidate(p.b, p.cq_b, mw.rkey)["status"] == e.IBV_WC_LOC_QP_OP_ERR
    assert states(p.b)[1] == ERR
    mw.close()


@pytest.mark.parametrize("case", ["a type 2 window", "an MR of another PD", "a zero-based window"])
def test_bind_mw_refuses_at_once(pair, case):
    """libibverbs' ibv_bind_mw and rxe's provider check these before posting anything: an errno, no WR."""
    p = pair
    pd = v.pd.PD(p.ctx) if case == "an MR of another PD" else p.pd
    mw = v.mr.MW(pd, e.IBV_MW_TYPE_2 if case == "a type 2 window" else e.IBV_MW_TYPE_1)
    before = mw.rkey
    access = e.IBV_ACCESS_REMOTE_WRITE | (e.IBV_ACCESS_ZERO_BASED if case == "a zero-based window" else 0)
    bind = v.mr.MWBind(v.mr.MWBindInfo(p.win, p.win.buf, 512, access), e.IBV_SEND_SIGNALED)
    errno = rdma_error(lambda: p.b.bind_mw(mw, bind))
    assert errno == (1 if case == "an MR of another PD" else 22)   # EPERM, EINVAL
    assert mw.rkey == before and poll(p.cq_b, 1, timeout=0.3) == [] and states(p.b)[1] == RTS
    mw.close()
    if pd is not p.pd:
        pd.close()


def test_a_window_used_then_invalidated_refuses_the_next_request(pair):
    """(soft0 caches what a request through a key found; the cache must see the window die.)"""
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, _ = bind_type2(p, mw)
    assert [write(p, key, 256 + 8 * i, wr_id=i)["status"] for i in range(3)] == [e.IBV_WC_SUCCESS] * 3
    invalidate(p.b, p.cq_b, key)
    p.win.write(b"W" * 64, 64, 256)
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR
    assert p.win.read(64, 256) == b"W" * 64
    mw.close()


def test_a_zero_based_window_takes_offsets_from_its_start(pair):
    """(ibv_bind_mw refuses ZERO_BASED, a BIND_MW WR takes it.)"""
    p = pair
    mw = v.mr.MW(p.pd, e.IBV_MW_TYPE_2)
    key, wc = bind_type2(p, mw, offset=256, access=e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_ZERO_BASED)
    assert wc["status"] == e.IBV_WC_SUCCESS
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=7)
    w.set_wr_rdma(key, 8)   # 8 bytes into the window
    p.a.post_send(w)
    assert poll(p.cq_a)[0]["status"] == e.IBV_WC_SUCCESS
    assert p.win.read(8, 256 + 8) == b"S" * 8 and p.win.read(8, 8) == b"W" * 8
    assert write(p, key, 256)["status"] == e.IBV_WC_REM_ACCESS_ERR   # the MR's address, past its end as an offset
    mw.close()
