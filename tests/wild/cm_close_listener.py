#!/usr/bin/env python3
"""rdma_cm server that takes one client, closes its listening id, and goes on serving the accepted id.

Usage: cm_close_listener.py [ADDRESS]

Shape: Marovlo/easyPyverbs easyRDMACM.py listen() (`cmid = CMID(creator=self.cai,
qp_init_attr=...)`, `cmid.listen()`, `mycmid = cmid.get_request()`, `mycmid.accept()`,
`cmid.close()  # only one cmid is needed`, then all traffic through mycmid: reg_msgs, post_recv,
get_recv_comp, post_send, get_send_comp -- its handshake()), run as the two processes rdma-core's
tests/base.py two_nodes_rdmacm_traffic makes. In librdmacm the connection's id is its own
rdma_cm_id (rdma_get_request migrates it off the listener's channel for a synchronous id), so
destroying the listener leaves it working. pyverbs >= 59 spelling; the QP type is given (RC) so that
this program tests the listener's close and nothing else.

What it does: the server accepts, closes the listener, then answers three "ping N" messages with
"pong N" on the accepted id; the client sends the pings and checks the pongs. Asserts: every
completion succeeds and every reply matches; both processes exit 0. Prints "OK cm_close_listener".
"""
import multiprocessing as mp
import random
import socket
import sys
import traceback

from pyverbs.cmid import CMID, AddrInfo
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import ibv_qp_type, ibv_wc_status
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_port_space
from pyverbs.qp import QPCap, QPInitAttr

ROUNDS = 3


def netdev_ipv4():
    with Context(name=get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def init_attr():
    return QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC,
                      cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1))


def expect_ok(wc, what):
    if wc.status != ibv_wc_status.IBV_WC_SUCCESS:
        raise RuntimeError(f'{what}: status {wc.status}')
    return wc


def server(addr, port, listening):
    listener = CMID(creator=AddrInfo(src=addr, src_service=port, port_space=rdma_port_space.RDMA_PS_TCP,
                                     flags=RAI_PASSIVE), qp_init_attr=init_attr())
    listener.listen()
    listening.set()
    conn = listener.get_request()
    conn.accept()
    listener.close()   # one client only: the accepted id is all we need
    for i in range(ROUNDS):
        recv_mr = conn.reg_msgs(32)
        conn.post_recv(recv_mr)
        wc = expect_ok(conn.get_recv_comp(), f'receive {i}')
        text = recv_mr.read(wc.byte_len, 0).decode()
        if text != f'ping {i}':
            raise RuntimeError(f'round {i}: got {text!r}')
        send_mr = conn.reg_msgs(len(f'pong {i}'))
        send_mr.write(f'pong {i}', len(f'pong {i}'))
        conn.post_send(send_mr)
        expect_ok(conn.get_send_comp(), f'send {i}')
    print(f'server: answered {ROUNDS} pings after closing the listener', flush=True)
    conn.close()


def client(addr, port, listening):
    cid = CMID(creator=AddrInfo(src=addr, dst=addr, dst_service=port, port_space=rdma_port_space.RDMA_PS_TCP),
               qp_init_attr=init_attr())
    if not listening.wait(20):
        raise RuntimeError('no server')
    cid.connect()
    for i in range(ROUNDS):
        reply = cid.reg_msgs(32)
        cid.post_recv(reply)
        msg = cid.reg_msgs(len(f'ping {i}'))
        msg.write(f'ping {i}', len(f'ping {i}'))
        cid.post_send(msg)
        expect_ok(cid.get_send_comp(), f'send {i}')
        wc = expect_ok(cid.get_recv_comp(), f'receive {i}')
        text = reply.read(wc.byte_len, 0).decode()
        if text != f'pong {i}':
            raise RuntimeError(f'round {i}: got {text!r}')
    print(f'client: {ROUNDS} pongs received', flush=True)
    cid.disconnect()
    cid.close()


def run(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_close_listener: {func.__name__}:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if not addr:
        print('FAIL cm_close_listener: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port = str(random.randint(20000, 29999))
    listening = mp.Event()
    procs = {name: mp.Process(target=run, args=(func, addr, port, listening))
             for name, func in (('server', server), ('client', client))}
    for p in procs.values():
        p.start()
    codes = {}
    for name, p in procs.items():
        p.join(45)
        if p.is_alive():
            p.kill()
            p.join()
        codes[name] = p.exitcode
    if any(code != 0 for code in codes.values()):
        print(f'FAIL cm_close_listener: exit codes {codes}')
        return 1
    print('OK cm_close_listener')
    return 0


if __name__ == '__main__':
    sys.exit(main())
