"""Real rxe as the judge of soft0's wire NIC: a soft0 program on the udp link, its NIC in a network
namespace (10.20.0.2), talks RC to an rxe device (rxe1 on 10.20.0.1) as it talks to another soft0.

Runs in the Soft-RoCE guest (make test-softroce PYTEST_ARGS="-m interop"), as root, on the veth pair
and namespace test_rxe_interop.py sets up (its `link` fixture: why rxe needs the initial namespace
is explained there). rxe's packets carry an IPv4 Identification that counts up, which the ICRC covers
and the NIC's UDP socket does not show: the NIC finds it from the ICRC (wire.icrc.ip_id_for).

Both ways, on one connection: rxe1 WRITEs 10 KiB and SENDs 3000 bytes into the soft0 program's memory;
the soft0 program WRITEs 3000 bytes into rxe1's MR, READs 2500 back, does a FETCH_ADD, and at last a
WRITE with a bad rkey, which rxe NAKs (remote access error).
"""
import os
import random

import pytest

from .test_link import Agent, nic_processes, wait_until
from .test_rxe_interop import DEV, NETNS, PEER_IP, RXE_IP, _why_not, mapped_gid, poll
from .test_rxe_interop import link  # noqa: F401 (a fixture: the veth pair, the namespace and rxe1)

pytestmark = [pytest.mark.interop, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]
ACK_TIMEOUT = 18   # about 1 s: under the guest's CPU emulation both stacks answer slowly


@pytest.fixture
def pair(link):
    """rxe1's RC QP and MR, and a soft0 program in NETNS with its own, connected to each other."""
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    import pyverbs.enums as e

    soft = Agent(PEER_IP, netns=NETNS, RDMALAB_PROVIDER="soft")
    ctx = Context(name=DEV)
    try:
        soft.info = soft("setup")
        pd, cq = PD(ctx), CQ(ctx, 16)
        access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                  | e.IBV_ACCESS_REMOTE_ATOMIC)
        mr = MR(pd, 16384, access)
        qp = connected_qp(link, soft, pd, cq, e.IBV_QPT_RC, access, max_dest_rd_atomic=1, min_rnr_timer=12,
                          timeout=ACK_TIMEOUT, retry_cnt=7, rnr_retry=7, max_rd_atomic=1)
        yield soft, e, qp, cq, mr
    finally:
        soft.stop()
        ctx.close()
    assert wait_until(lambda: not nic_processes((PEER_IP,))), "the NIC in the namespace outlived its program"


def connected_qp(link, soft, pd, cq, qp_type, access, **rts):
    """rxe1's QP of `qp_type` in RTS, connected to the soft0 program's QP (`rts`: RC's timers and
    limits), and the program's QP connected back to it."""
    from pyverbs.addr import AHAttr, GID, GlobalRoute
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    import pyverbs.enums as e

    qp = QP(pd, QPInitAttr(qp_type=qp_type, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1)))
    psn = random.getrandbits(24)
    a = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
    a.pkey_index, a.qp_access_flags = 0, access
    a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(soft.info["gid"]), sgid_index=link,
                                                                hop_limit=64))
    a.dest_qp_num, a.rq_psn, a.sq_psn = soft.info["qpn"], psn, soft.info["psn"]
    for name, value in rts.items():
        setattr(a, name, value)
    qp.to_rts(a)
    soft("connect", qpn=qp.qp_num, gid=mapped_gid(RXE_IP), psn=soft.info["psn"], my_psn=psn,
         timeout=rts.get("timeout", 14))
    return qp


def post(e, qp, mr, opcode, offset, length, remote=None):
    from pyverbs.wr import SGE, SendWR
    wr = SendWR(wr_id=length, opcode=opcode, num_sge=1, sg=[SGE(mr.buf + offset, length, mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    if remote:
        wr.set_wr_rdma(*remote)
    qp.post_send(wr)


def test_rxe_and_soft0s_wire_nic_carry_rc_both_ways(pair):
    soft, e, qp, cq, mr = pair
    data = os.urandom(10240)
    mr.write(data, len(data), 0)
    # rxe1 -> soft0: a 10-packet WRITE, then a 3-packet SEND into a posted receive
    post(e, qp, mr, e.IBV_WR_RDMA_WRITE, 0, 10240, (soft.info["rkey"], soft.info["addr"]))
    wc = poll(cq)
    assert (wc.status, wc.byte_len) == (e.IBV_WC_SUCCESS, 10240)
    assert soft("read", offset=0, length=10240)["hex"] == data.hex()
    soft("recv", offset=16384, length=4096, wr_id=7)
    post(e, qp, mr, e.IBV_WR_SEND, 1000, 3000)
    assert poll(cq).status == e.IBV_WC_SUCCESS
    [rwc] = soft.wcs()
    assert (rwc["wr_id"], rwc["status"], rwc["byte_len"]) == (7, e.IBV_WC_SUCCESS, 3000)
    assert soft("read", offset=16384, length=3000)["hex"] == data[1000:4000].hex()
    # soft0 -> rxe1: a WRITE, a READ (three responses), a FETCH_ADD
    soft("fill", offset=20000, length=3000, seed=20)
    soft("send", op="write", offset=20000, length=3000, remote_addr=mr.buf + 12288 - 3000, rkey=mr.rkey, wr_id=1)
    assert [(w["wr_id"], w["status"]) for w in soft.wcs()] == [(1, e.IBV_WC_SUCCESS)]
    assert mr.read(3000, 12288 - 3000).hex() == soft("read", offset=20000, length=3000)["hex"]
    soft("send", op="read", offset=30000, length=2500, remote_addr=mr.buf + 100, rkey=mr.rkey, wr_id=2)
    assert [(w["wr_id"], w["status"], w["byte_len"]) for w in soft.wcs()] == [(2, e.IBV_WC_SUCCESS, 2500)]
    assert soft("read", offset=30000, length=2500)["hex"] == data[100:2600].hex()
    mr.write((41).to_bytes(8, "little"), 8, 12288)
    soft("send", op="faa", offset=40000, length=8, remote_addr=mr.buf + 12288, rkey=mr.rkey, compare_add=1, wr_id=3)
    assert [(w["wr_id"], w["status"]) for w in soft.wcs()] == [(3, e.IBV_WC_SUCCESS)]
    assert int.from_bytes(bytes.fromhex(soft("read", offset=40000, length=8)["hex"]), "little") == 41
    assert int.from_bytes(mr.read(8, 12288), "little") == 42
    # immediate data both ways: a completion shows the imm_data its sender's work request gave
    from pyverbs.wr import SGE, RecvWR, SendWR
    soft("recv", offset=24576, length=64, wr_id=8)
    wr = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(mr.buf, 16, mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED, imm_data=0x0A0B0C0D)
    wr.set_wr_rdma(soft.info["rkey"], soft.info["addr"] + 1024)
    qp.post_send(wr)
    assert poll(cq).status == e.IBV_WC_SUCCESS
    assert [(w["wr_id"], w["imm_data"]) for w in soft.wcs()] == [(8, 0x0A0B0C0D)]
    qp.post_recv(RecvWR(wr_id=11, num_sge=1, sg=[SGE(mr.buf + 14336, 64, mr.lkey)]))
    soft("send", op="send_imm", offset=0, length=16, imm=0x01020304, wr_id=6)
    assert [(w["wr_id"], w["status"]) for w in soft.wcs()] == [(6, e.IBV_WC_SUCCESS)]
    rwc = poll(cq)
    assert (rwc.wr_id, rwc.status, rwc.imm_data) == (11, e.IBV_WC_SUCCESS, 0x01020304)
    # a bad rkey: rxe NAKs it, and writes nothing
    before = mr.read(16384, 0)
    soft("send", op="write", offset=0, length=64, remote_addr=mr.buf, rkey=mr.rkey ^ 0x1000, wr_id=4)
    assert [(w["wr_id"], w["status"]) for w in soft.wcs()] == [(4, e.IBV_WC_REM_ACCESS_ERR)]
    assert mr.read(16384, 0) == before
    counters = soft("counters")["counters"]
    assert counters["dropped_bad_icrc"] == 0 and counters["internal_error"] == 0
    # (not retransmitted_pkts == 0: a stall of the guest longer than the ACK timeout, about 1 s, makes
    # soft0 resend, all else correct. That rxe takes every packet of a train the first time, which RC's
    # resends would hide, the UC test below holds: there a lost packet is never sent again.)
    assert counters["rcvd_pkts"] >= 19   # rxe's 13 request packets, its ACK, 3 READ responses, atomic ACK, NAK


def test_rxe_and_soft0s_wire_nic_exchange_ud_datagrams(link):
    """UD both ways: rxe1's SEND with immediate lands in the soft0 program's receive after the GRH
    (the IPv4 header rxe's packet came with), and the soft0 program's datagram in rxe1's."""
    from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, RecvWR, SendWR
    import pyverbs.enums as e

    qkey, size = 0x2345, 1000   # one packet: the ports' MTU is 1024 on the veth
    soft = Agent(PEER_IP, netns=NETNS, RDMALAB_PROVIDER="soft")
    ctx = Context(name=DEV)
    try:
        soft.info = soft("setup")
        soft.ud = soft("setup_ud", qkey=qkey)["qpn"]
        pd, cq = PD(ctx), CQ(ctx, 16)
        mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))
        attr = QPAttr(port_num=1)
        attr.qkey = qkey
        qp.to_rts(attr)
        data = os.urandom(size)
        mr.write(data, size, 0)
        # rxe1 -> soft0
        soft("recv_ud", offset=8192, length=40 + size, wr_id=80)
        ah = AH(pd, attr=AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(soft.info["gid"]), sgid_index=link,
                                                                         hop_limit=64)))
        wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1, sg=[SGE(mr.buf, size, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED, imm_data=0x0A0B0C0D)
        wr.set_wr_ud(ah, soft.ud, qkey)
        qp.post_send(wr)
        assert poll(cq).status == e.IBV_WC_SUCCESS
        [got] = soft.wcs()
        assert (got["wr_id"], got["status"], got["byte_len"], got["src_qp"], got["wc_flags"], got["imm_data"]) == \
            (80, 0, 40 + size, qp.qp_num, e.IBV_WC_GRH | e.IBV_WC_WITH_IMM, 0x0A0B0C0D)
        assert soft("read", offset=8192 + 40, length=size)["hex"] == data.hex()
        ip = bytes.fromhex(soft("read", offset=8192 + 20, length=20)["hex"])
        assert (ip[12:16], ip[16:20]) == (bytes(map(int, RXE_IP.split("."))), bytes(map(int, PEER_IP.split("."))))
        # soft0 -> rxe1
        qp.post_recv(RecvWR(wr_id=90, num_sge=1, sg=[SGE(mr.buf + 4096, 40 + size, mr.lkey)]))
        soft("fill", offset=0, length=size, seed=9)
        soft("send_ud", gid=mapped_gid(RXE_IP), qpn=qp.qp_num, qkey=qkey, offset=0, length=size, wr_id=2)
        assert [(w["wr_id"], w["status"]) for w in soft.wcs()] == [(2, e.IBV_WC_SUCCESS)]
        rwc = poll(cq)
        assert (rwc.wr_id, rwc.status, rwc.byte_len, rwc.src_qp, rwc.wc_flags & e.IBV_WC_GRH) == \
            (90, e.IBV_WC_SUCCESS, 40 + size, soft.ud, e.IBV_WC_GRH)
        assert mr.read(size, 4096 + 40).hex() == soft("read", offset=0, length=size)["hex"]
        counters = soft("counters")["counters"]
        assert counters["dropped_bad_icrc"] == counters["dropped_datagram"] == counters["internal_error"] == 0
        for obj in (ah, qp, mr, cq, pd):
            obj.close()
    finally:
        soft.stop()
        ctx.close()
    assert wait_until(lambda: not nic_processes((PEER_IP,))), "the NIC in the namespace outlived its program"


def test_rxe_and_soft0s_wire_nic_carry_uc_both_ways(link):
    """UC on one connection: rxe1's 3-packet SEND and its WRITE with immediate land in the soft0
    program's memory and receives, the soft0 program's 2-packet SEND and its WRITE in rxe1's; nothing
    answers, and nothing is sent again: a packet rxe drops is lost."""
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.wr import SGE, RecvWR, SendWR
    import pyverbs.enums as e

    soft = Agent(PEER_IP, netns=NETNS, RDMALAB_PROVIDER="soft")
    ctx = Context(name=DEV)
    try:
        soft.info = soft("setup", qp_type="uc")
        pd, cq = PD(ctx), CQ(ctx, 16)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        mr = MR(pd, 16384, access)
        qp = connected_qp(link, soft, pd, cq, e.IBV_QPT_UC, access)
        data = os.urandom(3000)
        mr.write(data, len(data), 0)
        # rxe1 -> soft0: a SEND of 3 packets into a posted receive, a WRITE with immediate
        soft("recv", offset=16384, length=4096, wr_id=7)
        soft("recv", offset=20480, length=64, wr_id=8)
        post(e, qp, mr, e.IBV_WR_SEND, 0, 3000)
        wr = SendWR(wr_id=5, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(mr.buf, 1500, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED, imm_data=0x0A0B0C0D)
        wr.set_wr_rdma(soft.info["rkey"], soft.info["addr"] + 30000)
        qp.post_send(wr)
        assert [poll(cq).status, poll(cq).status] == [e.IBV_WC_SUCCESS] * 2
        assert [(w["wr_id"], w["status"], w["byte_len"], w["imm_data"]) for w in soft.wcs(2)] == \
            [(7, 0, 3000, 0), (8, 0, 1500, 0x0A0B0C0D)]
        assert soft("read", offset=16384, length=3000)["hex"] == data.hex()
        assert soft("read", offset=30000, length=1500)["hex"] == data[:1500].hex()
        # soft0 -> rxe1: a SEND of 2 packets (one train), a WRITE
        qp.post_recv(RecvWR(wr_id=11, num_sge=1, sg=[SGE(mr.buf + 8192, 4096, mr.lkey)]))
        soft("fill", offset=40000, length=2000, seed=21)
        soft("send", op="send", offset=40000, length=2000, wr_id=1)
        soft("send", op="write", offset=40000, length=1000, remote_addr=mr.buf + 4096, rkey=mr.rkey, wr_id=2)
        assert [(w["wr_id"], w["status"]) for w in soft.wcs(2)] == [(1, 0), (2, 0)]
        rwc = poll(cq)
        assert (rwc.wr_id, rwc.status, rwc.byte_len) == (11, e.IBV_WC_SUCCESS, 2000)
        sent = soft("read", offset=40000, length=2000)["hex"]
        assert mr.read(2000, 8192).hex() == sent
        wait_until(lambda: mr.read(1000, 4096).hex() == sent[:2000], seconds=5)   # (a UC WRITE lands unseen)
        assert mr.read(1000, 4096).hex() == sent[:2000]
        counters = soft("counters")["counters"]
        assert counters["dropped_bad_icrc"] == counters["internal_error"] == 0
        assert (counters["sent_pkts"], counters["rcvd_pkts"]) == (3, 5)   # UC: no ACKs either way
        for obj in (qp, mr, cq, pd):
            obj.close()
    finally:
        soft.stop()
        ctx.close()
    assert wait_until(lambda: not nic_processes((PEER_IP,))), "the NIC in the namespace outlived its program"
