#!/usr/bin/env python3
"""Extended QP: QPInitAttrEx with SEND_OPS_FLAGS, QPEx(ctx, ...) and the wr_* post-send API.

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v44.0 .. v58.0, "Extended QP" (`qia =
QPInitAttrEx(qp_type=..., scq=cq, rcq=cq, cap=cap, pd=pd, comp_mask=e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
| e.IBV_QP_INIT_ATTR_PD)`, `qp = QPEx(ctx, qia)`) and tests/utils.py v58 create_qp_ex /
post_send_ex (send_ops_flags=e.IBV_QP_EX_WITH_*, QPEx(ctx, qia, qp_attr), then qp.wr_start();
qp.wr_id = ...; qp.wr_flags = e.IBV_SEND_SIGNALED; qp.wr_rdma_write(rkey, raddr) / qp.wr_send();
qp.wr_set_sge(sge); qp.wr_complete()). Enums: `import pyverbs.enums as e`.

What it does: creates two extended RC QPs (send ops: SEND, RDMA_WRITE, RDMA_READ) on the first
device, connects them to each other with to_rts, and with the wr_* API: RDMA WRITEs 32 bytes into
B's MR, SENDs 32 bytes to B's posted receive, and RDMA READs 32 bytes back, two of them batched in one
wr_start()/wr_complete(). Asserts: every completion succeeds with its wr_id and the bytes are in
place. Prints "OK qpex_wr_api".
"""
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import RecvWR, SGE


def poll_cq(cq, count):
    wcs, t0 = [], time.perf_counter()
    while len(wcs) < count and time.perf_counter() - t0 < 10:
        n, got = cq.poll(count - len(wcs))
        wcs += got[:n]
    if len(wcs) < count:
        raise SystemExit(f'FAIL qpex_wr_api: {len(wcs)} of {count} completions')
    for wc in wcs:
        if wc.status != e.IBV_WC_SUCCESS:
            raise SystemExit(f'FAIL qpex_wr_api: wr_id {wc.wr_id:#x} completed with status {wc.status}')
    return wcs


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    pd = PD(ctx)
    cq = CQ(ctx, 100)
    cap = QPCap(max_send_wr=10, max_recv_wr=10, max_send_sge=1, max_recv_sge=1)
    send_ops = e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_READ
    qia = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, pd=pd, send_ops_flags=send_ops,
                       comp_mask=e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | e.IBV_QP_INIT_ATTR_PD)
    qp_attr = QPAttr(port_num=1)
    qp_attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE
    qa, qb = QPEx(ctx, qia, qp_attr), QPEx(ctx, qia, qp_attr)

    gid_index = 0
    for i in range(ctx.query_port(1).gid_tbl_len):
        if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'):
            gid_index = i
            break
    gr = GlobalRoute(dgid=ctx.query_gid(1, gid_index), sgid_index=gid_index)
    for qp, peer in ((qa, qb), (qb, qa)):
        attr = QPAttr(port_num=1)
        attr.qp_access_flags = qp_attr.qp_access_flags
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = 1
        attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
        qp.to_rts(attr)

    flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    mine, theirs = MR(pd, 128, flags), MR(pd, 128, flags)
    mine.write(b'w' * 32 + b's' * 32, 64)
    theirs.write(b'r' * 32, 32, 96)

    qa.wr_start()
    qa.wr_id = 0x123
    qa.wr_flags = e.IBV_SEND_SIGNALED
    qa.wr_rdma_write(theirs.rkey, theirs.buf)
    qa.wr_set_sge(SGE(mine.buf, 32, mine.lkey))
    qa.wr_complete()
    poll_cq(cq, 1)
    if theirs.read(32, 0) != b'w' * 32:
        print(f'FAIL qpex_wr_api: wr_rdma_write left {theirs.read(8, 0)!r}...')
        return 1

    qb.post_recv(RecvWR(0x77, 1, [SGE(theirs.buf + 32, 32, theirs.lkey)]))
    qa.wr_start()
    qa.wr_id = 0x124
    qa.wr_flags = e.IBV_SEND_SIGNALED
    qa.wr_send()
    qa.wr_set_sge(SGE(mine.buf + 32, 32, mine.lkey))
    qa.wr_id = 0x125
    qa.wr_flags = e.IBV_SEND_SIGNALED
    qa.wr_rdma_read(theirs.rkey, theirs.buf + 96)
    qa.wr_set_sge(SGE(mine.buf + 64, 32, mine.lkey))
    qa.wr_complete()
    ids = sorted(wc.wr_id for wc in poll_cq(cq, 3))
    if ids != [0x77, 0x124, 0x125]:
        print(f'FAIL qpex_wr_api: completions for wr_ids {[hex(i) for i in ids]}')
        return 1
    if theirs.read(32, 32) != b's' * 32 or mine.read(32, 64) != b'r' * 32:
        print(f'FAIL qpex_wr_api: SEND gave {theirs.read(8, 32)!r}, READ gave {mine.read(8, 64)!r}')
        return 1
    print('wr_rdma_write, wr_send and wr_rdma_read completed')
    print('OK qpex_wr_api')
    return 0


if __name__ == '__main__':
    sys.exit(main())
