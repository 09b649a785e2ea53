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
    from pyverbs.addr import AHAttr, GID, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    import pyverbs.enums as e

    soft = Agent(PEER_IP, netns=NETNS, RDMALAB_PROVIDER="soft")
    ctx = Context(name=DEV)
    try:
        soft.info = soft("setup")
        pd, cq = PD(ctx), CQ(ctx, 16)
        access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                  | e.IBV_ACCESS_REMOTE_ATOMIC)
        mr = MR(pd, 16384, access)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1)))
        psn = random.getrandbits(24)
        a = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
        a.pkey_index, a.qp_access_flags = 0, access
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=GID(soft.info["gid"]), sgid_index=link,
                                                                    hop_limit=64))
        a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = soft.info["qpn"], psn, 1, 12
        a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = soft.info["psn"], ACK_TIMEOUT, 7, 7, 1
        qp.to_rts(a)
        soft("connect", qpn=qp.qp_num, gid=mapped_gid(RXE_IP), psn=soft.info["psn"], my_psn=psn, timeout=ACK_TIMEOUT)
        yield soft, e, qp, cq, mr
    finally:
        soft.stop()
        ctx.close()
    assert wait_until(lambda: not nic_processes((PEER_IP,))), "the NIC in the namespace outlived its program"


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
    # a bad rkey: rxe NAKs it, and writes nothing
    before = mr.read(16384, 0)
    soft("send", op="write", offset=0, length=64, remote_addr=mr.buf, rkey=mr.rkey ^ 0x1000, wr_id=4)
    assert [(w["wr_id"], w["status"]) for w in soft.wcs()] == [(4, e.IBV_WC_REM_ACCESS_ERR)]
    assert mr.read(16384, 0) == before
    counters = soft("counters")["counters"]
    assert counters["dropped_bad_icrc"] == 0 and counters["internal_error"] == 0
    assert counters["rcvd_pkts"] >= 19   # rxe's 13 request packets, its ACK, 3 READ responses, atomic ACK, NAK
