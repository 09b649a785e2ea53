#!/usr/bin/env python3
"""What rdma_cm gives the QPs it connects, and what resolve_addr refuses at once.

Shape: rdma-core tests/test_rdmacm.py and tests/base_rdmacm.py (the passive and active sides in two
processes, `CMID(creator=AddrInfo(...), qp_init_attr=...)`, `connect(ConnParam(...))` /
`accept(ConnParam(...))`, `set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, ...)`, then
`query_qp`), and the asynchronous API's `resolve_addr` on a `CMEventChannel` (tests/rdmacm_utils.py).
Enums: pyverbs <= 58 (`pyverbs.cm_enums`, `pyverbs.enums`).

Asserts what rxe0 answers (Linux 6.1, librdmacm 44; issue 48, item 4):
- a second resolve_addr on an id whose address is resolved: EINVAL at once;
- a destination this host has no route to (the program asks the routing table itself, with a UDP
  connect): ENETUNREACH at once, no event; one it has a route to: the call returns, an event follows;
- connect(None) and accept(None): both QPs get the device's most READs and atomics (max_qp_init_rd_atom
  and max_qp_rd_atom), retry_cnt and rnr_retry 7, the ACK timeout 19 (the kernel CM's for RoCE);
- connect(resources=3, depth=2), accept(resources=1, depth=4): the passive QP takes its accept()'s
  values as they are (max_rd_atomic 4, max_dest_rd_atomic 1), the active QP the REP's (max_rd_atomic =
  the passive's resources, 1; max_dest_rd_atomic = the passive's depth, 4): no minimum is taken; both
  answer READs and atomics (access flags REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC);
- set_option(ACK_TIMEOUT, 10) on the active id: its QP's timeout is 10, the passive's stays 19.
Prints "OK cm_negotiated_attrs".
"""
import errno
import multiprocessing as mp
import random
import socket
import sys
import time
import traceback

import pyverbs.cm_enums as ce
import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QPCap, QPInitAttr

MASK = (e.IBV_QP_TIMEOUT | e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_RETRY_CNT
        | e.IBV_QP_RNR_RETRY | e.IBV_QP_ACCESS_FLAGS)
READ_WRITE_ATOMIC = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC


def netdev_ipv4():
    with d.Context(name=d.get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def device_depths():
    with d.Context(name=d.get_device_list()[0].name.decode()) as ctx:
        attr = ctx.query_device()
        return attr.max_qp_init_rd_atom, attr.max_qp_rd_atom


def qp_of(cmid):
    a, _ = cmid.query_qp(MASK)
    return {'timeout': a.timeout, 'max_rd_atomic': a.max_rd_atomic, 'max_dest_rd_atomic': a.max_dest_rd_atomic,
            'retry_cnt': a.retry_cnt, 'rnr_retry': a.rnr_retry, 'access': int(a.qp_access_flags)}


def passive(addr, port, ready, results, param):
    ai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    listener = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_recv_wr=1)))
    listener.listen()
    ready.set()
    child = listener.get_request()
    child.accept(param)
    time.sleep(0.5)
    results.put(('passive', qp_of(child)))
    time.sleep(0.5)
    child.close()
    listener.close()


def active(addr, port, ready, results, param, ack_timeout):
    ai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap()))
    if ack_timeout is not None:
        cmid.set_option(ce.RDMA_OPTION_ID, ce.RDMA_OPTION_ID_ACK_TIMEOUT, ack_timeout, 1)
    if not ready.wait(30):
        raise RuntimeError('the passive side never listened')
    cmid.connect(param)
    time.sleep(0.5)
    results.put(('active', qp_of(cmid)))
    time.sleep(0.5)
    cmid.disconnect()
    cmid.close()


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'{func.__name__} side:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def connection(addr, active_param=None, passive_param=None, ack_timeout=None):
    """{'active': ..., 'passive': ...}: each side's QP attributes once connected."""
    port = str(random.randint(20000, 29999))
    ready, results = mp.Event(), mp.Queue()
    procs = [mp.Process(target=side, args=(passive, addr, port, ready, results, passive_param)),
             mp.Process(target=side, args=(active, addr, port, ready, results, active_param, ack_timeout))]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
        if p.exitcode != 0:
            raise RuntimeError(f'a side exited with {p.exitcode}')
    return got


def resolving(addr):
    """What resolve_addr refuses at once: a second resolve, a destination with no route."""
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
    cmid.resolve_addr(AddrInfo(dst=addr, dst_service='7471', port_space=ce.RDMA_PS_TCP), 2000)
    event = CMEvent(channel)
    if event.event_type != ce.RDMA_CM_EVENT_ADDR_RESOLVED:
        raise RuntimeError(f'resolving {addr} gave event {event.event_type}')
    event.ack_cm_event()
    try:
        cmid.resolve_addr(AddrInfo(dst=addr, dst_service='7471', port_space=ce.RDMA_PS_TCP), 2000)
        raise RuntimeError('a second resolve_addr was taken')
    except PyverbsError as error:
        if getattr(error, 'error_code', None) != errno.EINVAL:
            raise RuntimeError(f'a second resolve_addr raised {error}, not EINVAL') from None
    cmid.close()
    channel.close()
    far = '198.51.100.1'   # TEST-NET-2: routed only where a default route is
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((far, 9))
        routed = True
    except OSError as error:
        routed = error.errno != errno.ENETUNREACH
    probe.close()
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
    try:
        cmid.resolve_addr(AddrInfo(dst=far, dst_service='7471', port_space=ce.RDMA_PS_TCP), 2000)
        if not routed:
            raise RuntimeError(f'resolve_addr took {far}, to which there is no route')
        CMEvent(channel).ack_cm_event()   # (resolved or not: an event comes)
    except PyverbsError as error:
        if routed or getattr(error, 'error_code', None) != errno.ENETUNREACH:
            raise RuntimeError(f'resolve_addr of {far} ({"routed" if routed else "no route"}) raised {error}') from None
    cmid.close()
    channel.close()
    return 'no route: ENETUNREACH at once' if not routed else 'routed: an event'


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    depth_max, resources_max = device_depths()
    try:
        print('resolve_addr:', resolving(addr))
        default = connection(addr)
        for name in ('active', 'passive'):
            want = {'timeout': 19, 'max_rd_atomic': depth_max, 'max_dest_rd_atomic': resources_max,
                    'retry_cnt': 7, 'rnr_retry': 7, 'access': READ_WRITE_ATOMIC}
            if default[name] != want:
                raise RuntimeError(f'connect(None)/accept(None): the {name} QP has {default[name]}, not {want}')
        asked = connection(addr, ConnParam(resources=3, depth=2), ConnParam(resources=1, depth=4))
        got = {name: (asked[name]['max_rd_atomic'], asked[name]['max_dest_rd_atomic'], asked[name]['access'])
               for name in asked}
        if got != {'passive': (4, 1, READ_WRITE_ATOMIC), 'active': (1, 4, READ_WRITE_ATOMIC)}:
            raise RuntimeError(f'(max_rd_atomic, max_dest_rd_atomic, access) per side: {got}')
        timed = connection(addr, ack_timeout=10)
        if (timed['active']['timeout'], timed['passive']['timeout']) != (10, 19):
            raise RuntimeError(f'ACK timeout 10 on the active id: active {timed["active"]["timeout"]}, passive '
                               f'{timed["passive"]["timeout"]}')
    except Exception as error:
        print(f'FAIL cm_negotiated_attrs: {error}')
        return 1
    print('OK cm_negotiated_attrs')
    return 0


if __name__ == '__main__':
    sys.exit(main())
