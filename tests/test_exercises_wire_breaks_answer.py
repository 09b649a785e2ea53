"""The second challenges of on-the-wire, when-it-breaks and the-answer, and the-answer's claims without the
verdict (issue 47): each check accepts its reference, calls the skeleton "not yet", and rejects each plausible
mistake with a message that names it."""
import itertools

import pytest

from rdmalab import verbs as v
from rdmalab.lessons import exercises
from rdmalab.lessons.question import ANSWER, CHOICES, WHY

e = v.enums


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


# ---- on-the-wire.link-bytes ----

def test_the_header_sizes_are_those_of_the_captured_packets():
    from rdmalab.lessons import packets
    from rdmalab.lessons.checks.on_the_wire import AETH, FRAME, RETH
    ip_udp_bth_icrc = FRAME["IPv4 header"] + FRAME["UDP header"] + FRAME["BTH"] + FRAME["ICRC"]
    rxe = packets.capture()   # Linux's Soft-RoCE: a WRITE of 10 KiB at MTU 1024, then its ACK
    assert [c.length for c in rxe[:3]] == [ip_udp_bth_icrc + RETH + 1024] + [ip_udp_bth_icrc + 1024] * 2
    assert rxe[10].packet.info.name == "RC Acknowledge" and rxe[10].length == ip_udp_bth_icrc + AETH
    # a frame: preamble and SFD 8, Ethernet 14, ..., FCS 4, gap 12 (IEEE 802.3); an ACK is above Ethernet's
    # 64-byte minimum frame (header to FCS), so no padding applies to any packet the check counts
    assert FRAME["preamble and SFD"] + FRAME["inter-frame gap"] == packets.ETHERNET_PREAMBLE_AND_GAP
    assert FRAME["Ethernet header"] + rxe[10].length + FRAME["FCS"] >= 64


def test_link_bytes_reference_matches_the_capture_and_passes():
    from rdmalab.lessons.checks.on_the_wire import captured_link_bytes
    reference = exercises.REGISTRY["on-the-wire.link-bytes"].reference()
    assert feedback("on-the-wire.link-bytes", reference).passed
    assert reference(10240, 1024) == captured_link_bytes(10240, 1024) == (10 * (1024 + 82) + 16, 86)
    assert exercises.solution_source("on-the-wire.link-bytes").startswith("def my_link_bytes(n, mtu):")


def test_link_bytes_skeleton_is_not_yet():
    def my_link_bytes(n, mtu):
        raise NotImplementedError
    f = feedback("on-the-wire.link-bytes", my_link_bytes)
    assert f.status == "not yet" and f.message == "no answer yet: write my_link_bytes(n, mtu)"
    assert feedback("on-the-wire.link-bytes", None).status == "not yet"


FRAME_BYTES = 8 + 14 + 20 + 8 + 12 + 4 + 4 + 12


def _count(n, mtu, frame=FRAME_BYTES, reth_each=False, split=True, ack=FRAME_BYTES + 4, packets=None):
    packets = packets(n, mtu) if packets else (max(1, -(-n // mtu)) if split else 1)
    return n + packets * frame + 16 * (packets if reth_each else 1), ack


@pytest.mark.parametrize("wrong, says", [
    (lambda n, mtu: _count(n, mtu, reth_each=True), "a RETH on every packet: only the first carries it"),
    (lambda n, mtu: _count(n, mtu, frame=FRAME_BYTES - 4, ack=FRAME_BYTES), "no ICRC (4 bytes a frame); or no FCS"),
    (lambda n, mtu: _count(n, mtu, frame=FRAME_BYTES - 8, ack=FRAME_BYTES - 4),
     "neither the ICRC nor the FCS"),
    (lambda n, mtu: _count(n, mtu, split=False), "one packet for the whole message: the payload is split at the path MTU"),
    (lambda n, mtu: _count(n, mtu, ack=0), "no ACK: the target's NIC answers the WRITE with one"),
    (lambda n, mtu: (_count(n, mtu)[0], None), "return two whole numbers"),
    (lambda n, mtu: _count(n, mtu, frame=FRAME_BYTES - 20, ack=FRAME_BYTES - 16), "no preamble or gap"),
    (lambda n, mtu: _count(n, mtu, ack=FRAME_BYTES), "an ACK without its AETH"),
    (lambda n, mtu: _count(n, mtu, packets=lambda n, mtu: max(1, n // mtu)), "the last, partial packet forgotten"),
    (lambda n, mtu: _count(n, mtu, packets=lambda n, mtu: -(-n // mtu)) if n else (0, FRAME_BYTES + 4),
     "no packet for a zero-length WRITE"),
    (lambda n, mtu: (_count(n, mtu)[0], (FRAME_BYTES + 4) * max(1, -(-n // mtu))), "an ACK for every packet"),
    (lambda n, mtu: _count(n, mtu, frame=FRAME_BYTES + 4, ack=FRAME_BYTES + 8), "no one slip accounts for it"),
    (lambda n, mtu: len(str(n)), "return two whole numbers"),
])
def test_link_bytes_names_each_slip(wrong, says):
    f = feedback("on-the-wire.link-bytes", wrong)
    assert f.status == "wrong" and says in f.message, f.message
    assert "RETH (16) rides on the first packet only" in f.hint


# ---- when-it-breaks.way-back ----

def _reset(pair, which=(0, 1)):
    for i in which:
        pair.qps[i].modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)


def _fresh(pair, tell_target=True):
    pair.sender.sq_psn = (pair.sender.sq_psn + 4096) % (1 << 24)
    if tell_target:
        pair.target.rq_psn = pair.sender.sq_psn
    pair.target.sq_psn = pair.sender.rq_psn = (pair.target.sq_psn + 4096) % (1 << 24)


def test_a_stuck_pair_is_in_err_on_every_device(ctx_pd):
    from rdmalab.lessons import failures
    with failures.Stuck(*ctx_pd) as pair:
        assert pair.states() == ("ERR", "ERR") and pair.refused == e.IBV_WC_REM_ACCESS_ERR
        assert all(status == e.IBV_WC_WR_FLUSH_ERR for status in pair.flushed)   # (both, as soon as the device flushes)


def test_way_back_reference_passes_and_the_skeleton_is_not_yet(ctx_pd):
    ex = exercises.REGISTRY["when-it-breaks.way-back"]
    assert feedback("when-it-breaks.way-back", ex.reference(), *ctx_pd).passed
    assert exercises.solution_source("when-it-breaks.way-back").startswith("def my_way_back(pair):")

    def skeleton(pair):
        raise NotImplementedError
    assert feedback("when-it-breaks.way-back", skeleton, *ctx_pd).status == "not yet"
    assert feedback("when-it-breaks.way-back", None, *ctx_pd).status == "not yet"
    f = feedback("when-it-breaks.way-back", lambda pair: None, *ctx_pd)
    assert f.status == "not yet" and "changed nothing" in f.message


def _no_reset(pair):
    _fresh(pair)
    pair.to_rts()
    pair.post_recv()


def _straight_to_rts(pair):
    for qp in pair.qps:
        qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)


def _only_the_sender(pair):
    _reset(pair, (0,))
    _fresh(pair)
    pair.to_rts()
    pair.post_recv()


def _reset_then_rts(pair):
    _reset(pair)
    for qp in pair.qps:
        qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)


def _receives_in_reset(pair):
    _reset(pair)
    _fresh(pair)
    pair.post_recv()
    pair.to_rts()


def _old_psns(pair):
    _reset(pair)
    pair.to_rts()
    pair.post_recv()


def _peer_not_told(pair):
    _reset(pair)
    _fresh(pair, tell_target=False)
    pair.to_rts()
    pair.post_recv()


def _no_receives(pair):
    _reset(pair)
    _fresh(pair)
    pair.to_rts()


def _reset_only(pair):
    _reset(pair)


def _receives_in_err(pair):
    pair.post_recv()   # (posted to a QP in ERR: flushed at once)
    _reset(pair)
    _fresh(pair)
    pair.to_rts()


@pytest.mark.parametrize("wrong, says", [
    (_no_reset, "both QPs are still in ERR and the device refused the next step"),
    (_no_reset, "from ERR a QP goes only to RESET"),
    (_straight_to_rts, "from ERR a QP goes only to RESET"),
    (_only_the_sender, "the target's QP is still in ERR"),
    (_reset_then_rts, "both QPs stopped in RESET"),
    (_receives_in_reset, "a receive was posted to the target's QP in RESET and refused"),
    (_old_psns, "the PSN the refused WRITE went out with"),
    (_peer_not_told, "but the target expects"),
    (_no_receives, "a SEND found no receive: RNR_RETRY_EXC_ERR (13)"),
    (_receives_in_err, "post them again"),
    (_reset_only, "both QPs are in RESET, not RTS"),
])
def test_way_back_names_each_mistake(ctx_pd, wrong, says):
    f = feedback("when-it-breaks.way-back", wrong, *ctx_pd)
    assert f.status == "wrong" and says in f.message, f.message


# ---- the-answer.this-machine ----

def _figures(kind="soft"):
    """Figures as answer.gather() makes them, by hand (only their public fields): what holds on every device
    for the answer, what describes this machine, and what holds but bears on another choice."""
    from rdmalab.lessons.answer import Figure, Figures
    local = {"ping-pong": 0, "step-wait": 1, "ddp-step": 1}
    if kind != "hardware":
        local["ring-busbw"] = 1
    if kind == "rxe":
        local["landing"] = ANSWER
    elsewhere = {"headers": 1, "go-back-n": 3, "retries": 3}
    lessons = {"stopped-target": "one-sided", "one-cpu-read": "target-cpu", "tcp-receiver": "socket-path",
               "write-target": "target-cpu", "tcp-copies": "socket-path", "receiver-cpu": "target-cpu",
               "landing": "in-pytorch", "first-packet": "on-the-wire", "access-refused": "when-it-breaks",
               "ping-pong": "target-cpu", "ring-busbw": "allreduce", "step-wait": "training-step",
               "ddp-step": "in-pytorch", "headers": "on-the-wire", "go-back-n": "on-the-wire",
               "retries": "when-it-breaks"}
    out = []
    for name, lesson in lessons.items():
        if name in local:
            out.append(Figure(name=name, lesson=lesson, text=f"{name}'s text", holds=False, bears_on=local[name],
                              why_not=f"WHY-NOT {name}"))
        else:
            out.append(Figure(name=name, lesson=lesson, text=f"{name}'s text", holds=True,
                              bears_on=elsewhere.get(name, ANSWER)))
    return Figures(out, [])


@pytest.mark.parametrize("kind", ["soft", "rxe", "hardware"])
def test_this_machine_reference_passes_on_every_device(kind):
    figures = _figures(kind)
    reference = exercises.REGISTRY["the-answer.this-machine"].reference(figures, kind)
    assert feedback("the-answer.this-machine", reference, figures, kind).passed, reference
    assert exercises.solution_source("the-answer.this-machine").startswith("def this_machine(figures, device):")


@pytest.mark.parametrize("kind", ["soft", "rxe", "hardware"])
def test_this_machine_reference_agrees_with_what_answer_gathers(kind):
    from rdmalab.lessons import answer
    from test_answer import EVERY   # (tests/ is on the path, as pytest runs them)
    kept = {**EVERY, "in-pytorch": {k: x for k, x in EVERY["in-pytorch"].items() if k != "landing_device"}}
    figures = answer.gather(kept, kind=kind)
    reference = exercises.REGISTRY["the-answer.this-machine"].reference(figures, kind)
    assert feedback("the-answer.this-machine", reference, figures, kind).passed, (kind, reference)


def test_this_machine_skeleton_and_no_figures_are_not_yet():
    from rdmalab.lessons.answer import Figures
    assert feedback("the-answer.this-machine", None, _figures(), "soft").status == "not yet"
    f = feedback("the-answer.this-machine", [], Figures([], []), "soft")
    assert f.status == "not yet" and "recorded no figures yet" in f.message


@pytest.mark.parametrize("wrong, says", [
    (["step-wait", "ddp-step", "ring-busbw"], "'ping-pong' describes this machine only: WHY-NOT ping-pong."),
    (["ping-pong", "step-wait", "ddp-step"], "'ring-busbw' describes this machine only: WHY-NOT ring-busbw."),
    (["ping-pong", "ring-busbw"], "(1 more misfiled)"),
    (["ping-pong", "ring-busbw", "step-wait", "ddp-step", "stopped-target"],
     "'stopped-target' would come out the same on any device: a stopped process runs no code"),
    (["ping-pong", "ring-busbw", "step-wait", "ddp-step", "headers"], "'headers' would come out the same on any "
                                                                     "device: a packet's headers are the protocol's"),
    (["ping-pong", "ring-busbw", "step-wait", "ddp-step", "landing"], "'landing' would come out the same"),
    ("ping-pong", "return a list of figures' names"),
    (["pingpong"], "'pingpong' is not one of your figures"),
])
def test_this_machine_names_each_misfiled_figure(wrong, says):
    f = feedback("the-answer.this-machine", wrong, _figures(), "soft")
    assert f.status == "wrong" and says in f.message, f.message


def test_this_machine_names_the_list_turned_inside_out():
    figures = _figures()
    f = feedback("the-answer.this-machine", [n for n, x in figures.items() if x.holds], figures, "soft")
    assert f.status == "wrong" and "you listed the figures that hold on any device" in f.message


def test_this_machine_on_hardware_keeps_the_rings():
    f = feedback("the-answer.this-machine", ["ping-pong", "step-wait", "ddp-step", "ring-busbw"],
                 _figures("hardware"), "hardware")
    assert f.status == "wrong" and "'ring-busbw' would come out the same on any device: your rings ran over the NIC" \
        in f.message


# ---- the-answer.claims: what is wrong with a claim, never the verdict ----

VERDICT_WORDS = ("not the answer", "Right.", "the answer's point", CHOICES[ANSWER])


def _says_no_verdict(message):
    return not any(word in message for word in VERDICT_WORDS) and not any(why[:40] in message for why in WHY)


def test_no_wrong_choice_passes_and_none_is_told_the_verdict():
    figures = _figures()
    holding = [n for n, f in figures.items() if f.holds]
    for choice in range(len(CHOICES)):
        for because in itertools.combinations(holding, 3):
            f = feedback("the-answer.claims", {"choice": choice, "because": list(because)}, figures)
            if choice != ANSWER:
                assert f.status == "wrong" and _says_no_verdict(f.message), (choice, because, f.message)
                assert any(repr(name) in f.message for name in because), f.message   # it names a figure
            else:
                assert _says_no_verdict(f.message) or f.passed, f.message
    hint = exercises.REGISTRY["the-answer.claims"].hints[0]
    assert _says_no_verdict(hint) and "who does the work" not in hint


@pytest.mark.parametrize("wrong, says", [
    ({"choice": 0, "because": ["stopped-target", "tcp-receiver", "first-packet"]},
     "'stopped-target' is about who does the work when bytes arrive (a CPU, a kernel, or neither), not a "
     "message's delay, so it does not argue for your claim."),
    ({"choice": 1, "because": ["headers", "tcp-receiver", "first-packet"]},
     "'headers' is about the bytes a link carries, as your claim is, but the wire carries the same bytes for "
     "TCP and RDMA"),
    ({"choice": 3, "because": ["go-back-n", "retries", "first-packet"]},
     "'go-back-n' is about delivery after a loss, as your claim is, but TCP retransmits too"),
    ({"choice": 3, "because": ["ping-pong", "retries", "first-packet"]},
     "'ping-pong' would not come out the same on every device: WHY-NOT ping-pong."),
    ({"choice": 4, "because": ["write-target", "tcp-receiver", "first-packet"]},
     "'write-target' is about who does the work when bytes arrive (a CPU, a kernel, or neither), not the API "
     "a program calls"),
    ({"choice": ANSWER, "because": ["stopped-target", "tcp-receiver", "go-back-n"]}, "TCP retransmits too"),
    ({"choice": ANSWER, "because": ["stopped-target", "tcp-receiver", "headers"]}, "the same bytes for TCP and RDMA"),
])
def test_a_wrong_claim_is_told_what_is_wrong_with_it(wrong, says):
    f = feedback("the-answer.claims", wrong, _figures())
    assert f.status == "wrong" and says in f.message and _says_no_verdict(f.message), f.message
