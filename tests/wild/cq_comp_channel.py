#!/usr/bin/env python3
"""Event-driven completions: a CompChannel, req_notify(), get_cq_event(), ack_events(), then poll().

Shape: linux-rdma/rdma-core Documentation/pyverbs.md "CQ" (`with CompChannel(ctx) as cc: cq =
CQ(ctx, num_cqes, None, cc, comp_vector)`, `print(cq)`), tests/test_cq_events.py (CqEventsUD/RC:
cq.req_notify(); channel.get_cq_event(cq); cq.ack_events(1)) and the `-e` (use events) mode of
rdma-core libibverbs/examples/rc_pingpong.c: arm, sleep on the channel, acknowledge, re-arm, drain
the CQ with poll. Enums: pyverbs <= 58 (`import pyverbs.enums as e`).

What it does: creates a completion channel and a CQ on it (comp_vector 0), prints the CQ, connects
two RC QPs of one process whose send and receive CQ it is, posts a receive, arms the CQ, SENDs 8
bytes, and then, until both the send and the receive completion are in, waits on the channel,
acknowledges the event, re-arms and polls. Asserts: get_cq_event returns for this CQ, both
completions succeed, the message arrived. A 30 s alarm turns a lost event into a failure. Prints
"OK cq_comp_channel".
"""
import signal
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, CompChannel
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR


def on_alarm(signum, frame):
    print('FAIL cq_comp_channel: no completion event within 30 s')
    sys.exit(1)


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(30)
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    pd = PD(ctx)
    with CompChannel(ctx) as cc:
        cq = CQ(ctx, 10, None, cc, 0)
        print(cq)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=2, max_recv_wr=2))
        attr = QPAttr()
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        a, b = QP(pd, init, attr), QP(pd, init, attr)
        idx = [i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:')][0]
        for qp, peer in ((a, b), (b, a)):
            rts = QPAttr()
            rts.path_mtu = e.IBV_MTU_1024
            rts.dest_qp_num = peer.qp_num
            rts.max_dest_rd_atomic = rts.max_rd_atomic = 1
            rts.min_rnr_timer, rts.timeout, rts.retry_cnt, rts.rnr_retry = 12, 14, 7, 7
            rts.ah_attr = AHAttr(port_num=1, is_global=1,
                                 gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
            qp.to_rts(rts)

        mr = MR(pd, 16, e.IBV_ACCESS_LOCAL_WRITE)
        mr.write(b'pingpong', 8)
        b.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 8, 8, mr.lkey)]))
        cq.req_notify()
        a.post_send(SendWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))

        done, events = {}, 0
        while len(done) < 2:
            cc.get_cq_event(cq)
            events += 1
            cq.ack_events(1)
            cq.req_notify()
            while True:
                n, wcs = cq.poll()
                if not n:
                    break
                for wc in wcs:
                    if wc.status != e.IBV_WC_SUCCESS:
                        print(f'FAIL cq_comp_channel: wr_id {wc.wr_id} completed with status {wc.status}')
                        return 1
                    done[wc.wr_id] = wc
        signal.alarm(0)
        if mr.read(8, 8) != b'pingpong' or done[2].opcode != e.IBV_WC_RECV:
            print(f'FAIL cq_comp_channel: received {mr.read(8, 8)!r}, opcode {done[2].opcode}')
            return 1
        print(f'{events} completion event(s) for 2 completions')
        for qp in (a, b):
            qp.close()
        cq.close()
    print('OK cq_comp_channel')
    return 0


if __name__ == '__main__':
    sys.exit(main())
