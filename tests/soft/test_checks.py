"""soft0's one list of checks (rdmalab.verbs.soft.checks): what the NIC decides when it carries a request out
is what the same list says when it is run dry beforehand (the step mode and explain read it so). On random
WRITEs, READs, SENDs, WRITE_WITH_IMMs, SEND_WITH_INVs and atomics (wrong keys, offsets in and out of the
target MR, target QPs and MRs without the access asked for, receives missing or too small, lengths 0 to
5000), the first verdict of the dry run gives the status the completion then has, the target's receive
fails with the status the verdict names, and a refusal made before anything lands leaves the target's memory
as it was. And the order is rxe's: a request that breaks two rules is refused by the first in that order."""
import random

import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.verbs import emulated, rc

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="the checks are soft0's own: a real NIC's cannot "
                                                             "be run dry")
e = v.enums
OPCODES = [e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ, e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE_WITH_IMM,
           e.IBV_WR_SEND_WITH_INV, e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP]
ATOMICS = (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP)
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC


def random_case(chosen, pair):
    """A WR for pair.a, and the receive and access changes on pair.b it meets. Returns (wr, its fields)."""
    opcode = chosen.choice(OPCODES)
    length = 8 if opcode in ATOMICS else chosen.choice([0, 8, 1024, 1500, 4096])
    lkey = pair.a_mr.lkey if chosen.random() > 0.1 else 0x4242
    sges = [(pair.a_mr.buf + chosen.choice([0, 0, 8, 4090]) * (length < 4096), length, lkey)]
    w = v.wr.SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[v.wr.SGE(*sges[0])], send_flags=e.IBV_SEND_SIGNALED)
    rkey = chosen.choice([pair.b_mr.rkey] * 4 + [0x1234, 0])
    remote_addr = pair.b_mr.buf + chosen.choice([0, 0, 8, 2048, 4088, 4096, -8])
    imm = 0
    if opcode in ATOMICS:
        w.set_wr_atomic(rkey, remote_addr, 5, 0)
    elif opcode == e.IBV_WR_SEND_WITH_INV:
        imm = w.imm_data = chosen.choice([0x1234, pair.b_mr.rkey])   # (no window's: the invalidation fails)
    elif opcode != e.IBV_WR_SEND:
        w.set_wr_rdma(rkey, remote_addr)
    if opcode in (e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_INV, e.IBV_WR_RDMA_WRITE_WITH_IMM) and chosen.random() < 0.8:
        room = chosen.choice([4096, 4096, 600, 8])   # sometimes too small
        pair.b.post_recv(v.wr.RecvWR(wr_id=9, num_sge=1, sg=[v.wr.SGE(pair.b_mr.buf, room, pair.b_mr.lkey)]))
    if chosen.random() < 0.15:   # the target QP's access flags (RTS to RTS): without one the request needs
        a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTS)
        a.qp_access_flags = chosen.choice([e.IBV_ACCESS_LOCAL_WRITE, e.IBV_ACCESS_REMOTE_WRITE, REMOTE])
        pair.b.modify(a, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
    if opcode in (e.IBV_WR_SEND, e.IBV_WR_SEND_WITH_INV):
        rkey, remote_addr = 0, 0
    return w, (opcode, sges, rkey, remote_addr, imm, e.IBV_SEND_SIGNALED)


@pytest.mark.parametrize("seed", range(3))
def test_the_dry_run_gives_what_the_nic_then_does(ctx_pd, seed):
    chosen, seen = random.Random(seed), set()
    accesses = [None, None, None, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ]
    for n in range(60):
        with lessons.Pair(*ctx_pd, b_access=chosen.choice(accesses), rnr_retry=0) as pair:
            w, fields = random_case(chosen, pair)
            pair.b_mr.write(b"\xab" * 4096, 4096)
            name, first = next(((name, verdict) for name, verdict in emulated.verdicts(pair.a, *fields)
                                if verdict is not None), (None, None))
            pair.a.post_send(w)
            wc = rc.wait_for_completion(pair.cq_a)
            case = (seed, n, fields, first, wc.status)
            assert wc.status == (first.status if first is not None else e.IBV_WC_SUCCESS), case
            if first is not None and first.receive is not None:
                assert rc.wait_for_completion(pair.cq_b).status == first.receive, case
            if first is not None and not first.lands and name != "answer lands":   # (a READ's or atomic's answer
                assert pair.b_mr.read(4096, 0) == b"\xab" * 4096, case   # lands after the target did its part)
            seen.add(name or "none")
    assert {"none", "rkey", "receive posted", "local keys"} <= seen, seen   # the cases reached several checks


def test_a_request_that_breaks_two_rules_is_refused_by_the_first_in_rxes_order(ctx_pd):
    """rxe's responder checks the QP's access flags (CHK_OP_VALID) before the rkey (CHK_RKEY): a WRITE with a
    bad rkey to a QP that takes no WRITEs is an invalid request, not a remote access error."""
    with lessons.Pair(*ctx_pd) as pair:
        a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTS)
        a.qp_access_flags = e.IBV_ACCESS_REMOTE_READ
        pair.b.modify(a, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS)
        fields = (e.IBV_WR_RDMA_WRITE, [(pair.a_mr.buf, 8, pair.a_mr.lkey)], 0x1234, pair.b_mr.buf)
        found = [name for name, verdict in emulated.verdicts(pair.a, *fields) if verdict is not None]
        assert found == ["operation allowed", "rkey"]   # both broken, in this order
        wc = lessons.one_sided(pair, e.IBV_WR_RDMA_WRITE, rkey=0x1234)
        assert wc.status == e.IBV_WC_REM_INV_REQ_ERR   # the first decides


WINDOW_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_MW_BIND


@pytest.mark.parametrize("case, check", [
    ("bound already", "type 2 window free"), ("window of another PD", "type 2 window PD"),
    ("length 0", "type 2 window length"), ("outside the MR", "bounds"), ("MR without MW_BIND", "MR allows binding"),
    ("writable window on an MR without LOCAL_WRITE", "MR allows writes"), ("a stale window key", "window key")])
def test_each_rule_a_window_bind_breaks_is_named_by_its_check(ctx_pd, case, check):
    """checks.BIND, run as the NIC runs it on a BIND_MW WR (tests/conformance/test_windows.py has rxe0 judge the
    MW_BIND_ERR each of these completes with): the verdict names the rule, and only the first bind passes."""
    from rdmalab.verbs.soft import checks
    ctx, pd = ctx_pd
    other = v.pd.PD(ctx) if case == "window of another PD" else pd
    access = {"MR without MW_BIND": e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
              "writable window on an MR without LOCAL_WRITE": e.IBV_ACCESS_MW_BIND | e.IBV_ACCESS_REMOTE_READ}
    mr, mw = v.mr.MR(pd, 4096, access.get(case, WINDOW_ACCESS)), v.mr.MW(other, e.IBV_MW_TYPE_2)
    try:
        offset, length = {"length 0": (0, 0), "outside the MR": (4000, 512)}.get(case, (0, 512))
        info = v.mr.MWBindInfo(mr, mr.buf + offset, length, e.IBV_ACCESS_REMOTE_WRITE)
        bind = checks.Bind(mw, 0x11, pd, mw.rkey + (case == "a stale window key"), info)
        if case == "bound already":
            assert checks.first(checks.BIND, bind) is None
            mw._bind(0x11, mw.rkey + 1, info)   # (what the NIC then does)
            bind = bind._replace(mw_key=mw._nic_key)
        verdict = checks.first(checks.BIND, bind)
        assert (verdict.check, verdict.answer) == (check, e.IBV_WC_MW_BIND_ERR), verdict
    finally:
        mw.close()
        mr.close()
        if other is not pd:
            other.close()


def test_a_datagram_is_dropped_by_the_first_datagram_check_it_breaks(ctx_pd):
    """checks.DATAGRAM, as datagram.land runs it at the destination: another Q_Key, then no receive posted."""
    from rdmalab.verbs.soft import checks, responder
    ctx, pd = ctx_pd
    cq = v.cq.CQ(ctx, 4)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=v.qp.QPCap(max_recv_wr=2)))
    try:
        h = responder.LOCAL_QPS[qp.qp_num].header
        request = lambda qkey: checks.Request(e.IBV_WR_SEND, 8, rkey=qkey, h=h)   # noqa: E731
        assert checks.first(checks.DATAGRAM, request(0x11)).check == "datagram QP"   # in RESET
        a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT)
        a.qkey, a.pkey_index, a.port_num = 0x11, 0, 1
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        assert checks.first(checks.DATAGRAM, request(0x12)).check == "Q_Key"
        assert checks.first(checks.DATAGRAM, request(0x11)).check == "receive posted"
        mr = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        qp.post_recv(v.wr.RecvWR(wr_id=1, num_sge=1, sg=[v.wr.SGE(mr.buf, 4096, mr.lkey)]))
        assert checks.first(checks.DATAGRAM, request(0x11)) is None
        mr.close()
    finally:
        qp.close()
        cq.close()


def test_a_new_rule_is_a_check_and_its_effect_the_responder_carries_out_unasked(ctx_pd, monkeypatch):
    """A rule added to checks.RESPONDER with an Effect of its own (here: refuse WRITEs of more than 1000 bytes,
    counted) is refused with its status, counted and NAKed, the target QP in ERR and its memory untouched, with
    no change to the responder (which never asks which rule it carries out). (A rule on a request's own fields
    beyond its PSN and bounds must also be re-tested by requester.Shortcut, which repeats a shape that passed.)"""
    from rdmalab.verbs.soft import checks, counters
    def at_most_1000(r):
        if r.opcode == e.IBV_WR_RDMA_WRITE and r.length > 1000:
            return checks.Verdict("write size", e.IBV_WC_REM_INV_REQ_ERR, "WRITEs of at most 1000 bytes",
                                  {"length": r.length}, effect=checks.Effect("oversized_write"))
        return None
    monkeypatch.setattr(checks, "RESPONDER", checks.RESPONDER + (("write size", at_most_1000),))
    monkeypatch.setitem(counters._counts, "oversized_write", 0)   # (a real rule counts under one of rxe's names)
    with lessons.Pair(*ctx_pd) as pair:
        pair.b_mr.write(b"." * 4096, 4096)
        wc = lessons.one_sided(pair, e.IBV_WR_RDMA_WRITE, length=1001)
        assert wc.status == e.IBV_WC_REM_INV_REQ_ERR
        assert counters.read()["oversized_write"] == 1
        assert pair.b.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_ERR
        assert pair.b_mr.read(4096, 0) == b"." * 4096


def _arrival(position, kind="RDMA_WRITE", size=1024, length=None, message=None, psn=5, expected=5, state=None):
    """A packet as the udp link's responder meets it (checks.Arrival), reaching an RC QP in RTS."""
    from types import SimpleNamespace
    from rdmalab.verbs.soft import checks
    from rdmalab.verbs.soft.layout import Q_STATE
    h = [0] * (Q_STATE + 1)
    h[Q_STATE] = e.IBV_QPS_RTS if state is None else state
    if message is not None:
        message = SimpleNamespace(kind=message[0], size=message[1], received=message[2])
    return checks.Arrival(h, psn, expected, kind, position, size, length, message)


FIRST, MIDDLE, LAST, ONLY = 0, 1, 2, 3


@pytest.mark.parametrize("arrival, check, answer, counter", [
    (dict(position=ONLY, state=e.IBV_QPS_INIT), "QP state", "NO_ANSWER", "dropped_qp_not_ready"),
    (dict(position=ONLY, psn=5 + (1 << 16) + 1), "PSN", "NO_ANSWER", "dropped_out_of_window"),
    (dict(position=ONLY, psn=7), "PSN", "SEQUENCE_NAK", "out_of_seq_request"),
    (dict(position=ONLY, psn=(1 << 24) - 1, expected=2), "PSN", "ANSWER_AGAIN", "duplicate_request"),   # (wrapped)
    (dict(position=MIDDLE), "opcode sequence", "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=FIRST, message=("RDMA_WRITE", 1024, 1024)), "opcode sequence", "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=ONLY, kind="RDMA_READ", size=0, message=("SEND", 1024, 1024)), "opcode sequence",
     "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=LAST, kind="SEND", message=("RDMA_WRITE", 1024, 1024)), "opcode sequence",
     "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=MIDDLE, kind="SEND", size=512, message=("SEND", 1024, 1024)), "packet length", "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=LAST, kind="SEND", size=2048, message=("SEND", 1024, 1024)), "packet length", "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=LAST, size=100, length=3000, message=("RDMA_WRITE", 1024, 2048)), "packet length",
     "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=ONLY, size=100, length=64), "packet length", "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=FIRST, size=0, length=3000), "packet length", "IBV_WC_REM_INV_REQ_ERR", None),
    (dict(position=FIRST, size=1024, length=10), "packet length", "IBV_WC_REM_INV_REQ_ERR", None),   # (lands as
    (dict(position=MIDDLE, length=2048, message=("RDMA_WRITE", 1024, 1024)), "packet length",      # it comes:
     "IBV_WC_REM_INV_REQ_ERR", None),                                                                # never past)
])
def test_a_packet_is_judged_by_the_first_packet_check_it_breaks(arrival, check, answer, counter):
    """checks.PACKET, which the udp link's responder runs on every request packet (rxe's CHK_PSN, CHK_OP_SEQ,
    CHK_LENGTH): each packet that breaks a rule is named by its check, with the answer the responder gives and the
    counter rxe bumps (link/transport.Responder.refuse carries them out without asking which rule gave them)."""
    from rdmalab.verbs.soft import checks
    verdict = checks.first(checks.PACKET, _arrival(**arrival))
    assert verdict is not None and verdict.check == check, verdict
    assert verdict.answer == (getattr(checks, answer) if hasattr(checks, answer) else getattr(e, answer)), verdict
    assert verdict.effect.counter == counter


@pytest.mark.parametrize("arrival", [dict(position=ONLY, size=64, length=64), dict(position=FIRST, length=3000),
                                     dict(position=MIDDLE, message=("RDMA_WRITE", 1024, 1024), length=3000),
                                     dict(position=LAST, size=952, length=3000, message=("RDMA_WRITE", 1024, 2048)),
                                     dict(position=LAST, kind="SEND", size=10, message=("SEND", 1024, 1024)),
                                     dict(position=ONLY, kind="RDMA_READ", size=0)])
def test_a_packet_that_fits_its_message_passes_every_packet_check(arrival):
    from rdmalab.verbs.soft import checks
    assert checks.first(checks.PACKET, _arrival(**arrival)) is None


def test_a_packet_for_no_living_qp_is_dropped_first():
    from rdmalab.verbs.soft import checks
    verdict = checks.first(checks.PACKET, checks.Arrival(None, 7, 0, "SEND", MIDDLE, 5, None, None))
    assert (verdict.check, verdict.answer, verdict.effect.counter) == ("target QP", checks.NO_ANSWER, "dropped_unknown_qp")


def test_a_local_inv_of_a_key_no_window_holds_is_refused_by_its_list():
    """LOCAL_INV is our own NIC's work: checks.INVALIDATE refuses a key that is no valid type 2 window with
    LOC_QP_OP_ERR (requester.local_operation carries the verdict out, as rxe0 answers: tests/conformance)."""
    from rdmalab.verbs.soft import checks
    verdict = checks.first(checks.INVALIDATE, 0x1234)
    assert (verdict.check, verdict.answer, verdict.receive) == ("key to invalidate", e.IBV_WC_LOC_QP_OP_ERR, None)


@pytest.mark.parametrize("length, lost", [(1024, False), (1025, True)])
def test_a_datagram_longer_than_the_mtu_is_lost_by_its_senders_list(length, lost):
    """checks.SENDING_DATAGRAM: a UD message rides one packet (tests/conformance/test_datagrams.py: on rxe0 a longer
    one completes and is lost)."""
    from rdmalab.verbs.soft import checks
    verdict = checks.first(checks.SENDING_DATAGRAM, checks.Request(e.IBV_WR_SEND, length, mtu=1024))
    assert (verdict is not None) == lost
    assert not lost or (verdict.check, verdict.answer) == ("datagram size", checks.NO_ANSWER)
