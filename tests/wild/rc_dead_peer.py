#!/usr/bin/env python3
"""An RC QP whose peer process died without cleaning up: what its first WRITE gets.

Shape: two-process pyverbs programs that exchange QP numbers over a pipe (rdma-core tests/base.py's
multiprocessing syncers; rc_pingpong's server and client), where the server side crashes (os._exit,
as an uncaught signal or a kill would end it) and the client goes on posting. Enums: pyverbs <= 58.

What it does: the child process makes two RC QPs and an MR and sends their numbers to the parent; both
sides connect the QPs pairwise (the parent's first QP with retry_cnt 1, its second with 7: retry for
ever), then the child exits without destroying anything. Its QPs go with it, as a dead process's are
destroyed by its host. The parent then posts its first WRITE on each QP. Asserts, as rxe0 answers:
- retry_cnt 1: RETRY_EXC_ERR (12) once the retries run out, nothing written anywhere that completes;
- retry_cnt 7: no completion at all for 2 s (the requester retries for ever), then, the QP moved to
  ERR, WR_FLUSH_ERR (5).
Prints "OK rc_dead_peer" (issue 48, item 1).
"""
import multiprocessing as mp
import os
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


class Side:
    def __init__(self):
        self.ctx = Context(name=get_device_list()[0].name.decode())
        self.gid_index = next(i for i in range(self.ctx.query_port(1).gid_tbl_len)
                              if self.ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
        self.pd, self.cq = PD(self.ctx), CQ(self.ctx, 8)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=QPCap(4, 4))
        self.qps = [QP(self.pd, init, QPAttr()) for _ in range(2)]
        self.mr = MR(self.pd, 64, ACCESS)

    def connect(self, qp, dest, retry_cnt):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, path_mtu=e.IBV_MTU_1024)
        attr.qp_access_flags = ACCESS
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = dest, 0, 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 10, retry_cnt, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=self.ctx.query_gid(1, self.gid_index),
                                                                    sgid_index=self.gid_index))
        qp.to_rts(attr)


def child(conn):
    side = Side()
    conn.send(([qp.qp_num for qp in side.qps], side.mr.buf, side.mr.rkey))
    for qp, dest in zip(side.qps, conn.recv()):
        side.connect(qp, dest, 7)
    conn.send('ready')
    conn.recv()
    os._exit(0)   # no cleanup: the host destroys what the process held


def first_completion(cq, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            return wcs[0]
    return None


def main():
    side = Side()
    mine, theirs = mp.Pipe()
    peer = mp.Process(target=child, args=(theirs,))
    peer.start()
    dests, addr, rkey = mine.recv()
    mine.send([qp.qp_num for qp in side.qps])
    for qp, dest, retry_cnt in zip(side.qps, dests, (1, 7)):
        side.connect(qp, dest, retry_cnt)
    mine.recv()
    mine.send('exit')
    peer.join(20)
    if peer.exitcode != 0:
        print(f'FAIL rc_dead_peer: the peer process ended with {peer.exitcode}')
        return 1
    side.mr.write(b'D' * 64, 64)
    for wr_id, qp in enumerate(side.qps, 1):
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(side.mr.buf, 64, side.mr.lkey)])
        wr.set_wr_rdma(rkey, addr)
        qp.post_send(wr)
        wc = first_completion(side.cq, 10 if wr_id == 1 else 2)
        if wr_id == 1 and (wc is None or wc.status != e.IBV_WC_RETRY_EXC_ERR):
            print(f'FAIL rc_dead_peer: retry_cnt 1 gave {"no completion" if wc is None else wc.status}, not 12')
            return 1
        if wr_id == 2:
            if wc is not None:
                print(f'FAIL rc_dead_peer: retry_cnt 7 completed with {wc.status}: it retries for ever')
                return 1
            qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
            wc = first_completion(side.cq, 10)
            if wc is None or wc.status != e.IBV_WC_WR_FLUSH_ERR:
                print(f'FAIL rc_dead_peer: moved to ERR, the WRITE gave {"nothing" if wc is None else wc.status}')
                return 1
        print(f'retry_cnt {(1, 7)[wr_id - 1]}: status {wc.status}')
    print('OK rc_dead_peer')
    return 0


if __name__ == '__main__':
    sys.exit(main())
