#!/usr/bin/env python3
"""A program written for both pyverbs generations: it detects which one it runs on, then uses its idioms.

Shape: compatibility code for distributions' pyverbs (Debian 12's 44, Ubuntu 24.04's 50) and PyPI's
(59+), which tries the newer module and falls back on ImportError:
`try: from pyverbs.libibverbs_enums import ibv_wc_status, ... / except ImportError: import
pyverbs.enums as e` (rdma-core v59 removed pyverbs/enums.pyx in commit a45b3aaa6, "Align code to
support Cython 3.1.0 format"). On the >= 59 path it relies on what v59 returns, enum members
(`wc.status.name`, as Documentation/pyverbs.md v59's examples print them); on the <= 58 path on flat
names and plain ints (`e.IBV_WC_SUCCESS`, and the name from the class: `e.ibv_wc_status(wc.status).name`).

What it does: picks its path, connects two RC QPs of one process, SENDs 16 bytes, and names each
completion the way its path allows. Asserts: the completions succeed with the data in place, and what
the path assumes holds throughout (>= 59: statuses and the QP state are members of the v59 classes;
<= 58: they are plain ints) -- a program meeting one generation's modules and the other's behaviour
fails here. Prints which path it took and "OK enums_either_version".
"""
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

try:
    from pyverbs.libibverbs_enums import ibv_access_flags, ibv_qp_state, ibv_qp_type, ibv_wc_status, ibv_wr_opcode
    PYVERBS_59 = True
    LOCAL_WRITE = ibv_access_flags.IBV_ACCESS_LOCAL_WRITE
    QPT_RC, QPS_INIT, QPS_RTS = ibv_qp_type.IBV_QPT_RC, ibv_qp_state.IBV_QPS_INIT, ibv_qp_state.IBV_QPS_RTS
    WR_SEND, WC_SUCCESS = ibv_wr_opcode.IBV_WR_SEND, ibv_wc_status.IBV_WC_SUCCESS
except ImportError:
    import pyverbs.enums as e
    PYVERBS_59 = False
    LOCAL_WRITE, QPT_RC, QPS_INIT, QPS_RTS = e.IBV_ACCESS_LOCAL_WRITE, e.IBV_QPT_RC, e.IBV_QPS_INIT, e.IBV_QPS_RTS
    WR_SEND, WC_SUCCESS = e.IBV_WR_SEND, e.IBV_WC_SUCCESS


def status_name(wc):
    if PYVERBS_59:
        return wc.status.name              # v59 returns an ibv_wc_status member
    return e.ibv_wc_status(wc.status).name  # up to 58 an int


def as_expected(value, v59_class):
    """What this path assumes of a value pyverbs returns: a member of the class named (imported on the
    >= 59 path only), or a plain int."""
    return isinstance(value, globals()[v59_class]) if PYVERBS_59 else type(value) is int


def poll_one(cq, timeout=10):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        n, wcs = cq.poll()
        if n:
            return wcs[0]
    raise TimeoutError('no completion')


def main():
    print('pyverbs', '>= 59 (pyverbs.libibverbs_enums)' if PYVERBS_59 else '<= 58 (pyverbs.enums)')
    ctx = Context(name=get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 8)
    init = QPInitAttr(qp_type=QPT_RC, scq=cq, rcq=cq, cap=QPCap(2, 2))
    first = QPAttr()
    first.qp_access_flags = LOCAL_WRITE
    a, b = QP(pd, init, first), QP(pd, init, first)
    idx = next(i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    for qp, peer in ((a, b), (b, a)):
        attr = QPAttr(qp_state=QPS_INIT, path_mtu=3)
        attr.qp_access_flags = LOCAL_WRITE
        attr.dest_qp_num = peer.qp_num
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
        qp.to_rts(attr)
    if a.qp_state != QPS_RTS or not as_expected(a.qp_state, 'ibv_qp_state'):
        print(f'FAIL enums_either_version: QP state {a.qp_state!r}')
        return 1
    src, dst = MR(pd, 16, LOCAL_WRITE), MR(pd, 16, LOCAL_WRITE)
    src.write(b'either version!!', 16)
    b.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(dst.buf, 16, dst.lkey)]))
    a.post_send(SendWR(wr_id=1, opcode=WR_SEND, num_sge=1, sg=[SGE(src.buf, 16, src.lkey)]))
    for _ in range(2):
        wc = poll_one(cq)
        if not as_expected(wc.status, 'ibv_wc_status'):
            print(f'FAIL enums_either_version: wc.status is {wc.status!r}, not what this generation returns')
            return 1
        print(f'  wr_id {wc.wr_id}: {status_name(wc)}')
        if wc.status != WC_SUCCESS:
            print(f'FAIL enums_either_version: wr_id {wc.wr_id} completed with {status_name(wc)}')
            return 1
    if dst.read(16, 0) != b'either version!!':
        print(f'FAIL enums_either_version: received {dst.read(16, 0)!r}')
        return 1
    print('OK enums_either_version')
    return 0


if __name__ == '__main__':
    sys.exit(main())
