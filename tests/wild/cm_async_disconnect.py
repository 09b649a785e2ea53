#!/usr/bin/env python3
"""rdma_cm with event channels (asynchronous ids): the side that disconnects gets DISCONNECTED too (pyverbs >= 59).

Usage: cm_async_disconnect.py [ADDRESS]

Shape: linux-rdma/rdma-core tests of v59.0: tests/base_rdmacm.py AsyncCMResources (`CMEventChannel()`,
`CMID(creator=self.channel, port_space=...)`, `CMID(creator=cm_event, listen_id=self.cmid)` for the child
id, `cmid.create_qp(QPInitAttr(qp_type=..., cap=QPCap()))`), tests/rdmacm_utils.py CMAsyncConnection
(`bind_addr` + `listen` on the passive side; `resolve_addr`, `resolve_route`, `connect(ConnParam())` on the
active side; `event_handler`: `CMEvent(channel)`, compare `event_type`, `ack_cm_event()`; its disconnect():
the passive side calls `child_id.disconnect()`, the active side waits for RDMA_CM_EVENT_DISCONNECTED and
then calls `cmid.disconnect()`), run as the two processes tests/base.py makes. Enums: the classes of
pyverbs.librdmacm_enums. Address: the argument, else the IPv4 address in the first device's IPv4-mapped GID.

What it does: the two sides connect; the passive side disconnects, then waits for its next event; the
active side waits for DISCONNECTED, then disconnects too (which answers the passive side's DREQ).
Asserts: the events come in order on each side, and the side that disconnected first gets
RDMA_CM_EVENT_DISCONNECTED once its peer answers (librdmacm delivers it to both sides; the IB CM's DREP
brings it); both processes exit 0. Prints "OK cm_async_disconnect".
"""
import multiprocessing as mp
import random
import socket
import sys
import traceback

from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import ibv_qp_type
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_cm_event_type, rdma_port_space
from pyverbs.qp import QPCap, QPInitAttr

TCP = rdma_port_space.RDMA_PS_TCP


def netdev_ipv4():
    with Context(name=get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def event_handler(channel, expected, listen_id=None):
    """The next event of `channel`, which must be `expected`; for a connect request, the new child id."""
    cm_event = CMEvent(channel)
    child = None
    if cm_event.event_type == rdma_cm_event_type.RDMA_CM_EVENT_CONNECT_REQUEST:
        child = CMID(creator=cm_event, listen_id=listen_id)
    if cm_event.event_type != expected:
        raise RuntimeError(f'Expected this event: {expected.name}, got this event: {cm_event.event_str()}')
    cm_event.ack_cm_event()
    return child


def init_attr():
    return QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_send_wr=1, max_recv_wr=1))


def passive(addr, port, listening):
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=TCP)
    cmid.bind_addr(AddrInfo(src=addr, src_service=port, port_space=TCP, flags=RAI_PASSIVE))
    cmid.listen()
    listening.set()
    child_id = event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=cmid)
    child_id.create_qp(init_attr())
    child_id.accept(ConnParam())
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_ESTABLISHED)
    child_id.disconnect()
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_DISCONNECTED)   # ours, once the peer answered
    print('passive: disconnected, and got DISCONNECTED', flush=True)
    child_id.close()
    cmid.close()
    channel.close()


def active(addr, port, listening):
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=TCP)
    cmid.resolve_addr(AddrInfo(src=addr, dst=addr, dst_service=port, port_space=TCP))
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_ADDR_RESOLVED)
    if not listening.wait(20):
        raise RuntimeError('the passive side never listened')
    cmid.resolve_route()
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_ROUTE_RESOLVED)
    cmid.create_qp(init_attr())
    cmid.connect(ConnParam())
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_ESTABLISHED)
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_DISCONNECTED)
    cmid.disconnect()
    print('active: got DISCONNECTED, then disconnected', flush=True)
    cmid.close()
    channel.close()


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_async_disconnect: {func.__name__} side:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if addr is None:
        print('FAIL cm_async_disconnect: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port = str(random.randint(20000, 29999))
    listening = mp.Event()
    procs = [mp.Process(target=side, args=(func, addr, port, listening)) for func in (passive, active)]
    for p in procs:
        p.start()
    codes = []
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()
            codes.append('timeout')
        else:
            codes.append(p.exitcode)
    if codes != [0, 0]:
        print(f'FAIL cm_async_disconnect: exit codes passive={codes[0]} active={codes[1]}')
        return 1
    print('OK cm_async_disconnect')
    return 0


if __name__ == '__main__':
    sys.exit(main())
