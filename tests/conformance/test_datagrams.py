"""UD (datagrams: address handles, the GRH a receive starts with, what is lost without a word) and UC
(connected, unacknowledged: its state machine, and what its responder drops)."""
import struct
import time
from errno import EINVAL, ENODATA

import pytest

from rdmalab import verbs as v

from .conftest import ALL_ACCESS, PORT, e, observe, poll, rdma_error, recv_wr, send_wr, states

QKEY = 0x11111111
GRH = 40


@pytest.fixture
def ud(ctx, gid_index, pd):
    """Two UD QPs in RTS (QP(pd, init, QPAttr) takes a UD QP to RTS), each with its own CQ, an AH to
    this port's routable GID, and a buffer each."""
    made = []

    class UD:
        cq_a, cq_b = v.cq.CQ(ctx, 16), v.cq.CQ(ctx, 16)
        attr = v.qp.QPAttr(port_num=PORT)
        attr.qkey = QKEY
        a = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq_a, rcq=cq_a, cap=v.qp.QPCap(4, 4, 2, 2)), attr)
        b = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq_b, rcq=cq_b, cap=v.qp.QPCap(4, 4, 2, 2)), attr)
        src = v.mr.MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
        dst = v.mr.MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
        ah = address(ctx, pd, gid_index)

        def send(self, length, qkey=QKEY, opcode=e.IBV_WR_SEND, imm=0, wr_id=1, fill=b"D", qp_num=None, ah=None):
            self.src.write(fill * length, length)
            w = send_wr(self.src, length, opcode, wr_id=wr_id, imm=imm)
            w.set_wr_ud(ah or self.ah, self.b.qp_num if qp_num is None else qp_num, qkey)
            self.a.post_send(w)

        def receive(self, length=GRH + 1024, wr_id=50):
            self.dst.write(b"\xee" * length, length)
            self.b.post_recv(recv_wr(self.dst, length, wr_id))

    made.append(UD())
    yield made[0]
    u = made[0]
    for obj in (u.ah, u.a, u.b, u.src, u.dst, u.cq_a, u.cq_b):
        obj.close()


def address(ctx, pd, gid_index, **route):
    gr = v.addr.GlobalRoute(dgid=ctx.query_gid(PORT, gid_index), sgid_index=gid_index, **route)
    return v.addr.AH(pd, attr=v.addr.AHAttr(port_num=PORT, is_global=1, gr=gr))


def one_wc(cq, timeout=3.0):
    """The next work completion itself (poll() gives dicts without src_qp)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n, wcs = cq.poll(1)
        if n:
            return wcs[0]
    raise AssertionError("no completion")


def ipv4_grh(raw, ctx, gid_index):
    """What the 40 bytes say, without the parts that differ between devices (the IP identification;
    the addresses are compared with the port's GID)."""
    ver_ihl, tos, total, _id, frag, ttl, proto, checksum, source, dest = struct.unpack("!BBHHHBBH4s4s", raw[20:])
    gid = bytes.fromhex(str(ctx.query_gid(PORT, gid_index)).replace(":", ""))
    fields = dict(zeros=raw[:20] == bytes(20), ver_ihl=ver_ihl, tos=tos, total_length=total, flags_frag=frag,
                  ttl=ttl, protocol=proto, checksum=checksum, source_is_gid=source == gid[12:],
                  destination_is_gid=dest == gid[12:])
    observe("GRH (IPv4)", fields)
    return fields


def test_ud_send_arrives_after_a_grh_holding_the_ipv4_header(ctx, gid_index, ud):
    ud.receive(wr_id=50)
    ud.send(100, wr_id=7)
    assert [(c["wr_id"], c["status"], c["opcode"], c["byte_len"], c["wc_flags"]) for c in poll(ud.cq_a)] == \
        [(7, e.IBV_WC_SUCCESS, e.IBV_WC_SEND, 100, 0)]
    wc = one_wc(ud.cq_b)
    got = (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.wc_flags, wc.src_qp == ud.a.qp_num, wc.qp_num == ud.b.qp_num)
    observe("receive (wr_id, status, opcode, byte_len = payload + 40, wc_flags, src_qp, qp_num)", list(got))
    assert got == (50, e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 140, e.IBV_WC_GRH, True, True)
    assert ud.dst.read(101, GRH) == b"D" * 100 + b"\xee"
    # on RoCE v2 with an IPv4 GID, the GRH's last 20 bytes are the packet's IPv4 header: its length
    # counts UDP 8 + BTH 12 + DETH 8 + payload + ICRC 4; don't-fragment; TTL 64; UDP; checksum 0
    # (rxe's loopback skips the IP stack, which would compute it)
    assert ipv4_grh(ud.dst.read(GRH, 0), ctx, gid_index) == dict(
        zeros=True, ver_ihl=0x45, tos=0, total_length=20 + 8 + 12 + 8 + 100 + 4, flags_frag=0x4000, ttl=64,
        protocol=17, checksum=0, source_is_gid=True, destination_is_gid=True)


def test_ud_send_with_imm_pads_the_payload_to_four_bytes(ctx, gid_index, ud):
    ud.receive()
    ud.send(10, opcode=e.IBV_WR_SEND_WITH_IMM, imm=0x1234)
    assert [(c["status"], c["wc_flags"]) for c in poll(ud.cq_a)] == [(e.IBV_WC_SUCCESS, e.IBV_WC_WITH_IMM)]
    assert [(c["byte_len"], c["imm_data"], c["wc_flags"]) for c in poll(ud.cq_b)] == \
        [(50, 0x1234, e.IBV_WC_GRH | e.IBV_WC_WITH_IMM)]
    assert ipv4_grh(ud.dst.read(GRH, 0), ctx, gid_index)["total_length"] == 20 + 8 + 12 + 8 + 4 + 12 + 4


def test_ud_zero_length_send_delivers_just_the_grh(ud):
    ud.receive()
    ud.send(0)
    assert [c["byte_len"] for c in poll(ud.cq_a)] == [0]
    assert [(c["status"], c["byte_len"]) for c in poll(ud.cq_b)] == [(e.IBV_WC_SUCCESS, GRH)]


def test_ud_grh_from_a_link_local_gid_is_an_ipv6_header(ctx, pd, ud):
    ah = address(ctx, pd, 0, traffic_class=3, hop_limit=5, flow_label=7)
    ud.receive()
    ud.send(21, ah=ah)
    assert [c["status"] for c in poll(ud.cq_a)] == [e.IBV_WC_SUCCESS]
    assert [c["byte_len"] for c in poll(ud.cq_b)] == [GRH + 21]
    first, length, next_header, hops, source, dest = struct.unpack("!IHBB16s16s", ud.dst.read(GRH, 0))
    gid = bytes.fromhex(str(ctx.query_gid(PORT, 0)).replace(":", ""))
    # version 6, the AH's traffic class, no flow label; length: UDP..ICRC with the payload padded to 24;
    # the hop limit is the route's (64), not the AH's
    fields = [hex(first), length, next_header, hops, source == gid, dest == gid]
    observe("GRH (IPv6)", fields)
    assert fields == [hex(6 << 28 | 3 << 20), 8 + 12 + 8 + 24 + 4, 17, 64, True, True]
    ah.close()


def test_ud_wrong_qkey_is_dropped_silently(ud):
    ud.receive(wr_id=51)   # one receive: whichever datagram it takes is the one that arrived
    ud.send(8, qkey=0x22, wr_id=1, fill=b"A")
    ud.send(8, qkey=0x80000000 | QKEY, wr_id=2, fill=b"B")   # (rxe takes no "use my own Q_Key" bit either)
    ud.send(8, wr_id=3, fill=b"C")
    assert [(c["wr_id"], c["status"]) for c in poll(ud.cq_a, 3)] == [(i, e.IBV_WC_SUCCESS) for i in (1, 2, 3)]
    assert [(c["wr_id"], c["byte_len"]) for c in poll(ud.cq_b, 2, timeout=1.0)] == [(51, GRH + 8)]
    assert ud.dst.read(8, GRH) == b"C" * 8
    assert states(ud.b) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)


def test_ud_send_larger_than_the_mtu_completes_and_is_lost(ctx, ud):
    mtu = 128 << ctx.query_port(PORT).active_mtu   # one packet at most, of the port's MTU (rxe0's: 1024)
    ud.receive(length=GRH + mtu + 1000, wr_id=52)
    ud.send(mtu + 1, wr_id=1, fill=b"A")
    ud.send(mtu, wr_id=2, fill=b"B")
    assert [(c["wr_id"], c["status"], c["byte_len"]) for c in poll(ud.cq_a, 2)] == \
        [(1, e.IBV_WC_SUCCESS, mtu + 1), (2, e.IBV_WC_SUCCESS, mtu)]
    assert [(c["wr_id"], c["byte_len"]) for c in poll(ud.cq_b, 2, timeout=1.0)] == [(52, GRH + mtu)]
    assert ud.dst.read(mtu + 1, GRH) == b"B" * mtu + b"\xee"
    assert states(ud.a) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)


def test_ud_reaches_only_a_ud_qp_ready_to_receive(ctx, pd, ud):
    """A QP in INIT drops a datagram, one in RTR takes it; a number nobody has loses it."""
    c = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=ud.cq_b, rcq=ud.cq_b, cap=v.qp.QPCap(4, 4)))
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=PORT)
    a.qkey = QKEY
    c.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
    c.post_recv(recv_wr(ud.dst, 100, wr_id=60))
    ud.send(8, qp_num=c.qp_num, wr_id=1)
    assert poll(ud.cq_b, 1, timeout=0.2) == []   # (time for a datagram on a wire to arrive, and be dropped)
    c.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
    ud.send(9, qp_num=c.qp_num, wr_id=2)
    ud.send(10, qp_num=0xABCDE, wr_id=3)
    assert [(c_["wr_id"], c_["status"]) for c_ in poll(ud.cq_a, 3)] == [(i, e.IBV_WC_SUCCESS) for i in (1, 2, 3)]
    assert [(c_["wr_id"], c_["byte_len"]) for c_ in poll(ud.cq_b, 2, timeout=1.0)] == [(60, GRH + 9)]
    c.close()


def test_ud_receive_too_small_fails_and_takes_the_qp_to_err(ud):
    ud.receive(length=60, wr_id=53)
    ud.dst.write(b"\xee" * 100, 100)
    ud.send(100)
    assert [c["status"] for c in poll(ud.cq_a)] == [e.IBV_WC_SUCCESS]   # the sender never knows
    assert [(c["wr_id"], c["status"], c["byte_len"]) for c in poll(ud.cq_b)] == [(53, e.IBV_WC_LOC_QP_OP_ERR, 0)]
    assert states(ud.b) == (e.IBV_QPS_RTS, e.IBV_QPS_ERR)
    landed = ud.dst.read(GRH + 20, 0)   # the GRH was written, then the payload did not fit
    observe("GRH landed, payload did not", [landed[20] == 0x45, landed[GRH:] == b"\xee" * 20])
    assert landed[20] == 0x45 and landed[GRH:] == b"\xee" * 20


def test_ud_rdma_write_fails_at_completion_and_the_qp_enters_err(ud):
    w = send_wr(ud.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=9)
    w.set_wr_ud(ud.ah, ud.b.qp_num, QKEY)
    w.set_wr_rdma(ud.dst.rkey, ud.dst.buf)
    ud.a.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(ud.cq_a)] == [(9, e.IBV_WC_LOC_QP_OP_ERR)]
    assert states(ud.a) == (e.IBV_QPS_RTS, e.IBV_QPS_ERR)


def ud_modify(qp, state, mask, **attrs):
    a = v.qp.QPAttr(qp_state=state, port_num=PORT)
    for k, val in attrs.items():
        setattr(a, k, val)
    return rdma_error(lambda: qp.modify(a, e.IBV_QP_STATE | mask))


def test_ud_state_machine_takes_a_qkey_and_only_a_send_psn(ctx, pd):
    with v.cq.CQ(ctx, 8) as cq:
        qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
        P, K, Q = e.IBV_QP_PORT, e.IBV_QP_PKEY_INDEX, e.IBV_QP_QKEY
        assert ud_modify(qp, e.IBV_QPS_INIT, P | K) == EINVAL                       # Q_Key required
        assert ud_modify(qp, e.IBV_QPS_INIT, P | K | Q | e.IBV_QP_ACCESS_FLAGS) == EINVAL  # no access flags
        assert ud_modify(qp, e.IBV_QPS_INIT, P | K | Q, qkey=5) is None
        assert ud_modify(qp, e.IBV_QPS_INIT, Q, qkey=6) is None
        assert ud_modify(qp, e.IBV_QPS_RTR, e.IBV_QP_AV) == EINVAL                 # no address: per WR
        assert ud_modify(qp, e.IBV_QPS_RTR, Q, qkey=7) is None
        assert ud_modify(qp, e.IBV_QPS_RTS, 0) == EINVAL                           # send PSN required
        assert ud_modify(qp, e.IBV_QPS_RTS, e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT) == EINVAL
        assert ud_modify(qp, e.IBV_QPS_RTS, e.IBV_QP_SQ_PSN | Q, sq_psn=0x1000045, qkey=8) is None
        assert ud_modify(qp, e.IBV_QPS_RTS, e.IBV_QP_SQ_PSN, sq_psn=1) == EINVAL
        a, _ = qp.query(e.IBV_QP_QKEY | e.IBV_QP_SQ_PSN | e.IBV_QP_PATH_MTU | e.IBV_QP_PORT)
        got = [a.qp_state, a.qkey, a.sq_psn, a.path_mtu, a.port_num, a.dest_qp_num, a.qp_access_flags]
        observe("UD query (state, qkey, sq_psn, path_mtu, port, dest_qp_num, access)", got)
        assert got == [e.IBV_QPS_RTS, 8, 0x45, e.IBV_MTU_256, PORT, 0, 0]   # 24-bit PSN; no path: MTU 256
        qp.close()


def test_ah_checks(ctx, gid_index, pd):
    gid = ctx.query_gid(PORT, gid_index)

    def ah(is_global=1, sgid_index=gid_index, dgid=gid, port=PORT):
        gr = v.addr.GlobalRoute(dgid=v.addr.GID(str(dgid)), sgid_index=sgid_index)
        return rdma_error(lambda: v.addr.AH(pd, attr=v.addr.AHAttr(port_num=port, is_global=is_global, gr=gr)).close())
    assert ah() is None
    assert ah(is_global=0) == EINVAL                                     # RoCE needs a GRH
    assert ah(sgid_index=5) == ENODATA                                   # no GID there (ENODATA)
    assert ah(port=2) == EINVAL
    assert ah(dgid="0000:0000:0000:0000:0000:0000:0000:0000") == EINVAL
    assert ah(dgid="fe80:0000:0000:0000:0000:0000:0000:0001") == EINVAL  # IPv6 from an IPv4 GID: no route
    assert ah(sgid_index=0, dgid=gid) == EINVAL                          # and IPv4 from a link-local one
    assert ah(sgid_index=0, dgid="fe80:0000:0000:0000:0000:0000:0000:0001") is None
    assert ah(dgid="0000:0000:0000:0000:0000:ffff:0102:0304") is None    # any address of the right kind


# ---------------------------------------------------------------- UC

def uc_qp(pd, cq):
    return v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UC, scq=cq, rcq=cq, cap=v.qp.QPCap(8, 8)))


def test_uc_state_machine(ctx, gid_index, pd):
    P, K, A = e.IBV_QP_PORT, e.IBV_QP_PKEY_INDEX, e.IBV_QP_ACCESS_FLAGS
    AV, MTU, DQ, RQ, SQ = e.IBV_QP_AV, e.IBV_QP_PATH_MTU, e.IBV_QP_DEST_QPN, e.IBV_QP_RQ_PSN, e.IBV_QP_SQ_PSN
    with v.cq.CQ(ctx, 8) as cq:
        a, b = uc_qp(pd, cq), uc_qp(pd, cq)
        gr = v.addr.GlobalRoute(dgid=ctx.query_gid(PORT, gid_index), sgid_index=gid_index)
        av = v.addr.AHAttr(port_num=PORT, is_global=1, gr=gr)
        assert ud_modify(a, e.IBV_QPS_INIT, P | K) == EINVAL
        assert ud_modify(a, e.IBV_QPS_INIT, P | K | A | e.IBV_QP_QKEY) == EINVAL
        assert ud_modify(a, e.IBV_QPS_INIT, P | K | A, qp_access_flags=e.IBV_ACCESS_REMOTE_WRITE) is None
        rtr = dict(ah_attr=av, dest_qp_num=b.qp_num, rq_psn=10, path_mtu=e.IBV_MTU_1024)
        for extra in (e.IBV_QP_MAX_DEST_RD_ATOMIC, e.IBV_QP_MIN_RNR_TIMER):   # nothing to answer READs with, no RNR
            assert ud_modify(a, e.IBV_QPS_RTR, AV | MTU | DQ | RQ | extra, **rtr) == EINVAL
        assert ud_modify(a, e.IBV_QPS_RTR, AV | MTU | DQ, **rtr) == EINVAL
        assert ud_modify(a, e.IBV_QPS_RTR, AV | MTU | DQ | RQ, **rtr) is None
        for extra in (e.IBV_QP_TIMEOUT, e.IBV_QP_RETRY_CNT, e.IBV_QP_RNR_RETRY, e.IBV_QP_MAX_QP_RD_ATOMIC):
            assert ud_modify(a, e.IBV_QPS_RTS, SQ | extra, sq_psn=20) == EINVAL   # no ACKs: no timers, no retries
        assert ud_modify(a, e.IBV_QPS_RTS, 0) == EINVAL
        assert ud_modify(a, e.IBV_QPS_RTS, SQ, sq_psn=20) is None
        assert ud_modify(a, e.IBV_QPS_RTS, A, qp_access_flags=e.IBV_ACCESS_REMOTE_WRITE) is None
        q, _ = a.query(e.IBV_QP_STATE)
        got = [q.qp_state, q.path_mtu, q.rq_psn, q.sq_psn, q.dest_qp_num == b.qp_num, q.qp_access_flags,
               q.max_rd_atomic, q.max_dest_rd_atomic, q.timeout, q.retry_cnt, q.rnr_retry]
        observe("UC query", got)
        assert got == [e.IBV_QPS_RTS, e.IBV_MTU_1024, 10, 20, True, e.IBV_ACCESS_REMOTE_WRITE, 0, 0, 0, 0, 0]
        a.close()
        b.close()


@pytest.fixture
def uc(ctx, gid_index, pd):
    """Two UC QPs connected to each other, in RTS, each with its own CQ."""
    cqs = [v.cq.CQ(ctx, 16), v.cq.CQ(ctx, 16)]
    qps = [uc_qp(pd, cq) for cq in cqs]
    gr = v.addr.GlobalRoute(dgid=ctx.query_gid(PORT, gid_index), sgid_index=gid_index)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE   # what UC can use
    for qp, peer, psn in ((qps[0], qps[1], 100), (qps[1], qps[0], 200)):
        assert ud_modify(qp, e.IBV_QPS_INIT, e.IBV_QP_PORT | e.IBV_QP_PKEY_INDEX | e.IBV_QP_ACCESS_FLAGS,
                         qp_access_flags=access) is None
        assert ud_modify(qp, e.IBV_QPS_RTR, e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN,
                         ah_attr=v.addr.AHAttr(port_num=PORT, is_global=1, gr=gr), dest_qp_num=peer.qp_num,
                         rq_psn=300 - psn, path_mtu=e.IBV_MTU_1024) is None
        assert ud_modify(qp, e.IBV_QPS_RTS, e.IBV_QP_SQ_PSN, sq_psn=psn) is None
    mrs = [v.mr.MR(pd, 8192, ALL_ACCESS), v.mr.MR(pd, 8192, ALL_ACCESS)]

    class UC:
        a, b = qps
        cq_a, cq_b = cqs
        src, dst = mrs
    yield UC
    for obj in qps + mrs + cqs:
        obj.close()


def test_uc_send_and_write_arrive(uc):
    uc.src.write(b"U" * 3000, 3000)
    uc.b.post_recv(recv_wr(uc.dst, 4096, wr_id=70))
    uc.a.post_send(send_wr(uc.src, 3000, e.IBV_WR_SEND, wr_id=1))   # three packets at MTU 1024
    w = send_wr(uc.src, 100, e.IBV_WR_RDMA_WRITE, wr_id=2)
    w.set_wr_rdma(uc.dst.rkey, uc.dst.buf + 5000)
    uc.a.post_send(w)
    assert [(c["wr_id"], c["status"], c["opcode"], c["byte_len"]) for c in poll(uc.cq_a, 2)] == \
        [(1, e.IBV_WC_SUCCESS, e.IBV_WC_SEND, 3000), (2, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE, 100)]
    assert [(c["wr_id"], c["opcode"], c["byte_len"], c["wc_flags"]) for c in poll(uc.cq_b)] == \
        [(70, e.IBV_WC_RECV, 3000, e.IBV_WC_GRH)]
    # nothing tells the target that a UC WRITE landed (its sender's completion says only that it was
    # sent): on a wire it may land after the SEND's receive completes, so look for a while
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and (uc.dst.read(101, 5000) != b"U" * 100 + b"\0"
                                           or uc.b.query(e.IBV_QP_RQ_PSN)[0].rq_psn != 104):
        time.sleep(0.01)
    assert uc.dst.read(3001, 0) == b"U" * 3000 + b"\0" and uc.dst.read(101, 5000) == b"U" * 100 + b"\0"
    a, _ = uc.a.query(e.IBV_QP_SQ_PSN)
    b, _ = uc.b.query(e.IBV_QP_RQ_PSN)
    observe("PSNs (a's send, b's receive)", [a.sq_psn, b.rq_psn])
    assert (a.sq_psn, b.rq_psn) == (104, 104)


def test_uc_responder_drops_what_it_cannot_take_and_nobody_is_told(uc):
    """No receive posted, or a bad rkey: the message is dropped, both QPs stay in RTS, and the next
    message arrives (the responder resynchronises on it). Only a receive too small fails, there."""
    uc.src.write(b"X" * 10, 10)
    uc.a.post_send(send_wr(uc.src, 10, e.IBV_WR_SEND, wr_id=1))           # no receive posted
    w = send_wr(uc.src, 10, e.IBV_WR_RDMA_WRITE, wr_id=2)
    w.set_wr_rdma(uc.dst.rkey + 1234, uc.dst.buf)                          # no such key
    uc.a.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(uc.cq_a, 2)] == [(1, e.IBV_WC_SUCCESS), (2, e.IBV_WC_SUCCESS)]
    assert states(uc.a) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS) and states(uc.b) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)
    uc.b.post_recv(recv_wr(uc.dst, 16, wr_id=71))
    uc.a.post_send(send_wr(uc.src, 10, e.IBV_WR_SEND, wr_id=3))
    assert [(c["wr_id"], c["status"]) for c in poll(uc.cq_a)] == [(3, e.IBV_WC_SUCCESS)]
    assert [(c["wr_id"], c["status"], c["byte_len"]) for c in poll(uc.cq_b)] == [(71, e.IBV_WC_SUCCESS, 10)]
    assert uc.dst.read(16, 0) == b"X" * 10 + bytes(6)
    uc.b.post_recv(recv_wr(uc.dst, 4, wr_id=72))
    uc.a.post_send(send_wr(uc.src, 10, e.IBV_WR_SEND, wr_id=4))           # a receive too small
    assert [(c["wr_id"], c["status"]) for c in poll(uc.cq_a)] == [(4, e.IBV_WC_SUCCESS)]
    assert [(c["wr_id"], c["status"]) for c in poll(uc.cq_b)] == [(72, e.IBV_WC_LOC_QP_OP_ERR)]
    assert states(uc.a) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS) and states(uc.b) == (e.IBV_QPS_RTS, e.IBV_QPS_ERR)


def test_uc_rdma_read_fails_at_completion(uc):
    w = send_wr(uc.src, 8, e.IBV_WR_RDMA_READ, wr_id=5)
    w.set_wr_rdma(uc.dst.rkey, uc.dst.buf)
    uc.a.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(uc.cq_a)] == [(5, e.IBV_WC_LOC_QP_OP_ERR)]
    assert states(uc.a) == (e.IBV_QPS_RTS, e.IBV_QPS_ERR)


def test_uc_send_with_invalidate_fails_at_completion_and_sends_nothing(uc):
    uc.b.post_recv(recv_wr(uc.dst, 64, wr_id=70))
    w = send_wr(uc.src, 8, e.IBV_WR_SEND_WITH_INV, wr_id=6)
    w.imm_data = 0x12345   # (the key it would invalidate)
    uc.a.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(uc.cq_a)] == [(6, e.IBV_WC_LOC_QP_OP_ERR)]
    assert poll(uc.cq_b, 1, timeout=0.3) == []
    assert states(uc.a) == (e.IBV_QPS_RTS, e.IBV_QPS_ERR) and states(uc.b) == (e.IBV_QPS_RTS, e.IBV_QPS_RTS)


def test_ud_answer_through_an_ah_made_from_the_completion(pd, ud):
    """ibv_create_ah_from_wc: the GRH names the sender's GID, the completion its QP: enough to reply."""
    ud.receive(wr_id=54)
    ud.send(16, wr_id=1)
    poll(ud.cq_a)
    wc = one_wc(ud.cq_b)
    back = v.addr.AH(pd, wc=wc, grh=ud.dst.buf, port_num=PORT)
    ud.a.post_recv(recv_wr(ud.src, GRH + 64, wr_id=55))
    ud.dst.write(b"R" * 8, 8, GRH)
    w = send_wr(ud.dst, 8, e.IBV_WR_SEND, wr_id=2, offset=GRH)
    w.set_wr_ud(back, wc.src_qp, QKEY)
    ud.b.post_send(w)
    assert [(c["wr_id"], c["status"]) for c in poll(ud.cq_b)] == [(2, e.IBV_WC_SUCCESS)]
    assert [(c["wr_id"], c["byte_len"]) for c in poll(ud.cq_a)] == [(55, GRH + 8)]
    assert ud.src.read(8, GRH) == b"R" * 8
    back.close()
