#!/usr/bin/env python3
"""Extended CQ: CqInitAttrEx / CQEX and the start_poll / poll_next / end_poll batch API.

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v44.0 .. v58.0, "CQ" second snippet
(`attrs = CqInitAttrEx(cqe=num_cqe, wc_flags=wc_flags, comp_mask=comp_mask, flags=0)`,
`print(attrs)`, `cq_ex = CQEX(ctx, attrs)`, `print(cq_ex)`) and tests/utils.py poll_cq_ex
(PollCqAttr; start_poll() returns ENOENT (2) while empty; cqex.status / cqex.wr_id;
read_opcode() / read_byte_len(); poll_next(); end_poll()) and tests/test_cqex.py (a CQEX as the send
and receive CQ of ordinary QPs). Enums: pyverbs <= 58 (`import pyverbs.enums as e`). The docs'
IBV_WC_EX_WITH_CVLAN is left out: Soft-RoCE reports only the standard fields
(IBV_WC_STANDARD_FLAGS), so the flags here are BYTE_LEN | QP_NUM | SRC_QP | IMM.

What it does: creates a CQEX, uses it as both CQs of two RC QPs of one process, posts two receives
and two SENDs (16 and 24 bytes), then reads the four completions in one batch. Asserts: four
successful completions, the opcodes (2 x SEND, 2 x RECV), the receive byte lengths 16 and 24, and
read_qp_num() naming the receiving QP. Prints "OK cqex_poll".
"""
import errno
import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    wc_flags = e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_QP_NUM | e.IBV_WC_EX_WITH_SRC_QP | e.IBV_WC_EX_WITH_IMM
    attrs = CqInitAttrEx(cqe=16, wc_flags=wc_flags, comp_mask=0, flags=0)
    print(attrs)
    cq_ex = CQEX(ctx, attrs)
    print(cq_ex)

    pd = PD(ctx)
    qia = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq_ex, rcq=cq_ex, cap=QPCap(max_send_wr=4, max_recv_wr=4))
    qa, qb = QP(pd, qia, QPAttr()), QP(pd, qia, QPAttr())
    gid_index = next(i for i in range(ctx.query_port(1).gid_tbl_len)
                     if ctx.query_gid(1, i).gid.startswith('0000:0000:0000:0000:0000:ffff:'))
    for qp, peer in ((qa, qb), (qb, qa)):
        attr = QPAttr()
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = 1
        attr.max_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.ah_attr = AHAttr(port_num=1, is_global=1,
                              gr=GlobalRoute(dgid=ctx.query_gid(1, gid_index), sgid_index=gid_index))
        qp.to_rts(attr)

    mr = MR(pd, 128, e.IBV_ACCESS_LOCAL_WRITE)
    mr.write(b'x' * 40, 40)
    qb.post_recv(RecvWR(100, 1, [SGE(mr.buf + 64, 32, mr.lkey)]))
    qb.post_recv(RecvWR(101, 1, [SGE(mr.buf + 96, 32, mr.lkey)]))
    qa.post_send(SendWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 16, mr.lkey)]))
    qa.post_send(SendWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 16, 24, mr.lkey)]))

    seen = []
    poll_attr = PollCqAttr()
    deadline = time.perf_counter() + 10
    while len(seen) < 4 and time.perf_counter() < deadline:
        ret = cq_ex.start_poll(poll_attr)
        if ret == errno.ENOENT:
            continue
        while True:
            seen.append((cq_ex.wr_id, cq_ex.status, cq_ex.read_opcode(), cq_ex.read_byte_len(),
                         cq_ex.read_qp_num()))
            if cq_ex.poll_next() != 0:
                break
        cq_ex.end_poll()
    print('completions (wr_id, status, opcode, byte_len, qp_num):', seen)
    if len(seen) != 4 or any(status != e.IBV_WC_SUCCESS for _, status, _, _, _ in seen):
        print(f'FAIL cqex_poll: expected 4 successful completions, got {seen}')
        return 1
    recvs = sorted((w, b, q) for w, _, op, b, q in seen if op == e.IBV_WC_RECV)
    sends = [w for w, _, op, _, _ in seen if op == e.IBV_WC_SEND]
    if recvs != [(100, 16, qb.qp_num), (101, 24, qb.qp_num)] or sorted(sends) != [1, 2]:
        print(f'FAIL cqex_poll: receives {recvs}, sends {sends}')
        return 1
    print('OK cqex_poll')
    return 0


if __name__ == '__main__':
    sys.exit(main())
