#!/usr/bin/env python3
"""Synchronous rdma_cm server (passive side), pyverbs <= 58 spelling: `import pyverbs.cm_enums as ce`.

Usage: cm_sync_server.py [ADDRESS|- [PORT]]   (cm_sync_client.py is its peer; cm_sync_driver.py runs both)

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v44.0 .. v58.0, "CMID" ("Passive side":
`cap = QPCap(max_recv_wr=1)`, `qp_init_attr = QPInitAttr(cap=cap)` -- no qp_type: rdma_create_ep
takes the QP type from the AddrInfo's port space, RC for RDMA_PS_TCP --, `sai = AddrInfo(src=addr,
src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)`, `sid = CMID(creator=sai,
qp_init_attr=qp_init_attr)`, `sid.listen()`, `new_id = sid.get_request()`, `new_id.accept()`) and
rdma-core tests/rdmacm_utils.py _cmid_server_traffic (child_id.reg_msgs / post_recv /
get_recv_comp / post_send / get_send_comp). The address is the first argument, as rdma_server -s
takes it; without one, the IPv4 address of the first RDMA device's netdev, read from the port's
IPv4-mapped GID (::ffff:a.b.c.d). rdma_cm needs a real interface address, not 127.0.0.1 (on soft0,
whose netdev is the loopback interface, that GID holds 127.0.0.1).

What it does: listens, prints "LISTENING <addr> <port>" (the driver waits for it), takes one
connection request, posts a receive, accepts, waits for the client's "ping" message, answers "pong",
and closes. Asserts: the message received is "ping" and both completions succeed. Prints
"OK cm_sync_server".
"""
import socket
import sys

from pyverbs.qp import QPInitAttr, QPCap
from pyverbs.cmid import CMID, AddrInfo
import pyverbs.cm_enums as ce
import pyverbs.device as d
import pyverbs.enums as e


def netdev_ipv4():
    name = d.get_device_list()[0].name.decode()
    with d.Context(name=name) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    raise SystemExit('FAIL cm_sync_server: no IPv4 address on the RDMA device; give one as argument')


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != '-' else netdev_ipv4()
    port = sys.argv[2] if len(sys.argv) > 2 else '7471'
    cap = QPCap(max_recv_wr=1)
    qp_init_attr = QPInitAttr(cap=cap)
    sai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    sid = CMID(creator=sai, qp_init_attr=qp_init_attr)
    sid.listen()
    print(f'LISTENING {addr} {port}', flush=True)
    new_id = sid.get_request()
    mr = new_id.reg_msgs(64)
    new_id.post_recv(mr)
    new_id.accept()
    wc = new_id.get_recv_comp()
    got = mr.read(wc.byte_len, 0)
    print(f'server: received {got!r} (status {wc.status})', flush=True)
    if wc.status != e.IBV_WC_SUCCESS or got != b'ping':
        print(f'FAIL cm_sync_server: expected b"ping", got {got!r} with status {wc.status}')
        return 1
    reply = new_id.reg_msgs(4)
    reply.write(b'pong', 4)
    new_id.post_send(reply)
    wc = new_id.get_send_comp()
    if wc.status != e.IBV_WC_SUCCESS:
        print(f'FAIL cm_sync_server: the reply completed with status {wc.status}')
        return 1
    new_id.close()
    sid.close()
    print('OK cm_sync_server')
    return 0


if __name__ == '__main__':
    sys.exit(main())
