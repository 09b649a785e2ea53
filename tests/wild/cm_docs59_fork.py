#!/usr/bin/env python3
"""The rdma_cm snippet of pyverbs.md v59 (QPInitAttr without qp_type), both sides forked from one program.

Usage: cm_docs59_fork.py [ADDRESS]

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v59.0 .. v64.0, "CMID": `cap =
QPCap(max_recv_wr=1)`, `qp_init_attr = QPInitAttr(cap=cap)` (no qp_type: QPInitAttr's default is
IBV_QPT_UD, but rdma_create_ep sets qp_init_attr->qp_type = res->ai_qp_type, which
rdma_getaddrinfo made IBV_QPT_RC for RDMA_PS_TCP -- librdmacm/cma.c rdma_create_ep and
ucma_passive_ep), `from pyverbs.librdmacm_enums import rdma_port_space, RAI_PASSIVE`, `sai =
AddrInfo(src=addr, src_service=port, port_space=rdma_port_space.RDMA_PS_TCP, flags=RAI_PASSIVE)`,
`sid = CMID(creator=sai, qp_init_attr=qp_init_attr)`, `sid.listen()`, `new_id = sid.get_request()`,
`new_id.accept()`; active: `cai = AddrInfo(src=addr, dst=addr, dst_service=port,
port_space=rdma_port_space.RDMA_PS_TCP)`, `cid = CMID(creator=cai, qp_init_attr=qp_init_attr)`,
`cid.connect()`. The docs' addr is a literal; here the argument or the device's IPv4 address, and
the two sides run as two processes (os.fork, as small scripts do).

What it does: the forked child is the passive side, the parent the active side; once connected the
active side sends "hello" and the passive side checks it (closing once the send has completed,
as the active side tells it through a pipe), and the connection's QP type is checked
with query_qp on both sides. Asserts: QP type RC on both sides, the message arrives; the child exits
0. Prints "OK cm_docs59_fork".
"""
import os
import random
import select
import socket
import sys
import traceback

from pyverbs.qp import QPInitAttr, QPCap
from pyverbs.cmid import CMID, AddrInfo
from pyverbs.librdmacm_enums import rdma_port_space, RAI_PASSIVE
from pyverbs.libibverbs_enums import ibv_qp_attr_mask, ibv_qp_type
import pyverbs.device as d


def netdev_ipv4():
    with d.Context(name=d.get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def qp_type_of(cmid):
    _, init = cmid.query_qp(ibv_qp_attr_mask.IBV_QP_STATE)
    return init.qp_type


def passive(addr, port, ready_w, done_r):
    cap = QPCap(max_recv_wr=1)
    qp_init_attr = QPInitAttr(cap=cap)
    sai = AddrInfo(src=addr, src_service=port, port_space=rdma_port_space.RDMA_PS_TCP, flags=RAI_PASSIVE)
    sid = CMID(creator=sai, qp_init_attr=qp_init_attr)
    sid.listen()
    os.write(ready_w, b'L')
    new_id = sid.get_request()
    mr = new_id.reg_msgs(16)
    new_id.post_recv(mr)
    new_id.accept()
    if qp_type_of(new_id) != ibv_qp_type.IBV_QPT_RC:
        raise RuntimeError(f'passive QP type {qp_type_of(new_id)}, expected RC ({int(ibv_qp_type.IBV_QPT_RC)})')
    wc = new_id.get_recv_comp()
    if mr.read(wc.byte_len, 0) != b'hello':
        raise RuntimeError(f'received {mr.read(wc.byte_len, 0)!r}')
    print('passive: got hello on an RC QP', flush=True)
    select.select([done_r], [], [], 20)   # the peer's send has its ACK: now the connection may go
    new_id.close()
    sid.close()


def active(addr, port, done_w):
    cap = QPCap(max_recv_wr=1)
    qp_init_attr = QPInitAttr(cap=cap)
    cai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=rdma_port_space.RDMA_PS_TCP)
    cid = CMID(creator=cai, qp_init_attr=qp_init_attr)
    if qp_type_of(cid) != ibv_qp_type.IBV_QPT_RC:
        raise RuntimeError(f'active QP type {qp_type_of(cid)}, expected RC ({int(ibv_qp_type.IBV_QPT_RC)})')
    cid.connect()
    mr = cid.reg_msgs(5)
    mr.write(b'hello', 5)
    cid.post_send(mr)
    wc = cid.get_send_comp()
    if wc.status != 0:
        raise RuntimeError(f'send status {wc.status}')
    os.write(done_w, b'D')
    cid.disconnect()
    cid.close()


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if not addr:
        print('FAIL cm_docs59_fork: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port = str(random.randint(20000, 29999))
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            passive(addr, port, ready_w, done_r)
        except Exception:
            print(f'FAIL cm_docs59_fork: passive side:\n{traceback.format_exc()}', flush=True)
            code = 1
        os._exit(code)
    failed = None
    try:
        if not select.select([ready_r], [], [], 20)[0] or os.read(ready_r, 1) != b'L':
            raise RuntimeError('the passive side did not start listening')
        active(addr, port, done_w)
    except Exception:
        failed = traceback.format_exc()
    for _ in range(300):   # up to 30 s for the child
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        select.select([], [], [], 0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = -1
    if failed:
        print(f'FAIL cm_docs59_fork: active side:\n{failed}')
        return 1
    if status != 0:
        print(f'FAIL cm_docs59_fork: the passive side (child) ended with status {status}')
        return 1
    print('OK cm_docs59_fork')
    return 0


if __name__ == '__main__':
    sys.exit(main())
