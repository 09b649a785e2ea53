#!/usr/bin/env python3
"""Messages whose local SGEs go bad part-way, and a bad WR queued behind a SEND that waits for a receive.

Shape: rdma-core tests/test_qp.py and tests/utils.py bad-flow tests (a WR with a second SGE whose lkey
names nothing, `send_flags=IBV_SEND_SIGNALED`, poll_cq for the error); rc_pingpong's loopback pair of
RC QPs in one process (path MTU 1024). Enums: pyverbs <= 58.

What it does and asserts, as rxe0 (Linux 6.1) answers (issue 49, item 6; tests/fuzz's KNOWN):
- a WRITE, a WRITE_WITH_IMM and a SEND of 3 packets whose first 2048 bytes are readable and whose last
  1024 (or 512) name an unknown lkey: the requester sends the first two packets before it finds the
  bad SGE, so they land (the WRITEs' into memory, the SEND's into the receive it took); the WR fails with
  LOC_QP_OP_ERR (2), the requester's QP in ERR; the responder's QP stays in RTS and completes nothing
  (its receive never completes, even once another receive is posted); the WRITE_WITH_IMM's the same with no
  receive posted (its first packets are a plain WRITE's, which ask for none);
- a 3-packet WRITE_WITH_IMM whose rkey names nothing: REM_ACCESS_ERR at once, with or without a receive
  posted (its first packet is a plain WRITE's, refused before any receive is asked for); a receive posted
  is flushed (WR_FLUSH_ERR), not failed; both QPs in ERR;
- a 3-packet SEND bad in its third packet with no receive posted: nothing completes, both QPs in RTS; into
  a receive whose second SGE names nothing: REM_OP_ERR (11) for the SEND, LOC_QP_OP_ERR for the receive;
- a SEND with no receive posted, then a WRITE with an unknown lkey: nothing completes, not even after
  a receive is posted, and both QPs stay in RTS, as a third WRITE is posted; moved to ERR, the QP
  flushes all three (WR_FLUSH_ERR, 5);
- a SEND whose SGE names an unknown lkey (LOC_QP_OP_ERR, QP to ERR), then ten WRITEs posted: each is
  taken and flushed.
Prints "OK rc_local_error_later_packet".
"""
import sys
import time

import pyverbs.enums as e
import pyverbs.wr as pwr
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
UNKNOWN_LKEY = 0xABCD12
RTS, ERR = e.IBV_QPS_RTS, e.IBV_QPS_ERR


def connected_pair(ctx, pd, gid_index):
    """Two RC QPs in RTS, each with its own CQ, connected to each other."""
    cqs, qps = [CQ(ctx, 16), CQ(ctx, 16)], []
    for cq in cqs:
        attr = QPAttr()
        attr.qp_access_flags = ACCESS
        qps.append(QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(8, 8, 2, 2, 0)), attr))
    gid = ctx.query_gid(1, gid_index)
    for qp, other in ((qps[0], qps[1]), (qps[1], qps[0])):
        qa = QPAttr()
        qa.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=gid_index), is_global=1, port_num=1)
        qa.dest_qp_num, qa.path_mtu = other.qp_num, e.IBV_MTU_1024
        qa.max_rd_atomic = qa.max_dest_rd_atomic = 1
        qa.min_rnr_timer, qa.timeout, qa.retry_cnt, qa.rnr_retry = 12, 14, 7, 7
        qa.qp_access_flags = ACCESS
        qp.to_rts(qa)
    return qps, cqs


def completions(cq, want, seconds):
    """(wr_id, status) of what cq gives within `seconds` (at most `want`)."""
    got, deadline = [], time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        n, wcs = cq.poll()
        got += [(wc.wr_id, wc.status) for wc in wcs[:n]]
    return got


def states(*qps):
    return [qp.query(e.IBV_QP_STATE)[0].qp_state for qp in qps]


def signaled(wr_id, opcode, sges, target=None):
    wr = pwr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=len(sges), sg=sges, send_flags=e.IBV_SEND_SIGNALED)
    if target is not None:
        wr.set_wr_rdma(target.rkey, target.buf)
    return wr


def bad_in_third_packet(ctx, pd, gid_index, opcode, bad_bytes, receive=True):
    """What lands of a 3-packet message whose last SGE (bad_bytes) names an unknown lkey; FAIL text or None."""
    (a, b), (ca, cb) = connected_pair(ctx, pd, gid_index)
    src, dst = MR(pd, 2048, ACCESS), MR(pd, 4096, ACCESS)
    src.write(b'X' * 2048, 2048)
    dst.write(b'.' * 4096, 4096)
    if opcode != e.IBV_WR_RDMA_WRITE and receive:
        b.post_recv(pwr.RecvWR(wr_id=7, num_sge=1, sg=[pwr.SGE(dst.buf, 4096, dst.lkey)]))
    sges = [pwr.SGE(src.buf, 2048, src.lkey), pwr.SGE(src.buf, bad_bytes, UNKNOWN_LKEY)]
    a.post_send(signaled(1, opcode, sges, dst if opcode != e.IBV_WR_SEND else None))
    got = completions(ca, 1, 5)
    if got != [(1, e.IBV_WC_LOC_QP_OP_ERR)]:
        return f'requester completions {got}, not [(1, LOC_QP_OP_ERR)]'
    time.sleep(0.2)
    if states(a, b) != [ERR, RTS]:
        return f'QP states {states(a, b)}, not [ERR, RTS]'
    landed = dst.read(4096, 0)
    if landed != b'X' * 2048 + b'.' * 2048:
        return f'{landed.count(b"X")} bytes landed from offset {landed.find(b"X")}: not the first two packets'
    if opcode != e.IBV_WR_RDMA_WRITE:
        b.post_recv(pwr.RecvWR(wr_id=8, num_sge=1, sg=[pwr.SGE(dst.buf, 16, dst.lkey)]))
    if completions(cb, 2, 0.5):
        return 'the responder completed a receive'
    return None


def bad_behind_waiting_send(ctx, pd, gid_index):
    (a, b), (ca, cb) = connected_pair(ctx, pd, gid_index)
    src, dst = MR(pd, 64, ACCESS), MR(pd, 64, ACCESS)
    a.post_send(signaled(1, e.IBV_WR_SEND, [pwr.SGE(src.buf, 8, src.lkey)]))
    a.post_send(signaled(2, e.IBV_WR_RDMA_WRITE, [pwr.SGE(src.buf, 8, UNKNOWN_LKEY)], dst))
    if completions(ca, 2, 0.5) or completions(cb, 1, 0.2):
        return 'a completion before any receive was posted'
    b.post_recv(pwr.RecvWR(wr_id=7, num_sge=1, sg=[pwr.SGE(dst.buf, 64, dst.lkey)]))
    if completions(ca, 2, 0.5) or completions(cb, 1, 0.2):
        return 'a completion after the receive was posted: the stuck SEND went in'
    a.post_send(signaled(3, e.IBV_WR_RDMA_WRITE, [pwr.SGE(src.buf, 8, src.lkey)], dst))
    if completions(ca, 3, 0.5) or states(a, b) != [RTS, RTS]:
        return f'the third WRITE completed, or the QPs left RTS ({states(a, b)})'
    attr = QPAttr()
    attr.qp_state = ERR
    a.modify(attr, e.IBV_QP_STATE)
    got = completions(ca, 3, 2)
    if got != [(1, e.IBV_WC_WR_FLUSH_ERR), (2, e.IBV_WC_WR_FLUSH_ERR), (3, e.IBV_WC_WR_FLUSH_ERR)]:
        return f'after ERR: {got}, not all three WR_FLUSH_ERR'
    return None


def posted_after_local_error(ctx, pd, gid_index):
    (a, b), (ca, cb) = connected_pair(ctx, pd, gid_index)
    src, dst = MR(pd, 64, ACCESS), MR(pd, 64, ACCESS)
    b.post_recv(pwr.RecvWR(wr_id=7, num_sge=1, sg=[pwr.SGE(dst.buf, 64, dst.lkey)]))
    a.post_send(signaled(1, e.IBV_WR_SEND, [pwr.SGE(src.buf, 8, UNKNOWN_LKEY)]))
    if completions(ca, 1, 5) != [(1, e.IBV_WC_LOC_QP_OP_ERR)] or states(a)[0] != ERR:
        return 'the SEND with an unknown lkey did not fail with LOC_QP_OP_ERR, its QP in ERR'
    for wr_id in range(2, 12):
        a.post_send(signaled(wr_id, e.IBV_WR_RDMA_WRITE, [pwr.SGE(src.buf, 8, src.lkey)], dst))
    got = completions(ca, 10, 2)
    if got != [(n, e.IBV_WC_WR_FLUSH_ERR) for n in range(2, 12)]:
        return f'WRITEs posted in ERR: {got}, not each flushed'
    return None


def write_with_imm_bad_rkey(ctx, pd, gid_index, receive):
    """A 3-packet WRITE_WITH_IMM whose rkey names nothing: its first packet is a plain WRITE_FIRST."""
    (a, b), (ca, cb) = connected_pair(ctx, pd, gid_index)
    src, dst = MR(pd, 3072, ACCESS), MR(pd, 64, ACCESS)
    if receive:
        b.post_recv(pwr.RecvWR(wr_id=7, num_sge=1, sg=[pwr.SGE(dst.buf, 64, dst.lkey)]))
    wr = signaled(1, e.IBV_WR_RDMA_WRITE_WITH_IMM, [pwr.SGE(src.buf, 3072, src.lkey)])
    wr.set_wr_rdma(0xABCD12, dst.buf)
    a.post_send(wr)
    got = completions(ca, 1, 5)
    if got != [(1, e.IBV_WC_REM_ACCESS_ERR)]:
        return f'requester completions {got}, not [(1, REM_ACCESS_ERR)] (refused at once, no receive needed)'
    time.sleep(0.2)
    flushed = completions(cb, 1, 1)
    if flushed != ([(7, e.IBV_WC_WR_FLUSH_ERR)] if receive else []) or states(a, b) != [ERR, ERR]:
        return f'the receive completed {flushed} and the QPs are in {states(a, b)}: not flushed, both in ERR'
    return None


def send_without_receive_bad_later(ctx, pd, gid_index):
    """A 3-packet SEND whose third packet's SGE is bad, and no receive posted: the SEND waits, its queue stops."""
    (a, b), (ca, cb) = connected_pair(ctx, pd, gid_index)
    src = MR(pd, 2048, ACCESS)
    a.post_send(signaled(1, e.IBV_WR_SEND, [pwr.SGE(src.buf, 2048, src.lkey), pwr.SGE(src.buf, 1024, UNKNOWN_LKEY)]))
    if completions(ca, 1, 1) or states(a, b) != [RTS, RTS]:
        return f'a completion, or QPs that left RTS ({states(a, b)})'
    return None


def send_into_a_bad_receive(ctx, pd, gid_index):
    """A 3-packet SEND whose third packet's SGE is bad, into a receive whose second SGE names nothing."""
    (a, b), (ca, cb) = connected_pair(ctx, pd, gid_index)
    src, dst = MR(pd, 2048, ACCESS), MR(pd, 4096, ACCESS)
    b.post_recv(pwr.RecvWR(wr_id=7, num_sge=2, sg=[pwr.SGE(dst.buf, 1024, dst.lkey),
                                                   pwr.SGE(dst.buf + 1024, 3072, UNKNOWN_LKEY)]))
    a.post_send(signaled(1, e.IBV_WR_SEND, [pwr.SGE(src.buf, 2048, src.lkey), pwr.SGE(src.buf, 1024, UNKNOWN_LKEY)]))
    got = completions(ca, 1, 5), completions(cb, 1, 2)
    if got != ([(1, e.IBV_WC_REM_OP_ERR)], [(7, e.IBV_WC_LOC_QP_OP_ERR)]):
        return f'completions {got}: not REM_OP_ERR for the SEND and LOC_QP_OP_ERR for the receive'
    return None


def main():
    ctx = Context(name=get_device_list()[0].name.decode())
    gid_index = next(i for i in range(ctx.query_port(1).gid_tbl_len)
                     if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    pd = PD(ctx)
    cases = [(f'{name}, bad {bad} bytes', lambda op=op, bad=bad: bad_in_third_packet(ctx, pd, gid_index, op, bad))
             for name, op in (('WRITE', e.IBV_WR_RDMA_WRITE), ('WRITE_WITH_IMM', e.IBV_WR_RDMA_WRITE_WITH_IMM),
                              ('SEND', e.IBV_WR_SEND)) for bad in (1024, 512)]
    cases += [('WRITE_WITH_IMM, bad 1024 bytes, no receive posted', lambda: bad_in_third_packet(
        ctx, pd, gid_index, e.IBV_WR_RDMA_WRITE_WITH_IMM, 1024, receive=False))]
    cases += [(f'a 3-packet WRITE_WITH_IMM with a bad rkey, {n} receive posted',
               lambda receive=receive: write_with_imm_bad_rkey(ctx, pd, gid_index, receive))
              for n, receive in (('no', False), ('a', True))]
    cases += [('a SEND bad in its third packet, no receive posted', lambda: send_without_receive_bad_later(ctx, pd,
                                                                                                           gid_index)),
              ('a SEND bad in its third packet into a receive bad in its second SGE',
               lambda: send_into_a_bad_receive(ctx, pd, gid_index)),
              ('a bad WRITE behind a SEND waiting for a receive', lambda: bad_behind_waiting_send(ctx, pd, gid_index)),
              ('WRITEs posted after a local error', lambda: posted_after_local_error(ctx, pd, gid_index))]
    for name, case in cases:
        failed = case()
        if failed:
            print(f'FAIL rc_local_error_later_packet: {name}: {failed}')
            return 1
        print(f'{name}: as rxe answers')
    print('OK rc_local_error_later_packet')
    return 0


if __name__ == '__main__':
    sys.exit(main())
