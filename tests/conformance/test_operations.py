"""Successful operations: what lands where, and the completions each side sees."""
import struct

from rdmalab import verbs as v

from .conftest import e, poll, recv_wr, send_wr

GRH = e.IBV_WC_GRH  # RoCE receive completions carry a GRH


def test_rdma_write_lands_and_completes_only_on_the_requester(make_pair):
    p = make_pair()
    p.src.write(b"x" * 100, 100)
    w = send_wr(p.src, 100, e.IBV_WR_RDMA_WRITE, wr_id=7)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf + 10)
    p.a.post_send(w)
    [wc] = poll(p.cq_a)
    assert (wc["wr_id"], wc["status"], wc["opcode"], wc["byte_len"]) == (7, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE, 100)
    assert wc["qp_num"] == p.a.qp_num
    assert p.dst.read(12, 8) == b"\0\0" + b"x" * 10
    assert poll(p.cq_b, 1, 0.2) == []  # one-sided: the target sees nothing


def test_zero_length_write_completes(make_pair):
    p = make_pair()
    w = v.wr.SendWR(wr_id=8, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[v.wr.SGE(p.src.buf, 0, p.src.lkey)])
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    assert [(c["status"], c["byte_len"]) for c in poll(p.cq_a)] == [(e.IBV_WC_SUCCESS, 0)]


def test_rdma_read_fetches_remote_bytes(make_pair):
    p = make_pair()
    p.dst.write(b"R" * 16, 16)
    w = send_wr(p.src, 16, e.IBV_WR_RDMA_READ, wr_id=9)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    [wc] = poll(p.cq_a)
    assert (wc["status"], wc["opcode"], wc["byte_len"]) == (e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_READ, 16)
    assert p.src.read(16, 0) == b"R" * 16


def test_write_with_imm_consumes_a_receive_and_reports_imm(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=55, offset=2048))
    w = send_wr(p.src, 32, e.IBV_WR_RDMA_WRITE_WITH_IMM, wr_id=10, imm=0x12345678)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf + 100)
    p.a.post_send(w)
    [req] = poll(p.cq_a)
    [resp] = poll(p.cq_b)
    assert (req["opcode"], req["byte_len"], req["wc_flags"]) == (e.IBV_WC_RDMA_WRITE, 32, e.IBV_WC_WITH_IMM)
    assert (resp["wr_id"], resp["status"], resp["opcode"], resp["byte_len"], resp["imm_data"]) == \
        (55, e.IBV_WC_SUCCESS, e.IBV_WC_RECV_RDMA_WITH_IMM, 32, 0x12345678)
    assert resp["wc_flags"] == GRH | e.IBV_WC_WITH_IMM and resp["qp_num"] == p.b.qp_num


def test_write_with_imm_into_a_zero_length_receive_is_fine(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 0, wr_id=11))
    w = send_wr(p.src, 64, e.IBV_WR_RDMA_WRITE_WITH_IMM, imm=7)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf + 512)
    p.a.post_send(w)
    assert [c["status"] for c in poll(p.cq_a)] == [e.IBV_WC_SUCCESS]
    assert [(c["byte_len"], c["imm_data"]) for c in poll(p.cq_b)] == [(64, 7)]


def test_send_into_a_posted_receive(make_pair):
    p = make_pair()
    p.src.write(b"S" * 40, 40)
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=56, offset=2048))
    p.a.post_send(send_wr(p.src, 40, e.IBV_WR_SEND, wr_id=11))
    [req] = poll(p.cq_a)
    [resp] = poll(p.cq_b)
    assert (req["opcode"], req["byte_len"], req["wc_flags"]) == (e.IBV_WC_SEND, 40, 0)
    assert (resp["wr_id"], resp["opcode"], resp["byte_len"], resp["wc_flags"]) == (56, e.IBV_WC_RECV, 40, GRH)
    assert p.dst.read(41, 2048) == b"S" * 40 + b"\0"


def test_send_with_imm(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 64, wr_id=57))
    p.a.post_send(send_wr(p.src, 40, e.IBV_WR_SEND_WITH_IMM, wr_id=12, imm=0xABCDEF01))
    assert poll(p.cq_a)[0]["wc_flags"] == e.IBV_WC_WITH_IMM
    [resp] = poll(p.cq_b)
    assert (resp["opcode"], resp["imm_data"], resp["wc_flags"]) == (e.IBV_WC_RECV, 0xABCDEF01, GRH | e.IBV_WC_WITH_IMM)


def test_zero_byte_send(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 0, wr_id=12))
    p.a.post_send(v.wr.SendWR(wr_id=13, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(p.src.buf, 0, p.src.lkey)]))
    assert [c["byte_len"] for c in poll(p.cq_a)] == [0]
    assert [(c["opcode"], c["byte_len"]) for c in poll(p.cq_b)] == [(e.IBV_WC_RECV, 0)]


def test_multi_packet_send(make_pair):
    p = make_pair()
    p.src.write(bytes(range(256)) * 15 + bytes(160), 4000)
    p.b.post_recv(recv_wr(p.dst, 4000, wr_id=14))
    p.a.post_send(v.wr.SendWR(wr_id=15, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(p.src.buf, 4000, p.src.lkey)]))
    assert [c["byte_len"] for c in poll(p.cq_a)] == [4000]
    assert [c["byte_len"] for c in poll(p.cq_b)] == [4000]
    assert p.dst.read(4000, 0) == p.src.read(4000, 0)


def test_gather_and_scatter_across_sges(make_pair):
    p = make_pair()
    p.src.write(b"ABCDEFGHIJKLMNOP", 16)
    sg = [v.wr.SGE(p.dst.buf, 4, p.dst.lkey), v.wr.SGE(p.dst.buf + 100, 20, p.dst.lkey)]
    p.b.post_recv(v.wr.RecvWR(wr_id=9, num_sge=2, sg=sg))
    sg = [v.wr.SGE(p.src.buf, 6, p.src.lkey), v.wr.SGE(p.src.buf + 10, 6, p.src.lkey)]
    p.a.post_send(v.wr.SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=2, sg=sg))
    assert [c["byte_len"] for c in poll(p.cq_a)] == [12]
    assert [c["byte_len"] for c in poll(p.cq_b)] == [12]
    assert p.dst.read(4, 0) == b"ABCD" and p.dst.read(10, 100) == b"EFKLMNOP\0\0"


def test_atomics_return_the_old_value(make_pair):
    p = make_pair()
    p.dst.write(struct.pack("<Q", 5), 8, 512)

    def atomic(opcode, compare_add, swap, wr_id):
        w = send_wr(p.src, 8, opcode, wr_id=wr_id)
        w.set_wr_atomic(p.dst.rkey, p.dst.buf + 512, compare_add, swap)
        p.a.post_send(w)
        [wc] = poll(p.cq_a)
        return wc["opcode"], wc["byte_len"], struct.unpack("<Q", p.src.read(8, 0))[0], struct.unpack("<Q", p.dst.read(8, 512))[0]

    assert atomic(e.IBV_WR_ATOMIC_FETCH_AND_ADD, 3, 0, 13) == (e.IBV_WC_FETCH_ADD, 8, 5, 8)
    assert atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, 8, 100, 14) == (e.IBV_WC_COMP_SWAP, 8, 8, 100)
    assert atomic(e.IBV_WR_ATOMIC_CMP_AND_SWP, 8, 200, 15) == (e.IBV_WC_COMP_SWAP, 8, 100, 100)  # no match


def test_atomic_with_a_16_byte_sge_reports_16_bytes(make_pair):
    p = make_pair()
    w = send_wr(p.src, 16, e.IBV_WR_ATOMIC_FETCH_AND_ADD)
    w.set_wr_atomic(p.dst.rkey, p.dst.buf, 3, 0)
    p.a.post_send(w)
    assert [(c["status"], c["byte_len"]) for c in poll(p.cq_a)] == [(e.IBV_WC_SUCCESS, 16)]


def test_unsignaled_wr_gives_no_completion_when_sq_sig_all_is_off(make_pair):
    p = make_pair(sq_sig_all=0)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=20, flags=0)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=21)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    assert [c["wr_id"] for c in poll(p.cq_a, 2, 0.5)] == [21]


def test_inline_data_is_copied_at_post_time_and_needs_no_lkey(make_pair):
    p = make_pair()
    p.src.write(b"inline!!", 8)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, flags=e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE, lkey=0xDEAD)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    assert [c["status"] for c in poll(p.cq_a)] == [e.IBV_WC_SUCCESS]
    assert p.dst.read(8, 0) == b"inline!!"


def test_chained_wrs_complete_in_order(make_pair):
    p = make_pair()
    w1 = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=30)
    w1.set_wr_rdma(p.dst.rkey, p.dst.buf)
    w2 = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE, wr_id=31)
    w2.set_wr_rdma(p.dst.rkey, p.dst.buf + 8)
    w1.next_wr = w2
    p.a.post_send(w1)
    assert [c["wr_id"] for c in poll(p.cq_a, 2)] == [30, 31]


def test_psns_advance_by_packets(make_pair):
    p = make_pair()
    p.b.post_recv(recv_wr(p.dst, 4000, wr_id=1))
    p.a.post_send(send_wr(p.src, 4000, e.IBV_WR_SEND))  # 4 packets at MTU 1024
    poll(p.cq_a)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)  # 1 packet
    poll(p.cq_a)
    attr, _ = p.a.query(e.IBV_QP_SQ_PSN)
    assert attr.sq_psn == 5


def test_link_local_gid_reaches_a_qp_of_the_same_device(ctx, make_pair):
    from .conftest import to_init, to_rtr, to_rts
    p = make_pair(connect=False)
    for qp, peer in ((p.a, p.b), (p.b, p.a)):
        to_init(qp)
        to_rtr(ctx, 0, qp, peer.qp_num)  # GID 0: link-local
        to_rts(qp)
    p.src.write(b"linklocl", 8)
    w = send_wr(p.src, 8, e.IBV_WR_RDMA_WRITE)
    w.set_wr_rdma(p.dst.rkey, p.dst.buf)
    p.a.post_send(w)
    assert [c["status"] for c in poll(p.cq_a)] == [e.IBV_WC_SUCCESS]
    assert p.dst.read(8, 0) == b"linklocl"
