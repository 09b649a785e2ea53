#!/usr/bin/env python3
"""rdma_cm, two processes: the client SENDs before the server has posted its receive (pyverbs <= 58).

Usage: cm_send_before_receive.py [ADDRESS]

Shape: Documentation/pyverbs.md v44-v58 (CMID, passive and active side: `CMID(creator=AddrInfo(...),
qp_init_attr=QPInitAttr(cap=...))`, `listen`, `get_request`, `accept`, `connect`, `reg_msgs`,
`post_send`, `post_recv`, `get_recv_comp`, `get_send_comp`), with the server's receive posted after
accept() rather than before it, as many hand-written servers do (the receive buffer is set up once the
connection is made), and a client that, once it has sent, blocks waiting for the server's word (a
multiprocessing Event, standing for a socket or a queue) instead of polling its CQ. Both sides in one
program as rdma-core's tests/base.py runs them (an mp.Process each). Enums: `import pyverbs.enums as e`.
Address: the argument, else the IPv4 address in the first device's IPv4-mapped GID.

What it does: the client connects and SENDs "early bird" at once: the server has no receive posted, so
its NIC answers RNR NAK, and the client's NIC retries (rdma_cm gives rnr_retry 7: for ever). The server
posts its receive 50 ms after accept(), waits for the message, then tells the client; only then does the
client wait for its send's completion. Asserts: the server receives the 10 bytes while the client's
program sits blocked (rxe's retry is the kernel's timer; nothing of the client runs), the client's SEND
completes with IBV_WC_SUCCESS; both processes exit 0. Prints "OK cm_send_before_receive".
"""
import multiprocessing as mp
import random
import socket
import sys
import time
import traceback

from pyverbs.cmid import CMID, AddrInfo
from pyverbs.qp import QPCap, QPInitAttr
import pyverbs.cm_enums as ce
import pyverbs.device as d
import pyverbs.enums as e

MESSAGE = b'early bird'


def netdev_ipv4():
    with d.Context(name=d.get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def server(addr, port, listening, received):
    sai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    sid = CMID(creator=sai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_recv_wr=1)))
    sid.listen()
    listening.set()
    new_id = sid.get_request()
    new_id.accept()
    time.sleep(0.05)                    # setting up the receive buffer: the client has sent already
    mr = new_id.reg_msgs(64)
    new_id.post_recv(mr)
    wc = new_id.get_recv_comp()
    got = mr.read(wc.byte_len, 0)
    if wc.status != e.IBV_WC_SUCCESS or got != MESSAGE:
        raise RuntimeError(f'expected {MESSAGE!r}, got {got!r} with status {wc.status}')
    print(f'server: received {got!r} after posting the receive late', flush=True)
    received.set()
    new_id.close()
    sid.close()


def client(addr, port, listening, received):
    cai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
    cid = CMID(creator=cai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=1)))
    if not listening.wait(20):
        raise RuntimeError('the server never listened')
    cid.connect()
    msg = cid.reg_msgs(len(MESSAGE))
    msg.write(MESSAGE, len(MESSAGE))
    cid.post_send(msg)
    if not received.wait(20):           # blocked: no poll of our CQ until the server says it has the message
        raise RuntimeError('the server never got the message while this side waited for it')
    wc = cid.get_send_comp()
    if wc.status != e.IBV_WC_SUCCESS:
        raise RuntimeError(f'the send completed with status {wc.status}')
    print('client: the server got the message; the send completed', flush=True)
    cid.close()


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_send_before_receive: {func.__name__}:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if addr is None:
        print('FAIL cm_send_before_receive: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port = str(random.randint(20000, 29999))
    listening, received = mp.Event(), mp.Event()
    procs = [mp.Process(target=side, args=(func, addr, port, listening, received)) for func in (server, client)]
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
        print(f'FAIL cm_send_before_receive: exit codes server={codes[0]} client={codes[1]}')
        return 1
    print('OK cm_send_before_receive')
    return 0


if __name__ == '__main__':
    sys.exit(main())
