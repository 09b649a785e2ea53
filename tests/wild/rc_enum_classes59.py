#!/usr/bin/env python3
"""RC loopback written with pyverbs >= 59's enum classes (pyverbs.libibverbs_enums IntFlags).

Shape: linux-rdma/rdma-core v59.0, after "pyverbs: Align code to support Cython 3.1.0 format"
(Cython 3.1 no longer copies a named cpdef enum's members into the module namespace, so code names
the class): Documentation/pyverbs.md v59 (`from pyverbs.libibverbs_enums import ibv_access_flags`,
`ibv_access_flags.IBV_ACCESS_LOCAL_WRITE`, `ibv_qp_type.IBV_QPT_UD`), tests/utils.py v59
(get_access_flags: `list(ibv_access_flags)`, `flag.value`), tests/test_cqex.py
(`list(ibv_create_cq_wc_flags)`), tests/base.py v59 (RCResources.to_rts with `ibv_mtu.IBV_MTU_1024`).

What it does: builds the MR access flags by summing `.value` of members picked from
`list(ibv_access_flags)`, lists the extended-CQ flags with `list(ibv_create_cq_wc_flags)` (names and
values), connects two RC QPs of one process using only class-qualified names, SENDs 48 bytes and
RDMA WRITEs 48 more. Asserts: the enum members are ints usable as flags, both operations complete with
`ibv_wc_status.IBV_WC_SUCCESS` and the expected `ibv_wc_opcode`, data in place, QP state
`ibv_qp_state.IBV_QPS_RTS`. Prints "OK rc_enum_classes59".
"""
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import (ibv_access_flags, ibv_create_cq_wc_flags, ibv_mtu, ibv_qp_state,
                                      ibv_qp_type, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode)
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

WANTED = ('IBV_ACCESS_LOCAL_WRITE', 'IBV_ACCESS_REMOTE_WRITE', 'IBV_ACCESS_REMOTE_READ')


def access_flags():
    val = 0
    for flag in list(ibv_access_flags):
        if flag.name in WANTED:
            val += flag.value
    return val


def poll_one(cq):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 10:
        n, wcs = cq.poll()
        if n:
            return wcs[0]
    raise TimeoutError('no completion within 10 s')


def main():
    flags = access_flags()
    expected = (ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
                | ibv_access_flags.IBV_ACCESS_REMOTE_READ)
    if flags != expected:
        print(f'FAIL rc_enum_classes59: summed access flags {flags:#x}, expected {int(expected):#x}')
        return 1
    wc_flags = list(ibv_create_cq_wc_flags)
    print('extended CQ flags:', ', '.join(f'{f.name}={f.value:#x}' for f in wc_flags[:4]), '...')
    if not wc_flags or not all(isinstance(f.value, int) for f in wc_flags):
        print('FAIL rc_enum_classes59: list(ibv_create_cq_wc_flags) is empty or not of ints')
        return 1

    ctx = Context(name=get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 16, None, None, 0)
    init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq,
                      cap=QPCap(max_send_wr=4, max_recv_wr=4))
    attr0 = QPAttr()
    attr0.qp_access_flags = flags
    qps = [QP(pd, init, attr0), QP(pd, init, attr0)]
    gid_index = next(i for i in range(ctx.query_port(1).gid_tbl_len)
                     if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    gr = GlobalRoute(dgid=ctx.query_gid(1, gid_index), sgid_index=gid_index)
    for qp, peer in zip(qps, reversed(qps)):
        attr = QPAttr(qp_state=ibv_qp_state.IBV_QPS_INIT, path_mtu=ibv_mtu.IBV_MTU_1024)
        attr.qp_access_flags = flags
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = 1
        attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        qp.to_rts(attr)
        if qp.qp_state != ibv_qp_state.IBV_QPS_RTS:
            print(f'FAIL rc_enum_classes59: QP state {qp.qp_state}')
            return 1

    src, dst = MR(pd, 96, flags), MR(pd, 96, flags)
    src.write(b'S' * 48 + b'W' * 48, 96)
    qps[1].post_recv(RecvWR(7, 1, [SGE(dst.buf, 48, dst.lkey)]))
    qps[0].post_send(SendWR(wr_id=1, opcode=ibv_wr_opcode.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(src.buf, 48, src.lkey)]))
    got = {}
    for _ in range(2):
        wc = poll_one(cq)
        got[wc.opcode] = wc
    recv = got.get(ibv_wc_opcode.IBV_WC_RECV)
    if recv is None or recv.status != ibv_wc_status.IBV_WC_SUCCESS or dst.read(48, 0) != b'S' * 48:
        print(f'FAIL rc_enum_classes59: SEND: {[(o, w.status) for o, w in got.items()]}')
        return 1

    wr = SendWR(wr_id=2, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf + 48, 48, src.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf + 48)
    qps[0].post_send(wr)
    wc = poll_one(cq)
    if wc.status != ibv_wc_status.IBV_WC_SUCCESS or wc.opcode != ibv_wc_opcode.IBV_WC_RDMA_WRITE \
            or dst.read(48, 48) != b'W' * 48:
        print(f'FAIL rc_enum_classes59: WRITE: status {wc.status}, opcode {wc.opcode}')
        return 1
    print(f'SEND and RDMA WRITE done, statuses {ibv_wc_status(recv.status).name}, {ibv_wc_status(wc.status).name}')
    print('OK rc_enum_classes59')
    return 0


if __name__ == '__main__':
    sys.exit(main())
