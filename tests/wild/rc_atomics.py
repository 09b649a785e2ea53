#!/usr/bin/env python3
"""RC loopback atomics: FETCH_AND_ADD and COMPARE_AND_SWAP on an 8-byte counter (pyverbs <= 58 spelling).

Shape: linux-rdma/rdma-core tests/test_atomic.py of v58.0 (AtomicTest: an RC pair, MRs with
IBV_ACCESS_REMOTE_ATOMIC, QP access flags with REMOTE_ATOMIC, max_rd_atomic / max_dest_rd_atomic
>= 1, SendWR(opcode=IBV_WR_ATOMIC_FETCH_AND_ADD / IBV_WR_ATOMIC_CMP_AND_SWP) with
wr.set_wr_atomic(rkey, addr, compare_add, swap), the old value read from the local 8-byte buffer)
and tests/base.py's QP(pd, init_attr, QPAttr()) + to_rts(attr). Enums: `import pyverbs.enums as e`.

What it does: checks the device's atomic_caps, connects two RC QPs of one process, then on a
counter in QP B's MR (start value 5): fetch-and-add 7 (returns 5, leaves 12); compare-and-swap
12 -> 100 (returns 12, leaves 100); compare-and-swap 12 -> 1 (fails the compare: returns 100, leaves
100). Asserts each returned old value and the counter. Prints "OK rc_atomics".
"""
import struct
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR


def gid_for_roce(ctx, port=1):
    for idx in range(ctx.query_port(port).gid_tbl_len):
        if ctx.query_gid(port, idx).gid.startswith('0000:0000:0000:0000:0000:ffff:'):
            return idx
    return 0


def completion(cq):
    start = time.perf_counter()
    while time.perf_counter() - start < 10:
        num, wcs = cq.poll()
        if num:
            if wcs[0].status != e.IBV_WC_SUCCESS:
                raise SystemExit(f'FAIL rc_atomics: atomic completed with status {wcs[0].status}')
            return wcs[0]
    raise SystemExit('FAIL rc_atomics: no completion')


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    if ctx.query_device().atomic_caps == e.IBV_ATOMIC_NONE:
        print('FAIL rc_atomics: the device has no atomics (atomic_caps IBV_ATOMIC_NONE)')
        return 1
    pd = PD(ctx)
    cq = CQ(ctx, 10, None, None, 0)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC
    qp_attr = QPAttr()
    qp_attr.qp_access_flags = access
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=1))
    qps = [QP(pd, init, qp_attr), QP(pd, init, qp_attr)]
    idx = gid_for_roce(ctx)
    for i, qp in enumerate(qps):
        attr = QPAttr()
        attr.qp_access_flags = access
        attr.path_mtu = e.IBV_MTU_1024
        attr.max_dest_rd_atomic = 1
        attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.dest_qp_num = qps[1 - i].qp_num
        attr.rq_psn = 0
        attr.sq_psn = 0
        attr.ah_attr = AHAttr(port_num=1, is_global=1,
                              gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
        qp.to_rts(attr)

    local = MR(pd, 8, access)
    counter = MR(pd, 8, access)
    counter.write(struct.pack('<Q', 5), 8)

    def atomic(opcode, compare_add, swap=0):
        wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(local.buf, 8, local.lkey)])
        wr.set_wr_atomic(rkey=counter.rkey, addr=counter.buf, compare_add=compare_add, swap=swap)
        qps[0].post_send(wr)
        completion(cq)
        old = struct.unpack('<Q', local.read(8, 0))[0]
        now = struct.unpack('<Q', counter.read(8, 0))[0]
        return old, now

    steps = [('fetch_add 7', (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 7), (5, 12)),
             ('cmp_swap 12->100', (e.IBV_WR_ATOMIC_CMP_AND_SWP, 12, 100), (12, 100)),
             ('cmp_swap 12->1 (no match)', (e.IBV_WR_ATOMIC_CMP_AND_SWP, 12, 1), (100, 100))]
    for name, args, expected in steps:
        got = atomic(*args)
        print(f'{name}: old value {got[0]}, counter now {got[1]}')
        if got != expected:
            print(f'FAIL rc_atomics: {name}: (old, now) = {got}, expected {expected}')
            return 1
    print('OK rc_atomics')
    return 0


if __name__ == '__main__':
    sys.exit(main())
