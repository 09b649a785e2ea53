#!/usr/bin/env python3
"""UD loopback: two UD QPs, an address handle, SEND with set_wr_ud (pyverbs <= 58 spelling).

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v44.0 .. v58.0, "QP" snippet (QPCap(100, 10, 1,
1, 0); QPInitAttr(cap=cap, qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq); "A UD QP will be in RTS if a QPAttr
object is provided": QP(pd, qia, QPAttr()); GlobalRoute / AHAttr(gr=gr, is_global=1, port_num) /
AH(pd, attr); wr.set_wr_ud(ah, remote_qpn, qkey)) and "Addressing related objects", with
rdma-core tests/base.py UDResources (UD_QKEY, the 40-byte GRH ahead of the received data).

What it does: creates two UD QPs on the first device (both straight to RTS through QPAttr with a
Q_Key), an AH to this port's own GID (found by searching the table for an IPv4-mapped RoCE v2 GID),
posts a receive of 40 + 64 bytes on QP B and sends 64 bytes from QP A to B. Asserts: send and
receive complete successfully, the receive's byte_len is 64 + 40 (GRH), its src_qp is QP A, and the
payload follows the GRH. Prints "OK ud_send_ah".
"""
import sys
import time

from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.wr as pwr

GRH_SIZE = 40
UD_QKEY = 0x11111111
MSG = 64


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 100, None, None, 0)
    cap = QPCap(100, 10, 1, 1, 0)
    qia = QPInitAttr(cap=cap, qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq)
    qp_attr = QPAttr()
    qp_attr.qkey = UD_QKEY
    qp_attr.pkey_index = 0
    sender = QP(pd, qia, qp_attr)
    receiver = QP(pd, qia, qp_attr)
    if sender.qp_state != e.IBV_QPS_RTS:
        print(f'FAIL ud_send_ah: a UD QP made with a QPAttr is in state {sender.qp_state}, not RTS')
        return 1

    port_num = 1
    gid_index = 0
    for i in range(ctx.query_port(port_num).gid_tbl_len):
        if ctx.query_gid(port_num, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'):
            gid_index = i
            break
    gid = ctx.query_gid(port_num, gid_index)
    gr = GlobalRoute(dgid=gid, sgid_index=gid_index)
    ah_attr = AHAttr(gr=gr, is_global=1, port_num=port_num)
    ah = AH(pd, attr=ah_attr)

    recv_mr = MR(pd, GRH_SIZE + MSG, e.IBV_ACCESS_LOCAL_WRITE)
    send_mr = MR(pd, MSG, e.IBV_ACCESS_LOCAL_WRITE)
    receiver.post_recv(pwr.RecvWR(wr_id=5, num_sge=1, sg=[pwr.SGE(recv_mr.buf, GRH_SIZE + MSG, recv_mr.lkey)]))
    message = b'datagram' * 8
    send_mr.write(message[:MSG], MSG)
    wr = pwr.SendWR(wr_id=6, opcode=e.IBV_WR_SEND, num_sge=1, sg=[pwr.SGE(send_mr.buf, MSG, send_mr.lkey)])
    wr.set_wr_ud(ah, receiver.qp_num, UD_QKEY)
    sender.post_send(wr)

    wcs, deadline = [], time.time() + 10
    while len(wcs) < 2 and time.time() < deadline:
        n, polled = cq.poll(2)
        wcs.extend(polled[:n])
    by_id = {wc.wr_id: wc for wc in wcs}
    recv = by_id.get(5)
    if 6 not in by_id or recv is None or any(wc.status != e.IBV_WC_SUCCESS for wc in wcs):
        print(f'FAIL ud_send_ah: completions {[(wc.wr_id, wc.status, wc.opcode) for wc in wcs]}')
        return 1
    if recv.byte_len != MSG + GRH_SIZE or recv.src_qp != sender.qp_num:
        print(f'FAIL ud_send_ah: byte_len {recv.byte_len} (expected {MSG + GRH_SIZE}), '
              f'src_qp {recv.src_qp} (expected {sender.qp_num})')
        return 1
    if recv_mr.read(MSG, GRH_SIZE) != message[:MSG]:
        print(f'FAIL ud_send_ah: payload {recv_mr.read(16, GRH_SIZE)!r}...')
        return 1
    print(f'datagram of {MSG} B from QP {recv.src_qp} to QP {receiver.qp_num} via GID {gid_index} ({gid})')
    print('OK ud_send_ah')
    return 0


if __name__ == '__main__':
    sys.exit(main())
