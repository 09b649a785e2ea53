#!/usr/bin/env python3
"""A pyverbs program that imports its setup from a module beside it (rdma_helpers.py).

Shape: Marovlo/easyPyverbs (easyPyverbs_client.py / easyPyverbs_server.py doing `from easyQP
import easyQP`, `from easyContext import easyContext` from the same folder) and rdma-core's tests
(`from tests.utils import ...`). Run as `python3 helper_user.py`, Python puts the script's folder
first on sys.path, which is what makes `import rdma_helpers` work. pyverbs <= 58 spelling.

What it does: opens the first device with rdma_helpers.open_first_device(), makes two endpoints with
rdma_helpers.make_qp(), connects them with rdma_helpers.connect_qps() and SENDs 24 bytes from one to
the other, then RDMA WRITEs 24 bytes. Asserts: both complete and the bytes arrive. Prints
"OK helper_user".
"""
import sys

from rdma_helpers import ACCESS, connect_qps, make_qp, open_first_device, wait_completion
from pyverbs.mr import MR
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e


def main():
    ctx, gid_index = open_first_device()
    gid = ctx.query_gid(1, gid_index)
    a, b = make_qp(ctx), make_qp(ctx)
    connect_qps(a, b.qp.qp_num, gid, gid_index)
    connect_qps(b, a.qp.qp_num, gid, gid_index)
    src, dst = MR(a.pd, 64, ACCESS), MR(b.pd, 64, ACCESS)
    src.write(b'from a helper module....', 24)
    b.qp.post_recv(RecvWR(1, 1, [SGE(dst.buf, 24, dst.lkey)]))
    a.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src.buf, 24, src.lkey)]))
    wait_completion(a.cq)
    wc = wait_completion(b.cq)
    if wc.byte_len != 24 or dst.read(24, 0) != b'from a helper module....':
        print(f'FAIL helper_user: received {wc.byte_len} B: {dst.read(24, 0)!r}')
        return 1
    wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 24, src.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf + 32)
    a.qp.post_send(wr)
    wait_completion(a.cq)
    if dst.read(24, 32) != b'from a helper module....':
        print(f'FAIL helper_user: RDMA WRITE left {dst.read(24, 32)!r}')
        return 1
    print('SEND and RDMA WRITE between QPs made by rdma_helpers')
    print('OK helper_user')
    return 0


if __name__ == '__main__':
    sys.exit(main())
