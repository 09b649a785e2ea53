"""lessons.explain: each mistake the lessons make on purpose (lesson 02's failures table, 03's RNR and a
wrong destination QP) is explained with its rule and numbers: on soft0 from the NIC's own checks
("checked"), on a real device from the status and the WR ("inferred"). And soft0's reasons (responder.refusal)
agree with its checks (remote_region) on random requests, so an explanation never names a rule that did not
refuse."""
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
                                     "soft0 names the QP that is not there at once")
def test_a_wrong_destination_qp_is_said_not_to_exist():
    from rdmalab.lessons.explain import _no_answer
    assert "no QP numbered 0x1092 exists" in _no_answer(None, 4242)


@pytest.mark.skipif(not SOFT, reason="responder.refusal is soft0's; a real NIC's checks cannot be read")
def test_soft0s_reasons_agree_with_its_checks_on_random_requests(ctx_pd):
    from rdmalab.verbs.soft import responder
    from rdmalab.verbs.soft.layout import Q_NUM, Q_PD
    ctx, pd = ctx_pd
    chosen, refused = random.Random(7), 0
    with lessons.Pair(ctx, pd) as pair, v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ) as ro:
        peer = responder.peer_qp(pair.b.qp_num)
        other_pd = {Q_PD: peer.header[Q_PD] + 1, Q_NUM: pair.b.qp_num}
        for _ in range(2000):
            mr = chosen.choice([pair.b_mr, ro])
            key = chosen.choice([mr.rkey, mr.rkey, 0x1234])
            addr = mr.buf + chosen.randrange(-16, 4112)
            length = chosen.choice([0, 1, 8, 64, 4096])
            need = chosen.choice([e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_READ, e.IBV_ACCESS_REMOTE_ATOMIC])
            header = chosen.choice([peer.header, other_pd])
            seg = responder.mr_segment(key)
            allowed = responder.remote_region(seg, addr, length, header, need) is not None
            assert (responder.refusal(seg, addr, length, header, need) is None) == allowed
            refused += not allowed
    assert 500 < refused < 1900   # both outcomes were exercised
