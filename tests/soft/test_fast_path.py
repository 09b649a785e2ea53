"""soft0's fast path (requester.Shortcut.carry, which repeats a request of a shape already carried out on
this connection) against the full path it short-cuts (requester.attempt, responder.respond), as the
packet codec's fast encoder is tested against the full one: random sequences of WRITEs, READs, SENDs,
WRITE_WITH_IMMs and atomics, with offsets and lengths inside and outside both MRs, a wrong rkey now and
then, receives of random sizes and a target MR deregistered part-way, each run twice: as soft0 runs, and
with the fast path off. The completions, both QPs' states and every byte of memory must be the same.
"""
import random

import pytest

from rdmalab import verbs as v

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="the fast path is soft0's: a real NIC has its own")

e = v.enums
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC)
OPCODES = [e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ, e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE_WITH_IMM,
           e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP]
SIZE = 4096


def run(seed, steps=150):
    """One random sequence; returns everything observable, in order. A pair whose QPs went to ERR is
    replaced by a new one (the MRs stay), so that the sequence goes on exercising both paths."""
    from rdmalab.verbs import rc
    from rdmalab.verbs.soft import counters
    copied_before = counters.copied_bytes
    chosen = random.Random(seed)
    seen = []
    ctx = v.device.Context(name=v.choose_route().device)
    pd = v.pd.PD(ctx)
    cqs = [v.cq.CQ(ctx, 1024), v.cq.CQ(ctx, 1024)]
    cap = v.qp.QPCap(max_send_wr=64, max_recv_wr=64)

    def connected_pair():
        qps = [v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for cq in cqs]
        ends = [rc.endpoint(ctx, qp) for qp in qps]
        rc.connect(ctx, qps[0], ends[0], ends[1], ACCESS, rnr_retry=0, retry_cnt=0)
        rc.connect(ctx, qps[1], ends[1], ends[0], ACCESS, rnr_retry=0, retry_cnt=0)
        return qps

    a, b = connected_pair()
    src, dst, spare = (v.mr.MR(pd, SIZE, ACCESS) for _ in range(3))
    src.write(bytes(chosen.randrange(256) for _ in range(SIZE)), SIZE)
    target = dst
    for step in range(steps):
        if step == steps * 4 // 5 and chosen.random() < 0.5:   # the target's memory goes away: its key no longer works
            target.close()
            target = None
        opcode = chosen.choice(OPCODES)
        if opcode in (e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE_WITH_IMM) and chosen.random() < 0.9:   # a receive for it
            length = chosen.choice([SIZE, SIZE, SIZE, 600, 8])   # sometimes too small
            b.post_recv(v.wr.RecvWR(wr_id=1000 + step, num_sge=1, sg=[v.wr.SGE(spare.buf, length, spare.lkey)]))
        atomic = opcode in (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP)
        # mostly the same few shapes, so that the fast path has routes to take; now and then out of bounds
        length = 8 if atomic else chosen.choice([8, 8, 64, 64, 64, 1500, chosen.randrange(0, 700)])
        local = chosen.choice([0, 0, 256, 256, SIZE - length, chosen.randrange(0, SIZE - length + 1), SIZE - length + 8])
        remote = chosen.choice([0, 0, 512, 512, SIZE - length, chosen.randrange(0, SIZE - length + 1), SIZE - 4])
        remote &= ~7 if atomic else ~0
        rkey = dst.rkey if chosen.random() > 0.03 else dst.rkey ^ 0x5a5a
        wr = v.wr.SendWR(wr_id=step, opcode=opcode, num_sge=1, sg=[v.wr.SGE(src.buf + local, length, src.lkey)],
                         imm_data=step if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM else 0)
        if atomic:
            wr.set_wr_atomic(rkey, dst.buf + remote, chosen.randrange(4), step)
        elif opcode != e.IBV_WR_SEND:
            wr.set_wr_rdma(rkey, dst.buf + remote)
        try:
            a.post_send(wr)
        except v.pyverbs_error.PyverbsRDMAError as refused:
            seen.append(("refused", step, refused.error_code))
            continue
        for cq in cqs:
            n, wcs = cq.poll(64)
            seen += [(w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data) for w in wcs]
        states = (a.query(e.IBV_QP_STATE)[0].qp_state, b.query(e.IBV_QP_STATE)[0].qp_state)
        seen.append(("states", *states))
        if e.IBV_QPS_ERR in states:
            for cq in cqs:   # the flushed receives
                seen += [(w.wr_id, w.status) for w in cq.poll(64)[1]]
            a.close(), b.close()
            a, b = connected_pair()
    seen.append(("memory", src.read(SIZE, 0), spare.read(SIZE, 0),
                 target.read(SIZE, 0) if target is not None else None))
    seen.append(("copied bytes", counters.copied_bytes - copied_before))   # both paths count the same copies
    for obj in (a, b, src, spare, *([target] if target is not None else []), *cqs, pd, ctx):
        obj.close()
    return seen


@pytest.mark.parametrize("seed", range(12))
def test_the_fast_path_does_what_the_full_path_does(seed, monkeypatch):
    from rdmalab.verbs.soft import requester
    fast = run(seed)
    taken = []
    real_carry = requester.Shortcut.carry

    def counted(route, *args):
        done = real_carry(route, *args)
        taken.append(done)
        return done
    monkeypatch.setattr(requester.Shortcut, "carry", counted)
    assert run(seed) == fast
    assert any(taken), "the sequence never took the fast path: it tests nothing"
    monkeypatch.setattr(requester.Shortcut, "remember", classmethod(lambda cls, *args: None))   # no shortcuts: the full path
    assert run(seed) == fast


def test_soft0_counts_each_copy_its_cpu_makes():
    """soft0's copied_bytes (what lesson 05 and the bench report as copies per byte) counts what its CPU
    copies for the NIC: a WRITE's, READ's or SEND's payload once; SGEs gathered into one message once more;
    inline data once more, at post time (into the WQE); an atomic's word and a refused request not at all."""
    from rdmalab.verbs import emulated, rc
    ctx = v.device.Context(name=v.choose_route().device)
    pd = v.pd.PD(ctx)
    cq = v.cq.CQ(ctx, 64)
    cap = v.qp.QPCap(max_send_wr=16, max_recv_wr=16, max_inline_data=64)
    qps = [v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(2)]
    ends = [rc.endpoint(ctx, qp) for qp in qps]
    for qp, mine, theirs in ((qps[0], ends[0], ends[1]), (qps[1], ends[1], ends[0])):
        rc.connect(ctx, qp, mine, theirs, ACCESS, rnr_retry=0, retry_cnt=0)
    src, dst = v.mr.MR(pd, SIZE, ACCESS), v.mr.MR(pd, SIZE, ACCESS)

    def copies(opcode, sges, flags=e.IBV_SEND_SIGNALED, rkey=None):
        before = emulated.copied_bytes()
        wr = v.wr.SendWR(opcode=opcode, num_sge=len(sges), sg=[v.wr.SGE(src.buf + o, n, src.lkey) for o, n in sges],
                         send_flags=flags)
        if opcode in (e.IBV_WR_ATOMIC_FETCH_AND_ADD,):
            wr.set_wr_atomic(dst.rkey, dst.buf, 1, 0)
        elif opcode != e.IBV_WR_SEND:
            wr.set_wr_rdma(rkey if rkey is not None else dst.rkey, dst.buf)
        qps[0].post_send(wr)
        n, wcs = cq.poll(4)
        assert n and wcs[0].status == (e.IBV_WC_SUCCESS if rkey is None else e.IBV_WC_REM_ACCESS_ERR)
        return emulated.copied_bytes() - before

    assert copies(e.IBV_WR_RDMA_WRITE, [(0, 1000)]) == 1000
    assert copies(e.IBV_WR_RDMA_WRITE, [(0, 1000)]) == 1000   # again: the fast path counts as the full one
    assert copies(e.IBV_WR_RDMA_WRITE, [(0, 600), (1000, 400)]) == 2000   # gathered, then copied
    assert copies(e.IBV_WR_RDMA_WRITE, [(0, 64)], e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE) == 128
    assert copies(e.IBV_WR_RDMA_READ, [(0, 1000)]) == 1000
    assert copies(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [(0, 8)]) == 0
    qps[1].post_recv(v.wr.RecvWR(num_sge=1, sg=[v.wr.SGE(dst.buf, SIZE, dst.lkey)]))
    assert copies(e.IBV_WR_SEND, [(0, 1000)]) == 1000
    assert copies(e.IBV_WR_RDMA_WRITE, [(0, 1000)], rkey=dst.rkey ^ 0x5a5a) == 0   # refused: nothing landed
    for obj in (*qps, src, dst, cq, pd, ctx):
        obj.close()
