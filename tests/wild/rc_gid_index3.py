#!/usr/bin/env python3
"""RC loopback with the GID index hard-coded to 3 ("gid_index = 3 # RoCE v2").

Shape: linux-rdma/rdma-core Documentation/pyverbs.md (all versions, "QP" snippet:
`gid_index = 3 # Hard-coded for RoCE v2 interface`, "Query GID": `ctx.query_gid(port_num=1,
index=3)`) and the many NCCL/RoCE tutorials that set NCCL_IB_GID_INDEX=3: on a ConnectX port each
address has a RoCE v1 and a RoCE v2 entry, so index 3 is the IPv4 RoCE v2 GID there. Enums: pyverbs
<= 58 (`import pyverbs.enums as e`).

What it does: queries GID 3 of port 1 of the first device and connects two RC QPs of one process
through it, then SENDs 16 bytes from one to the other. A device whose table has fewer entries (rxe
on a netdev with one IPv4 address: index 0 link-local, 1 IPv4; soft0 likewise) has a zero GID at
index 3 (ibv_query_gid gives zeros for an empty entry), and the kernel refuses the RTR transition
naming it: PyverbsRDMAError with errno ENODATA (61), from rdma_fill_sgid_attr(). Both outcomes
are success here: traffic through GID 3, or an empty GID 3 refused with ENODATA. Anything else
(an empty GID accepted, another errno, lost data) fails. Prints "OK rc_gid_index3".
"""
import errno
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

port_num = 1
gid_index = 3  # Hard-coded for RoCE v2 interface


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    gid = ctx.query_gid(port_num=port_num, index=gid_index)
    print(f'GID {gid_index}: {gid}')
    empty = gid.gid == '0000:0000:0000:0000:0000:0000:0000:0000'

    pd = PD(ctx)
    cq = CQ(ctx, 100, None, None, 0)
    cap = QPCap(100, 10, 1, 1, 0)
    qia = QPInitAttr(cap=cap, qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq)
    qa, qb = QP(pd, qia, QPAttr()), QP(pd, qia, QPAttr())
    gr = GlobalRoute(dgid=gid, sgid_index=gid_index)
    ah_attr = AHAttr(gr=gr, is_global=1, port_num=port_num)
    try:
        for me, peer in ((qa, qb), (qb, qa)):
            attr = QPAttr()
            attr.path_mtu = e.IBV_MTU_1024
            attr.dest_qp_num = peer.qp_num
            attr.max_dest_rd_atomic = 1
            attr.max_rd_atomic = 1
            attr.min_rnr_timer = 12
            attr.timeout = 14
            attr.retry_cnt = 7
            attr.rnr_retry = 7
            attr.ah_attr = ah_attr
            me.to_rts(attr)
    except PyverbsRDMAError as ex:
        if empty and ex.error_code == errno.ENODATA:
            print(f'GID index {gid_index} is empty on this device; the QP refused it: {ex}')
            print('OK rc_gid_index3')
            return 0
        print(f'FAIL rc_gid_index3: moving the QPs to RTS through GID {gid_index} ({gid}) failed: {ex}')
        return 1
    if empty:
        print(f'FAIL rc_gid_index3: GID {gid_index} is empty (zero), yet the QPs reached RTS through it')
        return 1

    mr_a = MR(pd, 16, e.IBV_ACCESS_LOCAL_WRITE)
    mr_b = MR(pd, 16, e.IBV_ACCESS_LOCAL_WRITE)
    qb.post_recv(RecvWR(0, 1, [SGE(mr_b.buf, 16, mr_b.lkey)]))
    mr_a.write('via gid index 3.', 16)
    qa.post_send(SendWR(num_sge=1, sg=[SGE(mr_a.buf, 16, mr_a.lkey)]))
    seen, deadline = [], time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        n, wcs = cq.poll()
        seen += wcs[:n]
    if len(seen) < 2 or any(wc.status != e.IBV_WC_SUCCESS for wc in seen) or mr_b.read(16, 0) != b'via gid index 3.':
        print(f'FAIL rc_gid_index3: completions {[(wc.opcode, wc.status) for wc in seen]}')
        return 1
    print(f'SEND through GID {gid_index} received')
    print('OK rc_gid_index3')
    return 0


if __name__ == '__main__':
    sys.exit(main())
