#!/usr/bin/env python3
"""RC loopback between two QPs of one process: RDMA WRITE then RDMA READ (pyverbs <= 58 spelling).

Shape: linux-rdma/rdma-core tests/base.py of v58.0 (RCResources: QPCap/QPInitAttr(qp_type=RC),
QP(pd, init_attr, QPAttr()) lands in INIT, then qp.to_rts(attr) with path_mtu, dest_qp_num, rq_psn,
sq_psn, timeout/retry/rnr attributes and AHAttr(port_num, is_global=1, gr=GlobalRoute(dgid,
sgid_index)); the GID index chosen by walking the table, _add_gids_per_port) and tests/utils.py
(get_send_elements / post_send / poll_cq). Enums: `import pyverbs.enums as e`.

What it does: opens the first device, finds a RoCE v2 GID holding an IPv4 address (else any
non-zero GID), creates two RC QPs on one CQ, connects each to the other, RDMA WRITEs 64 bytes from
QP A into B's MR, then RDMA READs 64 other bytes of B's MR back into A's. Asserts: success
completions with the right opcodes and the bytes where they belong. Prints "OK rc_write_read_enums58".
"""
import random
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

PORT = 1
MSG = 64


def pick_gid_index(ctx, port):
    """The first RoCE v2 GID that maps an IPv4 address; else the first non-zero one."""
    fallback = None
    for idx in range(ctx.query_port(port).gid_tbl_len):
        gid = ctx.query_gid(port, idx).gid
        if gid == '0000:0000:0000:0000:0000:0000:0000:0000':
            continue
        if fallback is None:
            fallback = idx
        if gid.startswith('0000:0000:0000:0000:0000:ffff:') and \
                ctx.query_gid_type(port, idx) == e.IBV_GID_TYPE_SYSFS_ROCE_V2:
            return idx
    return fallback


def poll(cq, what, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            wc = wcs[0]
            if wc.status != e.IBV_WC_SUCCESS:
                raise RuntimeError(f'{what}: completion status {wc.status}')
            return wc
    raise RuntimeError(f'{what}: no completion in {timeout} s')


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    gid_index = pick_gid_index(ctx, PORT)
    if gid_index is None:
        print('FAIL rc_write_read_enums58: no usable GID')
        return 1
    pd = PD(ctx)
    cq = CQ(ctx, 16, None, None, 0)
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    init_attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    qp_attr = QPAttr(port_num=PORT)
    qp_attr.qp_access_flags = access
    qps = [QP(pd, init_attr, qp_attr) for _ in range(2)]
    psns = [random.getrandbits(24) for _ in qps]
    print(f'QPs {qps[0].qp_num} and {qps[1].qp_num} in state {qps[0].qp_state} (INIT is {e.IBV_QPS_INIT}), '
          f'GID index {gid_index}')

    gr = GlobalRoute(dgid=ctx.query_gid(PORT, gid_index), sgid_index=gid_index)
    for me, peer in ((0, 1), (1, 0)):
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = access
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = qps[peer].qp_num
        attr.rq_psn = psns[peer]
        attr.sq_psn = psns[me]
        attr.max_dest_rd_atomic = 1
        attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=gr)
        qps[me].to_rts(attr)
    if qps[0].qp_state != e.IBV_QPS_RTS:
        print(f'FAIL rc_write_read_enums58: QP state {qps[0].qp_state} after to_rts')
        return 1

    local = MR(pd, 2 * MSG, access)
    remote = MR(pd, 2 * MSG, access)
    payload = bytes(random.randrange(256) for _ in range(MSG))
    local.write(payload, MSG)
    remote.write(b'R' * MSG, MSG, MSG)

    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(local.buf, MSG, local.lkey)])
    wr.set_wr_rdma(remote.rkey, remote.buf)
    qps[0].post_send(wr)
    wc = poll(cq, 'RDMA WRITE')
    if wc.opcode != e.IBV_WC_RDMA_WRITE or remote.read(MSG, 0) != payload:
        print(f'FAIL rc_write_read_enums58: WRITE: opcode {wc.opcode}, target holds {remote.read(8, 0)!r}...')
        return 1

    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(local.buf + MSG, MSG, local.lkey)])
    wr.set_wr_rdma(remote.rkey, remote.buf + MSG)
    qps[0].post_send(wr)
    wc = poll(cq, 'RDMA READ')
    if wc.opcode != e.IBV_WC_RDMA_READ or local.read(MSG, MSG) != b'R' * MSG or wc.byte_len != MSG:
        print(f'FAIL rc_write_read_enums58: READ: opcode {wc.opcode}, byte_len {wc.byte_len}, '
              f'got {local.read(8, MSG)!r}...')
        return 1
    print(f'WRITE of {MSG} B and READ of {wc.byte_len} B completed')
    for qp in qps:
        qp.close()
    ctx.close()
    print('OK rc_write_read_enums58')
    return 0


if __name__ == '__main__':
    sys.exit(main())
