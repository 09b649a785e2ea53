#!/usr/bin/env python3
"""The corners of pyverbs' device and MR API that a portable program meets: it detects its pyverbs, then asks.

Shape: rdma-core's tests/test_device.py (query_gid_type, query_gid_ex's entry, get_pkey_index where the
installed pyverbs has it: `hasattr(ctx, 'get_pkey_index')`, which v52 added), tests/test_mr.py (MR.write
of bytes; registering with an object that is not a PD fails) and tests/test_qp.py's query of an RC QP's
address vector after modify, in the either-version style of distribution-portable code (try
pyverbs.libibverbs_enums, fall back to pyverbs.enums).

Asserts what rxe0 answers (issue 48, item 7 and 6):
- get_pkey_index, where pyverbs has it (v52+: not Debian 12's 44): the default P_Key 0xffff at index 0,
  and a P_Key not in the table is PyverbsRDMAError with error_code -1 (ibv_get_pkey_index's -1);
- query_gid_type of the IPv4-mapped GID: RoCE v2 (1), an int up to 58, an ibv_gid_type_sysfs member
  from 59 (Cython 3 returns a C enum as its member);
- device_cap_flags has RC_RNR_NAK_GEN and MEM_MGT_EXTENSIONS (the device sends RNR NAKs; it does local
  invalidate and send with invalidate);
- query_gid_ex (v59): the entry names the netdev the GID is on (ndev_ifindex a real interface, not 0);
- MR.write takes bytes, bytearray and str, and a memoryview is a TypeError that writes nothing;
- MR(ctx, ...) (a Context, not a PD) is PyverbsRDMAError;
- an RC QP moved to RTR with hop_limit 5 towards a routed (IPv4-mapped) GID reports the route's hop
  limit on query: the kernel resolves the route at modify_qp and puts its hop limit in the AV (the
  IPv4 default TTL here), on every RoCE device.
Prints "OK device_api_corners".
"""
import socket
import sys

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

try:
    from pyverbs.libibverbs_enums import (ibv_access_flags, ibv_device_cap_flags, ibv_gid_type_sysfs, ibv_qp_attr_mask,
                                          ibv_qp_state, ibv_qp_type)
    PYVERBS_59 = True
    LOCAL_WRITE, QPT_RC = ibv_access_flags.IBV_ACCESS_LOCAL_WRITE, ibv_qp_type.IBV_QPT_RC
    QPS_INIT, QPS_RTR = ibv_qp_state.IBV_QPS_INIT, ibv_qp_state.IBV_QPS_RTR
    QP_AV = ibv_qp_attr_mask.IBV_QP_AV
    RNR_NAK_GEN = ibv_device_cap_flags.IBV_DEVICE_RC_RNR_NAK_GEN
    MEM_MGT = ibv_device_cap_flags.IBV_DEVICE_MEM_MGT_EXTENSIONS
except ImportError:
    import pyverbs.enums as e
    PYVERBS_59 = False
    LOCAL_WRITE, QPT_RC, QPS_INIT, QPS_RTR = e.IBV_ACCESS_LOCAL_WRITE, e.IBV_QPT_RC, e.IBV_QPS_INIT, e.IBV_QPS_RTR
    QP_AV, RNR_NAK_GEN, MEM_MGT = e.IBV_QP_AV, e.IBV_DEVICE_RC_RNR_NAK_GEN, e.IBV_DEVICE_MEM_MGT_EXTENSIONS


def fail(why):
    print(f'FAIL device_api_corners: {why}')
    return 1


def main():
    ctx = Context(name=get_device_list()[0].name.decode())
    idx = next(i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    if hasattr(ctx, 'get_pkey_index'):
        if ctx.get_pkey_index(1, 0xffff) != 0:
            return fail(f'the default P_Key at index {ctx.get_pkey_index(1, 0xffff)}')
        try:
            ctx.get_pkey_index(1, 0x1234)
            return fail('P_Key 0x1234 found')
        except PyverbsRDMAError as error:
            if error.error_code != -1:
                return fail(f'a missing P_Key raised error code {error.error_code}, not -1')
    gid_type = ctx.query_gid_type(1, idx)
    if gid_type != 1 or (PYVERBS_59 and not isinstance(gid_type, ibv_gid_type_sysfs)) \
            or (not PYVERBS_59 and type(gid_type) is not int):
        return fail(f'query_gid_type gave {gid_type!r}')
    caps = ctx.query_device().device_cap_flags
    if not caps & RNR_NAK_GEN or not caps & MEM_MGT:
        return fail(f'device_cap_flags {int(caps):#x} lack RC_RNR_NAK_GEN or MEM_MGT_EXTENSIONS')
    if PYVERBS_59:
        entry = ctx.query_gid_ex(1, idx)
        try:
            socket.if_indextoname(entry.ndev_ifindex)
        except OSError:
            return fail(f'the GID entry names netdev index {entry.ndev_ifindex}, which is no interface')

    pd = PD(ctx)
    mr = MR(pd, 16, LOCAL_WRITE)
    for data in (b'bytes...', bytearray(b'bytearray'), 'a str'):
        mr.write(data, len(data))
        if mr.read(len(data), 0) != (data.encode() if isinstance(data, str) else bytes(data)):
            return fail(f'MR.write of a {type(data).__name__} left {mr.read(len(data), 0)!r}')
    try:
        mr.write(memoryview(b'memoryview'), 10)
        return fail('MR.write took a memoryview')
    except TypeError:
        if mr.read(10, 0) == b'memoryview':
            return fail('a refused MR.write wrote its bytes')
    try:
        MR(ctx, 16, LOCAL_WRITE)
        return fail('MR(ctx, ...) registered')
    except PyverbsRDMAError:
        pass

    cq = CQ(ctx, 4)
    qp = QP(pd, QPInitAttr(qp_type=QPT_RC, scq=cq, rcq=cq, cap=QPCap(1, 1)), QPAttr())
    attr = QPAttr(qp_state=QPS_INIT)
    attr.qp_access_flags = LOCAL_WRITE
    qp.to_init(attr)
    attr = QPAttr(qp_state=QPS_RTR, path_mtu=3)
    attr.dest_qp_num, attr.rq_psn, attr.max_dest_rd_atomic, attr.min_rnr_timer = qp.qp_num, 0, 1, 12
    attr.ah_attr = AHAttr(port_num=1, is_global=1,
                          gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx, hop_limit=5))
    qp.to_rtr(attr)
    got, _ = qp.query(QP_AV)
    with open('/proc/sys/net/ipv4/ip_default_ttl') as f:
        ttl = int(f.read())
    if got.ah_attr.hop_limit != ttl:
        return fail(f'the queried AV has hop limit {got.ah_attr.hop_limit}, not the route\'s ({ttl})')
    print('pyverbs', '>= 59' if PYVERBS_59 else '<= 58', '| get_pkey_index:', hasattr(ctx, 'get_pkey_index'))
    print('OK device_api_corners')
    return 0


if __name__ == '__main__':
    sys.exit(main())
