#!/usr/bin/env python3
"""The ACK timeout rdma_cm gives both QPs when the active side sets one, with the asynchronous API.

Shape: rdma-core tests/base_rdmacm.py AsyncCMResources and tests/rdmacm_utils.py CMAsyncConnection (a
CMEventChannel per side, resolve_addr, resolve_route, create_qp, connect / accept, each event awaited),
with `set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, ...)` on the active id (tests/test_rdmacm.py
test_rdmacm_async_traffic_external_qp's `ack_timeout`), at three points: before resolve_addr, before
resolve_route, after it. Enums: pyverbs >= 59 (`librdmacm_enums`).

Asserts what rxe0 answers (Linux 6.1, rdma-core v59; issue 48, item 4): without the option both QPs get 19;
the active QP gets the timeout it set wherever it set it; the passive QP gets 19 when the option came after
the route, and otherwise what the kernel's CM derives from the path record (the packet lifetime is the
option's value minus 1, and the passive side's timeout one more, raised to the device's ACK delay of 15):
14 gives it 16, 10 gives 15, 22 gives 22. Prints "OK cm_async_ack_timeout".
"""
import multiprocessing as mp
import random
import socket
import sys
import time
import traceback

from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import ibv_qp_attr_mask, ibv_qp_type
from pyverbs.librdmacm_enums import RAI_PASSIVE, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, rdma_cm_event_type, \
    rdma_port_space
from pyverbs.qp import QPCap, QPInitAttr

TCP = rdma_port_space.RDMA_PS_TCP
EV = rdma_cm_event_type
# (where the active id sets its ACK timeout, the timeout) -> (the active QP's, the passive QP's), as on rxe0
CASES = {(None, None): (19, 19), ("before resolve_addr", 14): (14, 16), ("before resolve_route", 14): (14, 16),
         ("after resolve_route", 14): (14, 19), ("before resolve_route", 10): (10, 15),
         ("before resolve_route", 22): (22, 22)}


def netdev_ipv4():
    with Context(name=get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def event(channel, expected, listen_id=None):
    cm_event = CMEvent(channel)
    child = CMID(creator=cm_event, listen_id=listen_id) if cm_event.event_type == EV.RDMA_CM_EVENT_CONNECT_REQUEST \
        else None
    if cm_event.event_type != expected:
        raise RuntimeError(f'expected {expected.name}, got {cm_event.event_str()}')
    cm_event.ack_cm_event()
    return child


def qp_init():
    return QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_send_wr=1, max_recv_wr=1))


def timeout(cmid):
    return cmid.query_qp(ibv_qp_attr_mask.IBV_QP_TIMEOUT)[0].timeout


def passive(addr, port, listening, results, where, value):
    channel = CMEventChannel()
    listener = CMID(creator=channel, port_space=TCP)
    listener.bind_addr(AddrInfo(src=addr, src_service=port, port_space=TCP, flags=RAI_PASSIVE))
    listener.listen()
    listening.set()
    child = event(channel, EV.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=listener)
    child.create_qp(qp_init())
    child.accept(ConnParam())
    event(channel, EV.RDMA_CM_EVENT_ESTABLISHED)
    results.put(('passive', timeout(child)))
    time.sleep(0.5)


def active(addr, port, listening, results, where, value):
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=TCP)

    def option(at):
        if where == at:
            cmid.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, value, 1)
    option('before resolve_addr')
    cmid.resolve_addr(AddrInfo(src=addr, dst=addr, dst_service=port, port_space=TCP))
    event(channel, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    option('before resolve_route')
    if not listening.wait(30):
        raise RuntimeError('the passive side never listened')
    cmid.resolve_route()
    event(channel, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    option('after resolve_route')
    cmid.create_qp(qp_init())
    cmid.connect(ConnParam())
    event(channel, EV.RDMA_CM_EVENT_ESTABLISHED)
    results.put(('active', timeout(cmid)))
    time.sleep(0.5)


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'{func.__name__} side:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    for (where, value), want in CASES.items():
        port = str(random.randint(20000, 29999))
        listening, results = mp.Event(), mp.Queue()
        procs = [mp.Process(target=side, args=(func, addr, port, listening, results, where, value))
                 for func in (passive, active)]
        for p in procs:
            p.start()
        try:
            got = dict(results.get(timeout=60) for _ in procs)
        except Exception:
            print(f'FAIL cm_async_ack_timeout: no connection with the option {where} ({value})')
            return 1
        for p in procs:
            p.join(30)
        if (got['active'], got['passive']) != want:
            print(f'FAIL cm_async_ack_timeout: ACK timeout {value} set {where}: active {got["active"]}, passive '
                  f'{got["passive"]}, not {want}')
            return 1
        print(f'ACK timeout {value} set {where}: active {got["active"]}, passive {got["passive"]}')
    print('OK cm_async_ack_timeout')
    return 0


if __name__ == '__main__':
    sys.exit(main())
