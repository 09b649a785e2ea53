"""Every exercise's check accepts its reference solution and rejects the typical wrong answers."""
import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.lessons import exercises
from rdmalab.lessons.checks.lesson03 import _to_rts

e = v.enums


@pytest.fixture(scope="module")
def ctx():
    with v.device.Context(name=v.choose_route().device) as c:
        yield c


@pytest.fixture
def pd(ctx):
    with v.pd.PD(ctx) as p:
        yield p


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


def test_no_answer_yet_is_not_yet_with_a_hint():
    f = feedback("01.predict", None)
    assert f.status == "not yet" and "write()s it once" in f.hint
    assert "reference solution" in str(f)


def test_01_prediction():
    assert feedback("01.predict", exercises.REGISTRY["01.predict"].reference()).passed
    right = {"writes": 100, "reads_at_least": 100, "bytes_copied": 13_107_200}
    for wrong, says in [({**right, "writes": 200}, "the echo is the server's write"),
                        ({**right, "reads_at_least": 1}, "at least one read() (a 64 KiB message may arrive in pieces"),
                        ({**right, "bytes_copied": 6_553_600}, "count both ways"),
                        (42, "answer with a dict")]:
        f = feedback("01.predict", wrong)
        assert f.status == "wrong" and says in f.hint + f.message


def test_02_write_not_read(ctx, pd):
    ex = exercises.REGISTRY["02.write-not-read"]
    assert feedback("02.write-not-read", ex.reference(ctx, pd), ctx, pd).passed
    local_only = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    f = feedback("02.write-not-read", local_only, ctx, pd)
    assert f.status == "wrong" and "status 10" in f.message and "REMOTE_WRITE" in f.hint
    everything = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
    f = feedback("02.write-not-read", everything, ctx, pd)
    assert f.status == "wrong" and "could RDMA READ" in f.message
    small = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    assert "register at least 4096" in feedback("02.write-not-read", small, ctx, pd).message


def test_02_code_that_raises_gets_feedback_and_the_lesson_goes_on(ctx, pd, capsys):
    def remote_write_alone(ctx, pd):   # the kernel refuses REMOTE_WRITE without LOCAL_WRITE: errno 22
        return v.mr.MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)

    mr = exercises.attempt("02.write-not-read", remote_write_alone, ctx, pd)
    shown = capsys.readouterr().out
    assert "[wrong]" in shown and "raised PyverbsRDMAError" in shown and "errno 22" in shown
    assert mr.rkey != 0   # the reference solution's MR, so later cells work


def run_03(ctx, pd, bring_up):
    lab = lessons.QPLab(ctx, pd)
    try:
        bring_up(lab.qp, lab.local, lab.remote, lab.route)
        return feedback("03.to-rts", lab.qp, lab.qp, lab.local, lab.remote, lab.route, lab)
    finally:
        lab.close()


def test_03_reference_brings_the_qp_to_rts_and_a_send_arrives(ctx, pd):
    assert run_03(ctx, pd, _to_rts).passed


def test_03_stopping_at_rtr_is_named(ctx, pd):
    def only_to_rtr(qp, local, remote, route):
        _to_rts(qp, local, remote, route)
        qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        rc_to_rtr(qp, local, remote, route)

    f = run_03(ctx, pd, only_to_rtr)
    assert f.status == "wrong" and "in RTR" in f.message and "one more modify, to RTS" in f.hint


def rc_to_rtr(qp, local, remote, route):
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=route.port)
    a.pkey_index, a.qp_access_flags = 0, e.IBV_ACCESS_LOCAL_WRITE
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    r = v.qp.QPAttr(qp_state=e.IBV_QPS_RTR, port_num=route.port, path_mtu=route.path_mtu)
    r.ah_attr = v.addr.AHAttr(port_num=route.port, is_global=1, gr=v.addr.GlobalRoute(
        dgid=v.addr.GID(remote["gid"]), sgid_index=route.gid_index, hop_limit=64))
    r.dest_qp_num, r.rq_psn, r.max_dest_rd_atomic, r.min_rnr_timer = remote["qp_num"], remote["psn"], 1, 12
    qp.modify(r, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
              | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)


def test_03_a_wrong_psn_means_nobody_answers(ctx, pd):
    def wrong_psn(qp, local, remote, route):
        _to_rts(qp, {**local, "psn": (local["psn"] + 1) % (1 << 24)}, remote, route)

    f = run_03(ctx, pd, wrong_psn)
    assert f.status == "wrong" and "sq_psn is local['psn']" in f.hint
    assert "status 12" in f.message or "never completed" in f.message   # rxe may retry for longer than the check waits


def test_03_the_wrong_peer_is_named(ctx, pd):
    def wrong_peer(qp, local, remote, route):
        _to_rts(qp, local, {**remote, "qp_num": remote["qp_num"] ^ 1}, route)

    f = run_03(ctx, pd, wrong_peer)
    assert f.status == "wrong" and "not to the peer's" in f.message


@pytest.fixture
def mailbox(ctx, pd):
    from rdmalab.lessons.target import RemoteBuffer
    from rdmalab.verbs import rc
    cq = v.cq.CQ(ctx, 16)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(8, 2), sq_sig_all=0))
    local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    target = RemoteBuffer()
    mine = rc.endpoint(ctx, qp, local)
    rc.connect(ctx, qp, mine, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
    target.connect(mine)
    yield qp, cq, local, target
    target.close()
    for obj in (qp, local, cq):
        obj.close()


def test_04_mailbox(mailbox):
    qp, cq, local, target = mailbox
    message = b"ready"
    args = (len(message), qp, cq, local, target, message)
    ex = exercises.REGISTRY["04.mailbox"]
    assert feedback("04.mailbox", ex.reference(len(message)), *args).passed
    for wrong, says in [([(0, 8, 0), (8, 5, 8)], "does not set the flag"),
                        ([(8, 5, 8)], "does not set the flag"),
                        ([(0, 13, 0)], "no write before the flag"),
                        ([(16, 5, 8), (0, 8, 0)], "local and remote offsets must match"),
                        ("flag", "answer with a list")]:
        f = feedback("04.mailbox", wrong, *args)
        assert f.status == "wrong" and says in f.message, (wrong, f.message)
