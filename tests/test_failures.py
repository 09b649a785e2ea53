"""A connection broken on purpose (lessons.failures, the failures lesson), as rxe0 in the Soft-RoCE guest
showed each: the completion's status, both QPs' states, and the error counters that move (rxe's
hw_counters; soft0's own, named alike). The same test runs on rxe0 in the guest, which judges soft0.
Also the rules behind two of them, as rxe applies them: a WRITE's packets must fit the responder's path
MTU exactly, and a request ahead of the PSN expected is NAKed once, then dropped."""
import pytest

from rdmalab import verbs as v
from rdmalab.lessons import failures
from rdmalab.lessons.fixtures import state_of

e = v.enums
WATCHED = failures.ERROR_COUNTERS


def errors_moved(broken):
    """The error counters that moved (rxe's packet counters aside: soft0's shared-memory link has none)."""
    return {name: n for name, n in broken.moved.items() if name in WATCHED}


@pytest.mark.parametrize("kind, status, states, moved", [
    ("wrong address", 12, ("ERR", "RTS"), {"completer_retry_err": 2, "retry_exceeded_err": 1}),
    ("wrong PSN", 12, ("ERR", "RTS"), {"completer_retry_err": 2, "retry_exceeded_err": 1, "out_of_seq_request": 1}),
    ("MTU too large", 9, ("ERR", "ERR"), {}),
    ("no REMOTE_WRITE", 10, ("ERR", "ERR"), {}),
], ids=lambda x: x if isinstance(x, str) else None)
def test_each_failure_looks_as_it_does_on_rxe(ctx_pd, kind, status, states, moved):
    broken = failures.run(kind, *ctx_pd)
    assert (broken.status, broken.states, errors_moved(broken)) == (status, states, moved), broken


def test_a_send_without_a_receive_ends_when_its_rnr_retries_run_out(ctx_pd):
    """rxe does not restart its ACK timer on an RNR NAK (docs/emulated-nic.md): after a stall of the
    guest's CPU, a timeout can resend the SEND (completer_retry_err, one more RNR NAK sent) while it
    waits. Whatever the timing, the RNR NAKs taken are rnr_retry + 1 (each one taken spends a retry, the
    last ends the SEND), the ACK timer never spends all its retries, and the responder NAKs each SEND
    it receives. soft0 takes an RNR NAK as an answer and runs no ACK timer meanwhile: it gives the
    answer of an undisturbed rxe, always."""
    broken = failures.run("no receive", *ctx_pd)
    moved = errors_moved(broken)
    assert (broken.status, broken.states) == (e.IBV_WC_RNR_RETRY_EXC_ERR, ("ERR", "RTS")), broken
    assert moved.get("rcvd_rnr_err") == failures.RNR_RETRY + 1, moved
    assert moved.get("retry_rnr_exceeded_err") == 1, moved
    assert moved.get("send_rnr_err", 0) >= failures.RNR_RETRY + 1, moved
    assert "retry_exceeded_err" not in moved, moved
    assert moved.get("completer_retry_err", 0) <= failures.RETRY_CNT, moved   # its last would be RETRY_EXC_ERR
    assert set(moved) <= {"rcvd_rnr_err", "retry_rnr_exceeded_err", "send_rnr_err", "completer_retry_err"}, moved
    if v.PROVIDER == "soft":
        assert moved == {"rcvd_rnr_err": 3, "send_rnr_err": 3, "retry_rnr_exceeded_err": 1}, moved


def test_a_qp_in_err_flushes_what_follows_and_comes_back_through_reset(ctx_pd):
    broken = failures.run("flushed", *ctx_pd)
    assert broken.status == e.IBV_WC_REM_ACCESS_ERR and broken.states == ("ERR", "ERR")
    assert broken.later == [e.IBV_WC_WR_FLUSH_ERR] * 2 and broken.recovered == e.IBV_WC_SUCCESS


def write_between(ctx_pd, length, a_mtu=None, b_mtu=None, psn_offset=0):
    """a WRITEs `length` bytes into b, each with its own path MTU, b told a's PSN + psn_offset.
    Returns (status, states, whether b's memory changed, error counters moved)."""
    ctx, pd = ctx_pd
    a, b = failures._pair(ctx, pd)
    try:
        a_end, b_end = a.endpoint(mr=a.mr), b.endpoint(mr=b.mr)
        failures.connect(a, b_end, path_mtu=a_mtu)
        failures.connect(b, {**a_end, "psn": (a_end["psn"] + psn_offset) % (1 << 24)}, path_mtu=b_mtu)
        a.mr.write(b"A" * 4096, 4096)
        before = failures.port_counters()
        failures._post(a, b_end, e.IBV_WR_RDMA_WRITE, length=length)
        from rdmalab.verbs import rc
        status = rc.wait_for_completion(a.cq, timeout=20).status
        moved = {k: n for k, n in failures._moved(before, failures.port_counters()).items() if k in WATCHED}
        return status, (state_of(a.qp), state_of(b.qp)), b.mr.read(4, 0) == b"AAAA", moved
    finally:
        b.close()
        a.close()


@pytest.mark.parametrize("length, a_mtu, b_mtu, status", [
    (64, e.IBV_MTU_4096, e.IBV_MTU_1024, 0),      # one packet, smaller than either MTU
    (3000, e.IBV_MTU_4096, e.IBV_MTU_1024, 9),    # one packet of 3000 bytes: b takes at most 1024
    (4096, e.IBV_MTU_4096, e.IBV_MTU_1024, 9),
    (3000, e.IBV_MTU_2048, e.IBV_MTU_1024, 9),    # a first packet of 2048: b wants exactly 1024
    (3000, e.IBV_MTU_1024, e.IBV_MTU_4096, 9),    # a first packet of 1024: b wants all 3000 in one
    (1000, e.IBV_MTU_1024, e.IBV_MTU_4096, 0),
])
def test_a_write_must_fit_the_responders_path_mtu_packet_by_packet(ctx_pd, length, a_mtu, b_mtu, status):
    got, states, landed, _ = write_between(ctx_pd, length, a_mtu, b_mtu)
    assert (got, landed) == (status, status == 0)
    assert states == (("RTS", "RTS") if status == 0 else ("ERR", "ERR"))


def test_a_request_ahead_of_the_expected_psn_is_nakked_once_then_dropped(ctx_pd):
    status, states, landed, moved = write_between(ctx_pd, 64, psn_offset=-1000)
    assert (status, states, landed) == (12, ("ERR", "RTS"), False)
    assert moved == {"completer_retry_err": 2, "retry_exceeded_err": 1, "out_of_seq_request": 1}


def test_a_request_far_behind_the_expected_psn_is_a_duplicate_and_dropped(ctx_pd):
    """rxe0 gives a lone duplicate one of two answers, from run to run (docs/emulated-nic.md): it
    ACKs it again, and the WRITE completes with SUCCESS, or it answers nothing the requester takes,
    and the WRITE fails with RETRY_EXC_ERR after its retries. Either way the responder carries out
    nothing and counts the duplicate, and the requester's state follows from its completion. soft0
    gives the second answer, always (the test below holds it to that one)."""
    status, states, landed, moved = write_between(ctx_pd, 64, psn_offset=1000)
    assert not landed, "a duplicate request was carried out"
    assert moved.get("duplicate_request", 0) >= 1, moved
    assert "out_of_seq_request" not in moved, moved
    if status == e.IBV_WC_SUCCESS:      # acknowledged again
        assert states == ("RTS", "RTS") and "retry_exceeded_err" not in moved, (states, moved)
    else:                               # unanswered until its retries ran out
        assert status == e.IBV_WC_RETRY_EXC_ERR, status
        assert states == ("ERR", "RTS") and moved.get("retry_exceeded_err") == 1, (states, moved)


@pytest.mark.skipif(v.PROVIDER != "soft", reason="rxe0 varies between two answers (the test above takes both)")
def test_soft0_answers_a_lone_duplicate_as_rxe_does_when_it_answers_nothing(ctx_pd):
    status, states, landed, moved = write_between(ctx_pd, 64, psn_offset=1000)
    assert (status, states, landed) == (12, ("ERR", "RTS"), False)
    assert moved == {"completer_retry_err": 2, "retry_exceeded_err": 1, "duplicate_request": 3}
