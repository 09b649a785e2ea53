"""lessons.explain: each mistake the lessons make on purpose (lesson 02's failures table, 04's RNR and a
wrong destination QP) is explained with its rule and numbers: on soft0 from the NIC's own checks
("checked"), on a real device from the status and the WR ("inferred"). On random requests, soft0 explains
every failure from the verdict of its own checks that gave that status."""
import random

import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.verbs import rc

e = v.enums
SOFT = v.PROVIDER == "soft"




def explained(ctx_pd, b_access=None, **wrong):
    ctx, pd = ctx_pd
    with lessons.Pair(ctx, pd, b_access=b_access) as pair:
        wc = lessons.one_sided(pair, e.IBV_WR_RDMA_WRITE, length=8, **wrong)
        x = lessons.explain(wc, pair.posted, pair.a)
        return wc.status, " ".join(str(x).split()), pair.b_mr.length   # (its lines joined: wrapped at 96)


def test_a_completion_that_succeeded_needs_no_explanation(ctx_pd):
    status, said, _ = explained(ctx_pd)
    assert status == 0 and "nothing went wrong" in said


def test_a_wrong_rkey_is_named_with_the_keys_there_are(ctx_pd):
    status, said, _ = explained(ctx_pd, rkey=0x1234)
    assert status == e.IBV_WC_REM_ACCESS_ERR and "0x1234" in said and "mlx5" in said
    if SOFT:
        assert "names no MR or memory window" in said and "(checked by soft0's NIC)" in said
    else:
        assert "(inferred from the status and the work request)" in said


def test_a_target_mr_without_remote_write_is_said_to_give_peers_no_access(ctx_pd):
    status, said, _ = explained(ctx_pd, b_access=e.IBV_ACCESS_LOCAL_WRITE)
    assert status == e.IBV_WC_REM_ACCESS_ERR
    assert ("gives peers no access" in said) if SOFT else ("REMOTE_WRITE" in said)


def test_a_write_past_the_end_says_by_how_many_bytes(ctx_pd):
    status, said, length = explained(ctx_pd, remote_offset=4092)
    assert status == e.IBV_WC_REM_ACCESS_ERR
    if SOFT:
        assert "runs 4 bytes past the end" in said and f"+{length})" in said


def test_a_wrong_lkey_is_named_and_the_devices_differ(ctx_pd):
    status, said, _ = explained(ctx_pd, lkey=0x1234)
    assert status in (e.IBV_WC_LOC_QP_OP_ERR, e.IBV_WC_LOC_PROT_ERR) and "mlx5" in said
    if SOFT:
        assert "lkey 0x1234 is no MR of this process" in said


def test_a_send_that_finds_no_receive_names_the_target_qp_and_rnr_retry(ctx_pd):
    ctx, pd = ctx_pd
    with lessons.Pair(ctx, pd, rnr_retry=0) as pair:
        send = v.wr.SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(pair.a_mr.buf, 8, pair.a_mr.lkey)])
        pair.a.post_send(send)
        wc = rc.wait_for_completion(pair.cq_a)
        said = " ".join(str(lessons.explain(wc, send, pair.a)).split())
        assert wc.status == e.IBV_WC_RNR_RETRY_EXC_ERR
        assert (f"QP {pair.b.qp_num:#x}" in said and "rnr_retry (0)" in said) if SOFT else "receive" in said


@pytest.mark.skipif(not SOFT, reason="a wrong destination QP waits for retry_cnt timeouts on a real device; "
                                     "soft0 names the QP that is not there")
def test_a_wrong_destination_qp_is_said_not_to_exist(ctx_pd):
    ctx, pd = ctx_pd
    with v.cq.CQ(ctx, 4) as cq, v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE) as mr, \
            v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4))) as qp:
        mine = rc.endpoint(ctx, qp)
        rc.connect(ctx, qp, mine, dict(mine, qp_num=0x1092), retry_cnt=0)
        w = v.wr.SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[v.wr.SGE(mr.buf, 8, mr.lkey)])
        qp.post_send(w)
        wc = rc.wait_for_completion(cq, timeout=30)
        assert wc.status == e.IBV_WC_RETRY_EXC_ERR
        said = " ".join(str(lessons.explain(wc, None, qp)).split())
        assert "no QP numbered 0x1092 exists" in said and "(checked by soft0's NIC)" in said


@pytest.mark.skipif(not SOFT, reason="soft0's checks are read after the fact; a real NIC's cannot be")
def test_on_random_requests_every_failure_is_explained_by_the_check_that_gave_its_status(ctx_pd):
    """explain runs the checks the NIC ran (rdmalab.verbs.soft.checks), after the fact: for random WRITEs and
    READs (wrong keys, offsets in and out of the MR, MRs and QPs without the access asked for, lengths 0
    to 4096), each failed completion is explained from a verdict of those checks with its status (not
    inferred), and the sentence names the rule that verdict gave."""
    from rdmalab.verbs import emulated
    ctx, pd = ctx_pd
    chosen, statuses = random.Random(7), set()
    accesses = [None, None, e.IBV_ACCESS_LOCAL_WRITE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ]
    for n in range(80):
        with lessons.Pair(ctx, pd, b_access=chosen.choice(accesses)) as pair:
            opcode = chosen.choice([e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ])
            wc = lessons.one_sided(pair, opcode, length=chosen.choice([0, 8, 64, 4096]),
                                   rkey=chosen.choice([None, None, None, 0x1234, 0]),
                                   remote_offset=chosen.choice([0, 8, 4092, 4096, -8]),
                                   lkey=chosen.choice([None] * 6 + [0x4242]))
            statuses.add(wc.status)
            if wc.status == e.IBV_WC_SUCCESS:
                continue
            x = lessons.explain(wc, pair.posted, pair.a)
            posted = pair.posted
            verdict = next(found for _, found in emulated.verdicts(pair.a, posted.opcode, posted.sges, posted.rkey,
                                                                   posted.remote_addr)
                           if found is not None and found.status == wc.status)
            assert x.checked, (n, wc.status, str(x))
            if verdict.check == "rkey" and verdict.figures["rule"] in ("before the start", "past the end"):
                assert f"runs {verdict.figures['by']} bytes {verdict.figures['rule']}" in " ".join(x.said.split())
    assert {e.IBV_WC_SUCCESS, e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_LOC_QP_OP_ERR} <= statuses, statuses

