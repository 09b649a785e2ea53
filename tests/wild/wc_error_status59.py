#!/usr/bin/env python3
"""An error completion named with pyverbs >= 59's enum class, then the QP's ERR state and a flushed WR.

Shape: linux-rdma/rdma-core tests of v59.0 (tests/utils.py poll_cq: `if wc.status !=
ibv_wc_status.IBV_WC_SUCCESS: raise PyverbsRDMAError(f'Completion status is
{wc_status_to_str(wc.status)}', wc.status)`; tests/test_qpex.py bad flows: "Expected errors
{wc_status_to_str(ibv_wc_status.IBV_WC_REM_ACCESS_ERR)}"; tests/test_qp.py query of qp_state), with
the status turned into its name the Python way, `ibv_wc_status(wc.status).name`.

What it does: connects two RC QPs of one process; RDMA READs from the peer's MR that was registered
without REMOTE_READ (the responder refuses: remote access error), then queries the requester QP
(it is in ERR after the error completion) and posts one more SEND, which completes flushed. Asserts:
the first completion is IBV_WC_REM_ACCESS_ERR, qp.query() reports IBV_QPS_ERR, the next WR completes
with IBV_WC_WR_FLUSH_ERR; prints each status by name. Prints "OK wc_error_status59".
"""
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import (ibv_access_flags, ibv_qp_attr_mask, ibv_qp_state, ibv_qp_type,
                                      ibv_wc_status, ibv_wr_opcode)
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR


def next_wc(cq, timeout=20):
    t0 = time.time()
    while time.time() - t0 < timeout:
        n, wcs = cq.poll()
        if n:
            return wcs[0]
    raise TimeoutError('no completion')


def main():
    ctx = Context(name=get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 10)
    access = ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_READ
    attr = QPAttr()
    attr.qp_access_flags = access
    init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4))
    a, b = QP(pd, init, attr), QP(pd, init, attr)
    idx = next(i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    for qp, peer in ((a, b), (b, a)):
        rts = QPAttr()
        rts.qp_access_flags = access
        rts.dest_qp_num = peer.qp_num
        rts.max_rd_atomic = rts.max_dest_rd_atomic = 1
        rts.min_rnr_timer, rts.timeout, rts.retry_cnt, rts.rnr_retry = 12, 14, 7, 7
        rts.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
        qp.to_rts(rts)

    local = MR(pd, 64, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
    # remote write only: a READ through its rkey must be refused
    target = MR(pd, 64, ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE)
    wr = SendWR(wr_id=1, opcode=ibv_wr_opcode.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(local.buf, 64, local.lkey)])
    wr.set_wr_rdma(target.rkey, target.buf)
    a.post_send(wr)
    wc = next_wc(cq)
    print(f'RDMA READ without REMOTE_READ: {ibv_wc_status(wc.status).name}')
    if wc.status != ibv_wc_status.IBV_WC_REM_ACCESS_ERR:
        print(f'FAIL wc_error_status59: status {wc.status}, expected IBV_WC_REM_ACCESS_ERR')
        return 1
    qp_attr, _ = a.query(ibv_qp_attr_mask.IBV_QP_STATE)
    print(f'requester QP state now {qp_attr.qp_state} ({ibv_qp_state(qp_attr.qp_state).name})')
    if qp_attr.qp_state != ibv_qp_state.IBV_QPS_ERR:
        print('FAIL wc_error_status59: the requester QP did not enter ERR')
        return 1
    try:
        a.post_send(SendWR(wr_id=2, num_sge=1, sg=[SGE(local.buf, 8, local.lkey)]))
    except PyverbsRDMAError as ex:
        print(f'FAIL wc_error_status59: posting to a QP in ERR raised {ex}')
        return 1
    wc = next_wc(cq)
    print(f'next WR: wr_id {wc.wr_id}, {ibv_wc_status(wc.status).name}')
    if wc.wr_id != 2 or wc.status != ibv_wc_status.IBV_WC_WR_FLUSH_ERR:
        print(f'FAIL wc_error_status59: expected wr_id 2 flushed, got wr_id {wc.wr_id} status {wc.status}')
        return 1
    print('OK wc_error_status59')
    return 0


if __name__ == '__main__':
    sys.exit(main())
