#!/usr/bin/env python3
"""One RDMA WRITE between two RC queue pairs of one process, written for real pyverbs.

Run it on a real device (Soft-RoCE or an HCA):   python3 examples/rdma_write_loopback.py
or, unchanged, on the emulated NIC:             python3 -m rdmalab.verbs.run examples/rdma_write_loopback.py
"""
import sys
import time

import pyverbs.device as d
try:
    import pyverbs.enums as e                 # pyverbs <= 58
except ImportError:
    import pyverbs.libibverbs_enums as e      # pyverbs >= 59
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

PORT = 1
device_name = d.get_device_list()[0].name.decode()
ctx = d.Context(name=device_name)
gid_index = next((i for i in range(16) if str(ctx.query_gid(PORT, i)).startswith("0000:0000:0000:0000:0000:ffff:")), 0)
gid = ctx.query_gid(PORT, gid_index)

pd = PD(ctx)
src = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
dst = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
cq = CQ(ctx, 8)
init_attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4))
sender, receiver = QP(pd, init_attr), QP(pd, init_attr)

for qp, peer in ((sender, receiver), (receiver, sender)):
    attr = QPAttr(port_num=PORT, path_mtu=e.IBV_MTU_1024)
    attr.pkey_index, attr.qp_access_flags = 0, e.IBV_ACCESS_REMOTE_WRITE
    attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=GlobalRoute(dgid=GID(str(gid)), sgid_index=gid_index))
    attr.dest_qp_num, attr.rq_psn, attr.max_dest_rd_atomic, attr.min_rnr_timer = peer.qp_num, 0, 1, 12
    attr.sq_psn, attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.max_rd_atomic = 0, 14, 7, 7, 1
    qp.to_rts(attr)  # RESET -> INIT -> RTR -> RTS with the attributes each step needs

message = b"written by RDMA, no receiver code ran"
src.write(message, len(message))
wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, len(message), src.lkey)])
wr.set_wr_rdma(dst.rkey, dst.buf)
sender.post_send(wr)

deadline = time.monotonic() + 5
n, wcs = 0, []
while n == 0 and time.monotonic() < deadline:
    n, wcs = cq.poll(1)
if n == 0:
    sys.exit("no completion within 5 s")
print(f"{device_name}: completion status {wcs[0].status}, {wcs[0].byte_len} bytes; receiver holds {dst.read(len(message), 0)!r}")
ok = wcs[0].status == e.IBV_WC_SUCCESS and dst.read(len(message), 0) == message
for obj in (sender, receiver, cq, src, dst, pd, ctx):
    obj.close()
sys.exit(0 if ok else 1)
