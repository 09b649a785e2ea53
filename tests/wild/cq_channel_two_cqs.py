#!/usr/bin/env python3
"""One completion channel for a QP's two CQs: events come out in the order the completions happened.

Shape: rdma-core tests/test_cq_events.py (CqEventsRC: a send and a receive CQ on one CompChannel, each
armed, `channel.get_cq_event(cq)` naming the CQ the program expects next, `cq.ack_events(1)`) and
event-driven servers that share one channel among their CQs (rc_pingpong.c `-e`, which has one CQ;
multi-CQ servers in the same style). Enums: pyverbs <= 58 (`import pyverbs.enums as e`).

What it does: a CompChannel; the send CQ is created first, the receive CQ second; two RC QPs of one
process connected to each other, each sending on the send CQ and receiving on the receive CQ. Both CQs
are armed, a receive is posted, 8 bytes are SENT, and the program waits until both completions can be
polled, so that both events are raised before it asks. Then it asks the channel for the receive CQ's
event first: the receive completed when the SEND arrived, the send only when its ACK came back, so a
channel that hands out events in the order they happened (the kernel queues them so) gives the receive
CQ's first, whatever order the CQs were created in; pyverbs raises "Received event on an unexpected CQ"
where it would not. Asserts both events, in that order, and both completions. A 30 s alarm turns a
lost event into a failure. Prints "OK cq_channel_two_cqs" (issue 48, item 5).
"""
import signal
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ, CompChannel
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR


def on_alarm(signum, frame):
    print('FAIL cq_channel_two_cqs: no event within 30 s')
    sys.exit(1)


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(30)
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    idx = next(i for i in range(ctx.query_port(1).gid_tbl_len)
               if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    channel = CompChannel(ctx)
    send_cq = CQ(ctx, 8, None, channel, 0)
    recv_cq = CQ(ctx, 8, None, channel, 0)
    pd = PD(ctx)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=send_cq, rcq=recv_cq, cap=QPCap(4, 4))
    a, b = QP(pd, init, QPAttr()), QP(pd, init, QPAttr())
    for qp, peer in ((a, b), (b, a)):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, path_mtu=e.IBV_MTU_1024)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = peer.qp_num, 0, 0
        attr.max_rd_atomic = attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=ctx.query_gid(1, idx), sgid_index=idx))
        qp.to_rts(attr)
    src, dst = MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE), MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE)
    src.write(b'in order', 8)
    send_cq.req_notify()
    recv_cq.req_notify()
    b.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(dst.buf, 8, dst.lkey)]))
    a.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src.buf, 8, src.lkey)]))
    got = {}
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:   # (polling takes completions, never events)
        for cq in (send_cq, recv_cq):
            n, wcs = cq.poll()
            if n:
                got[wcs[0].wr_id] = wcs[0].status
    if got != {1: e.IBV_WC_SUCCESS, 2: e.IBV_WC_SUCCESS}:
        print(f'FAIL cq_channel_two_cqs: completions {got}')
        return 1
    for expected, name in ((recv_cq, 'receive'), (send_cq, 'send')):
        try:
            channel.get_cq_event(expected)
        except Exception as error:
            print(f'FAIL cq_channel_two_cqs: the channel did not hand out the {name} CQ\'s event next: {error}')
            return 1
        expected.ack_events(1)
        print(f'event: the {name} CQ')
    if dst.read(8, 0) != b'in order':
        print(f'FAIL cq_channel_two_cqs: received {dst.read(8, 0)!r}')
        return 1
    signal.alarm(0)
    print('OK cq_channel_two_cqs')
    return 0


if __name__ == '__main__':
    sys.exit(main())
