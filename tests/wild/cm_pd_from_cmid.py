#!/usr/bin/env python3
"""rdma_cm with PD(cmid): register MRs with chosen access flags on the CM id's own PD.

Usage: cm_pd_from_cmid.py [ADDRESS]

Shape: linux-rdma/rdma-core pyverbs/pd.pyx (PD.__init__: "creator: The Context/CMID object creating
the PD" -- `PD(cmid)` takes the rdma_cm_id's PD, `cmid.id.pd`, the one librdmacm gave the id and
its QP) and pyverbs/cmid.pyx (CMID.__init__ for an active AddrInfo does `self.pd = PD(self)`;
get_request() does `self.pd = PD(to_conn)`), as programs use it to register an MR with flags
reg_msgs/reg_read/reg_write do not offer: `pd = PD(cmid); mr = MR(pd, size,
IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)`. Two processes as in
rdma-core tests/base.py two_nodes_rdmacm_traffic; pyverbs >= 59 spelling; QP type given (RC).

What it does: the passive side makes PD(conn) for its accepted id and an MR with remote write and
read on it, sends (rkey, addr) through a queue; the active side takes cid.pd (the PD(self) pyverbs
made for it: a second PD(cid) would leave that wrapper to be garbage-collected, and its close would
try to deallocate librdmacm's PD), makes an MR on it, RDMA
WRITEs 32 bytes into the passive MR and RDMA READs 32 other bytes of it, through the CM id's QP
(post_write / post_read), then SENDs "done" (the passive side
closes once that send has completed: an Event). Asserts: completions succeed, both directions' data is
right; both processes exit 0. Prints "OK cm_pd_from_cmid".
"""
import multiprocessing as mp
import random
import socket
import sys
import traceback

from pyverbs.cmid import CMID, AddrInfo
from pyverbs.device import Context, get_device_list
from pyverbs.libibverbs_enums import ibv_access_flags, ibv_qp_type, ibv_send_flags, ibv_wc_status
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_port_space
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QPCap, QPInitAttr

FLAGS = (ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
         | ibv_access_flags.IBV_ACCESS_REMOTE_READ)


def netdev_ipv4():
    with Context(name=get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def ok(wc, what):
    if wc.status != ibv_wc_status.IBV_WC_SUCCESS:
        raise RuntimeError(f'{what}: status {wc.status}')


def passive(addr, port, listening, queue, finished):
    qia = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_send_wr=2, max_recv_wr=2))
    listener = CMID(creator=AddrInfo(src=addr, src_service=port, port_space=rdma_port_space.RDMA_PS_TCP,
                                     flags=RAI_PASSIVE), qp_init_attr=qia)
    listener.listen()
    listening.set()
    conn = listener.get_request()
    pd = PD(conn)
    mr = MR(pd, 64, FLAGS)
    mr.write(b'R' * 32, 32, 32)
    note = conn.reg_msgs(8)
    conn.post_recv(note)
    conn.accept()
    queue.put((mr.rkey, mr.buf))
    queue.close()        # pyverbs' blocking calls below (get_recv_comp) hold the GIL: the queue's feeder
    queue.join_thread()  # thread must have written the item before we block, or the peer never gets it
    wc = conn.get_recv_comp()
    ok(wc, 'receive "done"')
    if mr.read(32, 0) != b'W' * 32:
        raise RuntimeError(f'WRITE left {mr.read(8, 0)!r}...')
    print('passive: PD(conn) MR written by the peer', flush=True)
    finished.wait(20)   # the peer's last send has its ACK: now the connection may go
    conn.close()
    listener.close()


def active(addr, port, listening, queue, finished):
    qia = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_send_wr=2, max_recv_wr=2))
    cid = CMID(creator=AddrInfo(src=addr, dst=addr, dst_service=port, port_space=rdma_port_space.RDMA_PS_TCP),
               qp_init_attr=qia)
    mr = MR(cid.pd, 64, FLAGS)   # the PD pyverbs made for an active id (CMID.__init__: self.pd = PD(self))
    mr.write(b'W' * 32, 32)
    if not listening.wait(20):
        raise RuntimeError('no server')
    cid.connect()
    rkey, raddr = queue.get(timeout=20)
    cid.post_write(mr, 32, raddr, rkey, flags=ibv_send_flags.IBV_SEND_SIGNALED)
    ok(cid.get_send_comp(), 'RDMA WRITE')
    cid.post_read(mr, 32, raddr + 32, rkey, flags=ibv_send_flags.IBV_SEND_SIGNALED)
    ok(cid.get_send_comp(), 'RDMA READ')
    if mr.read(32, 0) != b'R' * 32:
        raise RuntimeError(f'READ brought {mr.read(8, 0)!r}...')
    done = cid.reg_msgs(4)
    done.write(b'done', 4)
    cid.post_send(done)
    ok(cid.get_send_comp(), 'SEND')
    finished.set()
    print('active: cid.pd MR used for WRITE and READ', flush=True)
    cid.disconnect()
    cid.close()


def run(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_pd_from_cmid: {func.__name__}:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if not addr:
        print('FAIL cm_pd_from_cmid: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port = str(random.randint(20000, 29999))
    listening, queue, finished = mp.Event(), mp.Queue(), mp.Event()
    procs = [mp.Process(target=run, args=(f, addr, port, listening, queue, finished)) for f in (passive, active)]
    for p in procs:
        p.start()
    codes = []
    for p in procs:
        p.join(45)
        if p.is_alive():
            p.kill()
            p.join()
        codes.append(p.exitcode)
    if codes != [0, 0]:
        print(f'FAIL cm_pd_from_cmid: exit codes passive={codes[0]} active={codes[1]}')
        return 1
    print('OK cm_pd_from_cmid')
    return 0


if __name__ == '__main__':
    sys.exit(main())
