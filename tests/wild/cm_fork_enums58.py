#!/usr/bin/env python3
"""rdma_cm, both sides in one program (multiprocessing), RDMA WRITE through the CM id (pyverbs <= 58).

Usage: cm_fork_enums58.py [ADDRESS]

Shape: linux-rdma/rdma-core tests of v58.0: tests/base.py RDMACMBaseTest.two_nodes_rdmacm_traffic
(an mp.Process per side, a syncer so the active side connects once the passive side listens, a
notifier queue to pass the MR's (rkey, addr)), tests/base_rdmacm.py SyncCMResources
(`AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)` /
`AddrInfo(src=addr, dst=addr, dst_service=port, port_space=...)`, `CMID(creator=self.ai,
qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap()))`, get_request() for the child id) and
tests/rdmacm_utils.py remote_traffic (reg_write on the passive side, post_write(mr, size, addr, rkey,
flags=e.IBV_SEND_SIGNALED) + get_send_comp() on the active side). Enums: `import pyverbs.cm_enums as
ce`, `import pyverbs.enums as e`. Address: the argument, else the IPv4 address in the first device's
IPv4-mapped GID (rdma_cm wants the netdev's address; 127.0.0.1 is refused on real devices).

What it does: the passive process listens, gets the request, posts a receive, accepts, registers a
remote-write MR and sends its (rkey, addr) to the active process through a queue; the active process
connects, RDMA WRITEs 64 bytes there, then SENDs "done". The passive side checks the 64 bytes after
"done" arrives, and closes once the active side has that send's completion (an Event). Asserts:
every completion succeeds, the data landed; both processes exit 0. Prints "OK cm_fork_enums58".
"""
import multiprocessing as mp
import random
import socket
import sys
import traceback

from pyverbs.cmid import CMID, AddrInfo
from pyverbs.qp import QPCap, QPInitAttr
import pyverbs.cm_enums as ce
import pyverbs.device as d
import pyverbs.enums as e

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
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        raise RuntimeError(f'{what}: completion {None if wc is None else wc.status}')
    return wc


def passive(addr, port, syncer, notifier, finished):
    ai = AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_recv_wr=1)))
    cmid.listen()
    syncer.set()
    child = cmid.get_request()
    msg = child.reg_msgs(16)
    child.post_recv(msg)
    child.accept()
    mr = child.reg_write(SIZE)
    mr.write(b's' * SIZE, SIZE)
    notifier.put((mr.rkey, mr.buf))
    notifier.close()        # pyverbs' blocking calls below (get_recv_comp) hold the GIL: the queue's feeder
    notifier.join_thread()  # thread must have written the item before we block, or the peer never gets it
    wc = check(child.get_recv_comp(), 'receive "done"')
    if msg.read(wc.byte_len, 0) != b'done':
        raise RuntimeError(f'expected b"done", got {msg.read(wc.byte_len, 0)!r}')
    if mr.read(SIZE, 0) != PATTERN:
        raise RuntimeError(f'the RDMA WRITE left {mr.read(8, 0)!r}...')
    print('passive: 64 bytes written by the peer are in place', flush=True)
    finished.wait(20)   # the peer's last send has its ACK: now the connection may go
    child.close()
    cmid.close()


def active(addr, port, syncer, notifier, finished):
    ai = AddrInfo(src=addr, dst=addr, dst_service=port, port_space=ce.RDMA_PS_TCP)
    cmid = CMID(creator=ai, qp_init_attr=QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap()))
    if not syncer.wait(20):
        raise RuntimeError('the passive side never listened')
    cmid.connect()
    rkey, remote_addr = notifier.get(timeout=20)
    mr = cmid.reg_msgs(SIZE)
    mr.write(PATTERN, SIZE)
    cmid.post_write(mr, SIZE, remote_addr, rkey, flags=e.IBV_SEND_SIGNALED)
    check(cmid.get_send_comp(), 'RDMA WRITE')
    done = cmid.reg_msgs(4)
    done.write(b'done', 4)
    cmid.post_send(done)
    check(cmid.get_send_comp(), 'SEND "done"')
    finished.set()
    print('active: wrote 64 bytes and said done', flush=True)
    cmid.disconnect()
    cmid.close()


def side(func, *args):
    try:
        func(*args)
    except Exception:
        print(f'FAIL cm_fork_enums58: {func.__name__} side:\n{traceback.format_exc()}', flush=True)
        sys.exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if addr is None:
        print('FAIL cm_fork_enums58: no IPv4 address on the RDMA device; give one as argument')
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
        print(f'FAIL cm_fork_enums58: exit codes passive={codes[0]} active={codes[1]}')
        return 1
    print('OK cm_fork_enums58')
    return 0


if __name__ == '__main__':
    sys.exit(main())
