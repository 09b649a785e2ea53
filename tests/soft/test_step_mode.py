"""The glass-box view's step mode (lessons.nic_view(...).step, soft0's qp.walk) predicts what soft0's NIC
does with a WR before it is posted: on random WRITEs, READs and SENDs (lengths across several packets,
wrong and right keys, offsets inside and outside the target MR, a target QP that may not serve the
request, receives posted or not, an MR without LOCAL_WRITE for a READ's answer) the status the walk
predicts is the status the completion has once posted, and its stages stop where the NIC refused."""
import random

import pytest

from rdmalab import lessons
from rdmalab import verbs as v

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="the step mode predicts from soft0's own checks; "
                                                             "on a real NIC it lists the stages without verdicts")
e = v.enums
OPCODES = [e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ, e.IBV_WR_SEND]
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ




def random_case(chosen, pair, readonly_mr):
    opcode = chosen.choice(OPCODES)
    length = chosen.choice([0, 8, 1024, 1500, 3000, 4096, 5000])
    source = readonly_mr if opcode == e.IBV_WR_RDMA_READ and chosen.random() < 0.15 else pair.a_mr
    lkey = source.lkey if chosen.random() > 0.1 else 0x4242
    w = v.wr.SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[v.wr.SGE(source.buf, min(length, 4096), lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
    if opcode != e.IBV_WR_SEND:
        rkey = chosen.choice([pair.b_mr.rkey] * 4 + [0x1234, 0])
        w.set_wr_rdma(rkey, pair.b_mr.buf + chosen.choice([0, 0, 8, 2048, 4090, 4096, -8]))
    elif chosen.random() < 0.6:
        pair.b.post_recv(v.wr.RecvWR(wr_id=9, num_sge=1, sg=[v.wr.SGE(pair.b_mr.buf, 4096, pair.b_mr.lkey)]))
    if chosen.random() < 0.2:   # the target QP's access flags (RTS to RTS): without one the request needs
        a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTS)
        a.qp_access_flags = chosen.choice([e.IBV_ACCESS_LOCAL_WRITE, e.IBV_ACCESS_REMOTE_WRITE, REMOTE])
        pair.b.modify(a, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
    return w


@pytest.mark.parametrize("seed", range(4))
def test_the_walk_predicts_the_completion_soft0_gives(ctx_pd, seed):
    chosen, outcomes = random.Random(seed), set()
    readonly_mr = v.mr.MR(ctx_pd[1], 4096, e.IBV_ACCESS_REMOTE_READ)   # no LOCAL_WRITE: a READ may not land here
    try:
        for n in range(40):
            with lessons.Pair(*ctx_pd, rnr_retry=0) as pair:
                w = random_case(chosen, pair, readonly_mr)
                step = lessons.nic_view(pair.a, pair.b).step(w, pair.cq_a)
                wc = step.post(timeout=5)
                assert wc is not None, (seed, n, str(step))
                assert wc.status == step.predicted, (seed, n, wc.status, str(step))
                stopped = [stage for stage, _, passed in step.stages if passed is False]
                assert bool(stopped) == (wc.status != e.IBV_WC_SUCCESS), (seed, n, str(step))
                assert "as predicted" in step.outcome()
                outcomes.add(wc.status)
    finally:
        readonly_mr.close()
    assert len(outcomes) >= 3, outcomes   # (the cases reach several of the NIC's checks)


def test_a_qp_not_in_rts_is_refused_at_post_as_predicted(ctx_pd):
    qp = v.qp.QP(ctx_pd[1], v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=(cq := v.cq.CQ(ctx_pd[0], 4)), rcq=cq,
                                            cap=v.qp.QPCap(max_send_wr=4, max_recv_wr=4)))
    try:
        w = v.wr.SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(0, 0, 0)])
        step = lessons.nic_view(qp).step(w, cq)
        assert step.predicted == "EINVAL" and "the QP is in RESET" in str(step)
        assert step.post() is None and "as predicted" in step.outcome()
    finally:
        qp.close()
        cq.close()
