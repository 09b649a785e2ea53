#!/usr/bin/env python3
"""Name a failed completion's status with pyverbs.cq.cqe_status_to_str (pyverbs <= 58 spelling).

Shape: linux-rdma/rdma-core pyverbs/cq.pyx (module function cqe_status_to_str(status), present from
the early releases to today, e.g. v44.0 .. v64.0; WC.__str__ uses it) as error-reporting code calls
it: `raise PyverbsError(f'Got {cqe_status_to_str(wc.status)}')`; rdma-core tests/test_qpex.py,
tests/test_odp.py do the same with tests.utils.wc_status_to_str. The error is provoked as
rdma-core tests/test_mr.py's bad-rkey flows do (MRTest / test_invalid_rkey): an RDMA WRITE to a wrong
rkey, which the responder NAKs. Enums: `import pyverbs.enums as e`.

What it does: connects two RC QPs of one process, RDMA WRITEs to the peer's buffer with a wrong rkey,
polls the error completion and names its status with cqe_status_to_str, and names IBV_WC_SUCCESS
too. Asserts: the status is IBV_WC_REM_ACCESS_ERR, named "remote access error"; success is named
"success". Prints "OK wc_status_to_str".
"""
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, cqe_status_to_str
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 10)
    attr = QPAttr()
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4))
    a, b = QP(pd, init, attr), QP(pd, init, attr)
    idx = next(i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    for qp, peer in ((a, b), (b, a)):
        rts = QPAttr()
        rts.qp_access_flags = attr.qp_access_flags
        rts.path_mtu = e.IBV_MTU_1024
        rts.dest_qp_num = peer.qp_num
        rts.max_rd_atomic = rts.max_dest_rd_atomic = 1
        rts.min_rnr_timer, rts.timeout, rts.retry_cnt, rts.rnr_retry = 12, 14, 7, 7
        rts.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
        qp.to_rts(rts)

    src = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    dst = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    wr = SendWR(wr_id=9, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 64, src.lkey)])
    wr.set_wr_rdma(dst.rkey ^ 0x5a5a00, dst.buf)   # not dst's key
    a.post_send(wr)
    t0 = time.time()
    while time.time() - t0 < 20:
        n, wcs = cq.poll()
        if n:
            break
    else:
        print('FAIL wc_status_to_str: the bad-rkey WRITE never completed')
        return 1
    wc = wcs[0]
    name = cqe_status_to_str(wc.status)
    print(f'wr_id {wc.wr_id}: status {wc.status} = {name!r}; IBV_WC_SUCCESS = {cqe_status_to_str(e.IBV_WC_SUCCESS)!r}')
    if wc.status != e.IBV_WC_REM_ACCESS_ERR or name != 'remote access error':
        print(f'FAIL wc_status_to_str: status {wc.status} ({name}), expected IBV_WC_REM_ACCESS_ERR '
              f'({e.IBV_WC_REM_ACCESS_ERR}, "remote access error")')
        return 1
    if cqe_status_to_str(e.IBV_WC_SUCCESS) != 'success':
        print('FAIL wc_status_to_str: IBV_WC_SUCCESS is not named "success"')
        return 1
    print('OK wc_status_to_str')
    return 0


if __name__ == '__main__':
    sys.exit(main())
