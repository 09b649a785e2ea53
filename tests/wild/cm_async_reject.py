#!/usr/bin/env python3
"""rdma_cm with event channels: a refused connection, by nobody listening and by the peer (pyverbs >= 59).

Usage: cm_async_reject.py [ADDRESS]

Shape: linux-rdma/rdma-core tests of v59.0: tests/rdmacm_utils.py CMAsyncConnection with reject_conn=True
(the passive side answers the connect request with `child_id.reject(REJECT_MSG.encode())`, the active
side's event_handler expects RDMA_CM_EVENT_REJECTED and checks `cm_event.private_data[:len(REJECT_MSG)]`),
tests/base_rdmacm.py AsyncCMResources (`CMEventChannel()`, `CMID(creator=channel, port_space=...)`,
`cmid.create_qp(QPInitAttr(qp_type=..., cap=QPCap()))`), run as the two processes tests/base.py makes;
a client that looks at its QP after a refusal with `cmid.query_qp(ibv_qp_attr_mask.IBV_QP_STATE)`.
Enums: the classes of pyverbs.libibverbs_enums and pyverbs.librdmacm_enums. Address: the argument, else
the IPv4 address in the first device's IPv4-mapped GID.

What it does: (1) a passive process rejects an active process's request with a message; (2) then an
active id connects to a port nobody listens on. Asserts: each active id gets RDMA_CM_EVENT_REJECTED; its QP, which
rdma_cm made, is then in ERR (librdmacm moves it there as it hands out the event); with nobody listening
the event carries the REJ's 148 bytes of private data; a peer's rejection carries the peer's message
first; both processes exit 0. Prints "OK cm_async_reject".
"""
import multiprocessing as mp
import random
import socket
import sys
import traceback

from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID, ConnParam
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import ibv_qp_attr_mask, ibv_qp_state, ibv_qp_type
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_cm_event_type, rdma_port_space
from pyverbs.qp import QPCap, QPInitAttr

TCP = rdma_port_space.RDMA_PS_TCP
REJECT_MSG = 'connection rejected'


def netdev_ipv4():
    with Context(name=get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def event_handler(channel, expected, listen_id=None):
    """The next event of `channel`, which must be `expected`: (its private data, the child id of a request)."""
    cm_event = CMEvent(channel)
    child = None
    if cm_event.event_type == rdma_cm_event_type.RDMA_CM_EVENT_CONNECT_REQUEST:
        child = CMID(creator=cm_event, listen_id=listen_id)
    if cm_event.event_type != expected:
        raise RuntimeError(f'Expected this event: {expected.name}, got this event: {cm_event.event_str()}')
    data = cm_event.private_data
    cm_event.ack_cm_event()
    return data, child


def init_attr():
    return QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_send_wr=1, max_recv_wr=1))


def connect_and_get_rejected(addr, port, ready=None):
    """An active id that connects to addr:port: the REJECTED event's private data, and its QP's state then."""
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=TCP)
    cmid.resolve_addr(AddrInfo(src=addr, dst=addr, dst_service=port, port_space=TCP))
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_ADDR_RESOLVED)
    if ready is not None and not ready.wait(20):
        raise RuntimeError('the passive side never listened')
    cmid.resolve_route()
    event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_ROUTE_RESOLVED)
    cmid.create_qp(init_attr())
    cmid.connect(ConnParam())
    data, _ = event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_REJECTED)
    attr, _ = cmid.query_qp(ibv_qp_attr_mask.IBV_QP_STATE)
    cmid.close()
    channel.close()
    return data, attr.qp_state


def passive(addr, port, listening):
    channel = CMEventChannel()
    cmid = CMID(creator=channel, port_space=TCP)
    cmid.bind_addr(AddrInfo(src=addr, src_service=port, port_space=TCP, flags=RAI_PASSIVE))
    cmid.listen()
    listening.set()
    _, child_id = event_handler(channel, rdma_cm_event_type.RDMA_CM_EVENT_CONNECT_REQUEST, listen_id=cmid)
    child_id.reject(REJECT_MSG.encode())
    print('passive: rejected the request', flush=True)
    child_id.close()
    cmid.close()
    channel.close()


def active(addr, port, listening):
    data, state = connect_and_get_rejected(addr, port, listening)
    if data[:len(REJECT_MSG)].decode() != REJECT_MSG:
        raise RuntimeError(f'CM event data ({data}) is different than the expected ({REJECT_MSG})')
    if state != ibv_qp_state.IBV_QPS_ERR:
        raise RuntimeError(f'after the peer rejected us our QP is in state {state}, not ERR')
    print('active: rejected by the peer, with its message; QP in ERR', flush=True)


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_async_reject: {func.__name__} side:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if addr is None:
        print('FAIL cm_async_reject: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port, nobody = random.sample(range(20000, 30000), 2)
    listening = mp.Event()
    procs = [mp.Process(target=side, args=(func, addr, str(port), listening)) for func in (passive, active)]
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
        print(f'FAIL cm_async_reject: exit codes passive={codes[0]} active={codes[1]}')
        return 1
    data, state = connect_and_get_rejected(addr, str(nobody))   # (after the forks: this process uses rdma_cm now)
    print(f'nobody listening: REJECTED with {len(data)} bytes of private data; QP state {state}', flush=True)
    if len(data) != 148 or state != ibv_qp_state.IBV_QPS_ERR:
        print(f'FAIL cm_async_reject: nobody listening gave {len(data)} bytes of private data (expected 148) '
              f'and QP state {state} (expected {int(ibv_qp_state.IBV_QPS_ERR)}, ERR)')
        return 1
    print('OK cm_async_reject')
    return 0


if __name__ == '__main__':
    sys.exit(main())
