#!/usr/bin/env python3
"""A UD datagram bigger than the receive waiting for it.

Shape: rdma-core Documentation/pyverbs.md (QP: UD, AH, set_wr_ud) and tests/base.py UDResources, with a
receive sized for the payload but not the 40-byte GRH in front of it: the mistake UD programs make first.
Enums: pyverbs <= 58.

What it does: two UD QPs (RTS through QPAttr), an AH to this port's IPv4-mapped GID; the receiver posts
a receive of 40 + 32 bytes; the sender SENDs 64 bytes. Asserts what rxe0 answers (issue 48, item 9): the
send succeeds (UD is unacknowledged: the sender never learns); the receive completes with LOC_QP_OP_ERR
(2, rxe's responder: the message does not fit the receive), byte_len 0; the receiving QP is in ERR; and
none of the datagram's bytes were written past the receive's end. Prints "OK ud_recv_too_small".
"""
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
import pyverbs.wr as pwr
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

QKEY = 0x11111111


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    pd = PD(ctx)
    send_cq, recv_cq = CQ(ctx, 16), CQ(ctx, 16)
    attr = QPAttr()
    attr.qkey, attr.pkey_index = QKEY, 0
    sender = QP(pd, QPInitAttr(cap=QPCap(4, 4, 1, 1, 0), qp_type=e.IBV_QPT_UD, scq=send_cq, rcq=send_cq), attr)
    receiver = QP(pd, QPInitAttr(cap=QPCap(4, 4, 1, 1, 0), qp_type=e.IBV_QPT_UD, scq=recv_cq, rcq=recv_cq), attr)
    idx = next(i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    ah = AH(pd, attr=AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx), is_global=1, port_num=1))
    recv_mr, send_mr = MR(pd, 256, e.IBV_ACCESS_LOCAL_WRITE), MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    recv_mr.write(b'.' * 256, 256)
    send_mr.write(b'X' * 64, 64)
    receiver.post_recv(pwr.RecvWR(wr_id=2, num_sge=1, sg=[pwr.SGE(recv_mr.buf, 40 + 32, recv_mr.lkey)]))
    wr = pwr.SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[pwr.SGE(send_mr.buf, 64, send_mr.lkey)])
    wr.set_wr_ud(ah, receiver.qp_num, QKEY)
    sender.post_send(wr)
    got, deadline = {}, time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        for cq in (send_cq, recv_cq):
            n, wcs = cq.poll()
            if n:
                got[wcs[0].wr_id] = (wcs[0].status, wcs[0].byte_len)
    if got.get(1, (None,))[0] != e.IBV_WC_SUCCESS or got.get(2) != (e.IBV_WC_LOC_QP_OP_ERR, 0):
        print(f'FAIL ud_recv_too_small: completions (status, byte_len) by wr_id: {got}')
        return 1
    state = receiver.query(e.IBV_QP_STATE)[0].qp_state
    if state != e.IBV_QPS_ERR:
        print(f'FAIL ud_recv_too_small: the receiving QP is in state {state}, not ERR')
        return 1
    if recv_mr.read(256 - 72, 72) != b'.' * (256 - 72):
        print('FAIL ud_recv_too_small: bytes were written past the receive')
        return 1
    print('receive: LOC_QP_OP_ERR, byte_len 0; the receiving QP in ERR')
    print('OK ud_recv_too_small')
    return 0


if __name__ == '__main__':
    sys.exit(main())
