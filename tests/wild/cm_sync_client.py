#!/usr/bin/env python3
"""Synchronous rdma_cm client (active side), pyverbs <= 58 spelling: `import pyverbs.cm_enums as ce`.

Usage: cm_sync_client.py [ADDRESS|- [PORT]]   (peer of cm_sync_server.py, which must be listening)

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v44.0 .. v58.0, "CMID" ("Active side": `cai =
AddrInfo(src=addr, dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)`, `cid =
CMID(creator=cai, qp_init_attr=qp_init_attr)` with `QPInitAttr(cap=cap)` and no qp_type,
`cid.connect()`), Marovlo/easyPyverbs cmClient.py / easyRDMACM.py (connect, then reg_msgs,
post_send, get_send_comp, post_recv, get_recv_comp, disconnect) and rdma-core tests/rdmacm_utils.py
_cmid_client_traffic. Address: first argument, else the IPv4 address of the first RDMA device's
netdev (from its IPv4-mapped GID), as cm_sync_server.py does.

What it does: creates the endpoint (which resolves the address and route and makes the QP), posts a
receive, connects, sends "ping", waits for the send and for the server's "pong", disconnects.
Asserts: the reply is "pong" and both completions succeed. Prints "OK cm_sync_client".
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
    raise SystemExit('FAIL cm_sync_client: no IPv4 address on the RDMA device; give one as argument')


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != '-' else netdev_ipv4()
    port = sys.argv[2] if len(sys.argv) > 2 else '7471'
    cap = QPCap(max_recv_wr=1)
    qp_init_attr = QPInitAttr(cap=cap)
    cai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
    cid = CMID(creator=cai, qp_init_attr=qp_init_attr)
    reply = cid.reg_msgs(64)
    cid.post_recv(reply)
    cid.connect()
    msg = cid.reg_msgs(4)
    msg.write('ping', 4)
    cid.post_send(msg)
    wc = cid.get_send_comp()
    if wc.status != e.IBV_WC_SUCCESS:
        print(f'FAIL cm_sync_client: the send completed with status {wc.status}')
        return 1
    wc = cid.get_recv_comp()
    got = reply.read(wc.byte_len, 0)
    print(f'client: received {got!r} (status {wc.status})', flush=True)
    if wc.status != e.IBV_WC_SUCCESS or got != b'pong':
        print(f'FAIL cm_sync_client: expected b"pong", got {got!r} with status {wc.status}')
        return 1
    cid.disconnect()
    cid.close()
    print('OK cm_sync_client')
    return 0


if __name__ == '__main__':
    sys.exit(main())
