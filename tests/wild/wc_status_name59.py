#!/usr/bin/env python3
"""Completions, QP and port states logged by their enum names, as pyverbs >= 59 returns them.

Shape: programs written against PyPI's pyverbs (v59+), where the attributes pyverbs reads from a C
field of an enum type come back as members of the classes in pyverbs.libibverbs_enums (Cython 3
converts them: rdma-core v59.0 pyverbs/cq.pyx `def status(self): return self.wc.status`, qp.pyx
`def qp_state(self): return self.qp.state`, device.pyx PortAttr `return self.attr.state`), so a log
line says `wc.status.name` and a check says `isinstance(wc.status, ibv_wc_status)`; connection code as
Documentation/pyverbs.md v59 and tests/base.py v59 (RCResources.to_rts) write it.

What it does: connects two RC QPs of one process, SENDs 32 bytes and RDMA WRITEs 32 more, and logs
each completion as `wr_id, wc.status.name, wc.opcode.name`, then the QP's state (cached and queried)
and the port's state and active MTU by name. Asserts: the names are IBV_WC_SUCCESS, IBV_WC_SEND /
IBV_WC_RECV / IBV_WC_RDMA_WRITE, IBV_QPS_RTS, IBV_PORT_ACTIVE, the MTU one of ibv_mtu's, each value a
member of its class; data in place. (On pyverbs <= 58 these are ints, and `.name` raises
AttributeError.) Prints "OK wc_status_name59".
"""
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import (ibv_access_flags, ibv_mtu, ibv_port_state, ibv_qp_attr_mask, ibv_qp_state,
                                      ibv_qp_type, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode)
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR


def poll_one(cq, timeout=10):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        n, wcs = cq.poll()
        if n:
            wc = wcs[0]
            print(f'  wr_id {wc.wr_id}: {wc.status.name}, {wc.opcode.name}')
            return wc
    raise TimeoutError('no completion')


def fail(why):
    print(f'FAIL wc_status_name59: {why}')
    return 1


def main():
    ctx = Context(name=get_device_list()[0].name.decode())
    port = ctx.query_port(1)
    print(f'port 1: {port.state.name}, active MTU {port.active_mtu.name}')
    if port.state.name != 'IBV_PORT_ACTIVE' or not isinstance(port.state, ibv_port_state) \
            or not isinstance(port.active_mtu, ibv_mtu):
        return fail(f'port state {port.state!r}, active MTU {port.active_mtu!r}')

    pd = PD(ctx)
    cq = CQ(ctx, 8)
    flags = ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
    init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4))
    first = QPAttr()
    first.qp_access_flags = flags
    a, b = QP(pd, init, first), QP(pd, init, first)
    idx = next(i for i in range(port.gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    for qp, peer in ((a, b), (b, a)):
        attr = QPAttr(qp_state=ibv_qp_state.IBV_QPS_INIT, path_mtu=ibv_mtu.IBV_MTU_1024)
        attr.qp_access_flags = flags
        attr.dest_qp_num = peer.qp_num
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
        qp.to_rts(attr)
    print(f'QP {a.qp_num}: {a.qp_type.name}, {a.qp_state.name}')
    if a.qp_state.name != 'IBV_QPS_RTS' or a.qp_type.name != 'IBV_QPT_RC':
        return fail(f'QP state {a.qp_state!r}, type {a.qp_type!r}')

    src, dst = MR(pd, 64, flags), MR(pd, 64, flags)
    src.write(b's' * 32 + b'w' * 32, 64)
    b.post_recv(RecvWR(wr_id=20, num_sge=1, sg=[SGE(dst.buf, 32, dst.lkey)]))
    a.post_send(SendWR(wr_id=10, opcode=ibv_wr_opcode.IBV_WR_SEND, num_sge=1, sg=[SGE(src.buf, 32, src.lkey)]))
    write = SendWR(wr_id=11, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf + 32, 32, src.lkey)])
    write.set_wr_rdma(dst.rkey, dst.buf + 32)
    a.post_send(write)
    names = {}
    for _ in range(3):
        wc = poll_one(cq)
        if not isinstance(wc.status, ibv_wc_status) or not isinstance(wc.opcode, ibv_wc_opcode):
            return fail(f'completion {wc.wr_id}: status {wc.status!r}, opcode {wc.opcode!r} are not enum members')
        names[wc.wr_id] = (wc.status.name, wc.opcode.name)
    wanted = {10: ('IBV_WC_SUCCESS', 'IBV_WC_SEND'), 11: ('IBV_WC_SUCCESS', 'IBV_WC_RDMA_WRITE'),
              20: ('IBV_WC_SUCCESS', 'IBV_WC_RECV')}
    if names != wanted or dst.read(64, 0) != b's' * 32 + b'w' * 32:
        return fail(f'completions {names}, expected {wanted}; data {dst.read(64, 0)!r}')

    attr, _ = a.query(ibv_qp_attr_mask.IBV_QP_STATE | ibv_qp_attr_mask.IBV_QP_PATH_MTU)
    print(f'queried: {attr.qp_state.name}, path MTU {attr.path_mtu.name}')
    if attr.qp_state is not ibv_qp_state.IBV_QPS_RTS or attr.path_mtu is not ibv_mtu.IBV_MTU_1024:
        return fail(f'queried state {attr.qp_state!r}, path MTU {attr.path_mtu!r}')
    print('OK wc_status_name59')
    return 0


if __name__ == '__main__':
    sys.exit(main())
