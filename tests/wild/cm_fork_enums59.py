#!/usr/bin/env python3
"""rdma_cm, both sides in one program (multiprocessing), RDMA READ through the CM id (pyverbs >= 59).

Usage: cm_fork_enums59.py [ADDRESS]

Shape: linux-rdma/rdma-core tests of v59.0 (after "pyverbs: Align code to support Cython 3.1.0
format"): tests/base.py two_nodes_rdmacm_traffic (an mp.Process per side, a syncer, a notifier
queue), tests/base_rdmacm.py SyncCMResources (`AddrInfo(..., port_space=rdma_port_space.RDMA_PS_TCP,
flags=RAI_PASSIVE)`, `CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC,
cap=QPCap()))`, get_request()) and tests/rdmacm_utils.py remote_traffic with remote_op='read'
(reg_read on the passive side; post_read(mr, size, addr, rkey, flags=ibv_send_flags.IBV_SEND_SIGNALED)
+ get_send_comp() on the active side). Enums: the classes of pyverbs.librdmacm_enums and
pyverbs.libibverbs_enums. Address: the argument, else the IPv4 address in the first device's
IPv4-mapped GID.

What it does: the passive process listens, gets the request, posts a receive, accepts, registers a
remote-read MR holding a 64-byte pattern and sends its (rkey, addr) through a queue; the active
process connects, RDMA READs the 64 bytes, checks them, then SENDs "done" (the passive side
closes once that send has completed on the active side: an Event). Asserts: every completion
succeeds (ibv_wc_status.IBV_WC_SUCCESS), the bytes read are the pattern; both processes exit 0.
Prints "OK cm_fork_enums59".
"""
import multiprocessing as mp
import random
import socket
import sys
import traceback

from pyverbs.cmid import CMID, AddrInfo
from pyverbs.qp import QPCap, QPInitAttr
from pyverbs.librdmacm_enums import RAI_PASSIVE, rdma_port_space
from pyverbs.libibverbs_enums import ibv_qp_type, ibv_send_flags, ibv_wc_status
import pyverbs.device as d

SIZE = 64
PATTERN = bytes(range(SIZE))


def netdev_ipv4():
    with d.Context(name=d.get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def check(wc, what):
    if wc is None or wc.status != ibv_wc_status.IBV_WC_SUCCESS:
        raise RuntimeError(f'{what}: completion {None if wc is None else wc.status}')
    return wc


def passive(addr, port, syncer, notifier, finished):
    ai = AddrInfo(src=addr, src_service=port, port_space=rdma_port_space.RDMA_PS_TCP, flags=RAI_PASSIVE)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap(max_recv_wr=1)))
    cmid.listen()
    syncer.set()
    child = cmid.get_request()
    msg = child.reg_msgs(16)
    child.post_recv(msg)
    child.accept()
    mr = child.reg_read(SIZE)
    mr.write(PATTERN, SIZE)
    notifier.put((mr.rkey, mr.buf))
    notifier.close()        # pyverbs' blocking calls below (get_recv_comp) hold the GIL: the queue's feeder
    notifier.join_thread()  # thread must have written the item before we block, or the peer never gets it
    wc = check(child.get_recv_comp(), 'receive "done"')
    if msg.read(wc.byte_len, 0) != b'done':
        raise RuntimeError(f'expected b"done", got {msg.read(wc.byte_len, 0)!r}')
    print('passive: the peer read the pattern and said done', flush=True)
    finished.wait(20)   # the peer's last send has its ACK: now the connection may go
    child.close()
    cmid.close()


def active(addr, port, syncer, notifier, finished):
    ai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=rdma_port_space.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, cap=QPCap()))
    if not syncer.wait(20):
        raise RuntimeError('the passive side never listened')
    cmid.connect()
    rkey, remote_addr = notifier.get(timeout=20)
    mr = cmid.reg_msgs(SIZE)
    cmid.post_read(mr, SIZE, remote_addr, rkey, flags=ibv_send_flags.IBV_SEND_SIGNALED)
    check(cmid.get_send_comp(), 'RDMA READ')
    if mr.read(SIZE, 0) != PATTERN:
        raise RuntimeError(f'the RDMA READ brought {mr.read(8, 0)!r}...')
    done = cmid.reg_msgs(4)
    done.write(b'done', 4)
    cmid.post_send(done)
    check(cmid.get_send_comp(), 'SEND "done"')
    finished.set()
    print('active: read 64 bytes and said done', flush=True)
    cmid.disconnect()
    cmid.close()


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_fork_enums59: {func.__name__} side:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if addr is None:
        print('FAIL cm_fork_enums59: no IPv4 address on the RDMA device; give one as argument')
        return 1
    port = str(random.randint(20000, 29999))
    syncer, notifier, finished = mp.Event(), mp.Queue(), mp.Event()
    procs = [mp.Process(target=side, args=(passive, addr, port, syncer, notifier, finished)),
             mp.Process(target=side, args=(active, addr, port, syncer, notifier, finished))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(45)
    codes = []
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
            codes.append('timeout')
        else:
            codes.append(p.exitcode)
    if codes != [0, 0]:
        print(f'FAIL cm_fork_enums59: exit codes passive={codes[0]} active={codes[1]}')
        return 1
    print('OK cm_fork_enums59')
    return 0


if __name__ == '__main__':
    sys.exit(main())
