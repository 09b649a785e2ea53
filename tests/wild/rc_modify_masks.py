#!/usr/bin/env python3
"""RC loopback with explicit qp.modify(attr, mask) transitions: SEND/RECV and RDMA WRITE with immediate.

Shape: the C verbs programs' way of connecting QPs (linux-rdma/rdma-core libibverbs/examples/
rc_pingpong.c: pp_connect_ctx's IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | ... masks) written with
pyverbs, as rdma-core tests/base_rdmacm.py's modify_ext_qp_to_rts and tests/test_qp.py
(qp.modify(attr, mask)) do; pyverbs <= 58 flat enums (`import pyverbs.enums as e`).

What it does: creates two RC QPs (QP(pd, init_attr), no QPAttr: they start in RESET), moves each
RESET->INIT->RTR->RTS with modify() and hand-built masks, checks each state with qp.query(), then
A SENDs 32 bytes to B (B posted a receive first) and A RDMA WRITEs with immediate into B's MR, which
consumes B's second receive. Asserts: receive completions with the right opcode, byte_len, immediate
data and IBV_WC_WITH_IMM flag; the data in place. Prints "OK rc_modify_masks".
"""
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

IB_PORT = 1
IMM = 0x12345678


def find_roce_v2_gid(ctx):
    for i in range(ctx.query_port(IB_PORT).gid_tbl_len):
        gid = ctx.query_gid(IB_PORT, i)
        if gid.gid.startswith('0000:0000:0000:0000:0000:ffff:'):
            return i, gid
    raise SystemExit('FAIL rc_modify_masks: no IPv4-mapped (RoCE v2) GID on port 1')


def wait_wc(cq, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        n, wc = cq.poll()
        if n > 0:
            return wc[0]
    raise SystemExit('FAIL rc_modify_masks: CQ poll timed out')


def connect(qp, remote_qpn, gid_index, gid, psn, remote_psn):
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_INIT
    attr.pkey_index = 0
    attr.port_num = IB_PORT
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)

    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTR
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = remote_qpn
    attr.rq_psn = remote_psn
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.ah_attr = AHAttr(is_global=1, port_num=IB_PORT, gr=GlobalRoute(dgid=gid, sgid_index=gid_index))
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)

    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTS
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.sq_psn = psn
    attr.max_rd_atomic = 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    gid_index, gid = find_roce_v2_gid(ctx)
    pd = PD(ctx)
    cq = CQ(ctx, 32)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1))
    qa, qb = QP(pd, init), QP(pd, init)
    state, _ = qa.query(e.IBV_QP_STATE)
    if state.qp_state != e.IBV_QPS_RESET:
        print(f'FAIL rc_modify_masks: a new QP is in state {state.qp_state}, not RESET')
        return 1
    connect(qa, qb.qp_num, gid_index, gid, 100, 200)
    connect(qb, qa.qp_num, gid_index, gid, 200, 100)
    for qp in (qa, qb):
        attr, _ = qp.query(e.IBV_QP_STATE | e.IBV_QP_DEST_QPN)
        if attr.qp_state != e.IBV_QPS_RTS:
            print(f'FAIL rc_modify_masks: QP {qp.qp_num} in state {attr.qp_state} after the RTS modify')
            return 1

    flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    mr_a, mr_b = MR(pd, 256, flags), MR(pd, 256, flags)
    for wr_id in (10, 11):
        qb.post_recv(RecvWR(wr_id, 1, [SGE(mr_b.buf, 128, mr_b.lkey)]))

    mr_a.write(b'hello over RC, sent with a SEND!', 32)
    qa.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr_a.buf, 32, mr_a.lkey)]))
    got = [wait_wc(cq), wait_wc(cq)]
    recv = [wc for wc in got if wc.opcode == e.IBV_WC_RECV]
    if len(recv) != 1 or recv[0].status != e.IBV_WC_SUCCESS or recv[0].byte_len != 32 \
            or mr_b.read(32, 0) != b'hello over RC, sent with a SEND!':
        print(f'FAIL rc_modify_masks: SEND: completions {[(w.opcode, w.status, w.byte_len) for w in got]}')
        return 1

    mr_a.write(b'written', 7, 64)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=IMM,
                sg=[SGE(mr_a.buf + 64, 7, mr_a.lkey)])
    wr.set_wr_rdma(mr_b.rkey, mr_b.buf + 200)
    qa.post_send(wr)
    got = [wait_wc(cq), wait_wc(cq)]
    imm = [wc for wc in got if wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM]
    if len(imm) != 1 or imm[0].imm_data != IMM or not imm[0].wc_flags & e.IBV_WC_WITH_IMM \
            or imm[0].wr_id != 11 or mr_b.read(7, 200) != b'written':
        print(f'FAIL rc_modify_masks: WRITE_WITH_IMM: completions '
              f'{[(w.opcode, w.status, w.wr_id, hex(w.imm_data), w.wc_flags) for w in got]}')
        return 1
    print(f'SEND then WRITE_WITH_IMM (imm {imm[0].imm_data:#x}) received by QP {qb.qp_num}')
    print('OK rc_modify_masks')
    return 0


if __name__ == '__main__':
    sys.exit(main())
