"""The last lesson (the-answer): the figures it gathers from every lesson that records, its exercise, and its
closing view (rdmalab.lessons.answer); the quiz it judges, the NCCL protocol table, and the evidence and answers
saved by slug (an old file's lesson numbers read as the lessons they meant)."""
import importlib

import pytest

from rdmalab.allreduce.report import Report
from rdmalab.lessons import answer, evidence, exercises, nccl

quiz = importlib.import_module("rdmalab.lessons.quiz")   # the module: `lessons.quiz` is the widget function

FULL = {
    "socket-path": dict(tcp_reads_per_message=1.0, tcp_switches_per_message=1.0, tcp_copies_per_byte=2.0,
               tcp_receiver_cpu_share=0.9, tcp_lat_us=20.0, lat_size=8),
    "one-sided": dict(writes=1000, rdma_target_syscalls=0, rdma_target_switches=0, rdma_target_cpu_ms=0.02),
    "target-cpu": dict(write_lat_us=1.5, tcp_lat_us=25.0, lat_size=8, rdma_target_cpu_share=0.01,
                       tcp_receiver_cpu_share=0.95, bw_size=1 << 20),
    "allreduce": dict(ranks=4, sizes=[65536, 1 << 20], ring_rdma_s=[1e-4, 1e-3], ring_tcp_s=[3e-4, 4e-3],
               mpi_s=[2e-4, 2e-3], busbw_rdma=[0.98, 1.57], busbw_tcp=[0.33, 0.39], provider="soft"),
    "training-step": dict(step_ms={"rdma": 1.55, "tcp": 2.71, "mpi": 1.15}, device="soft0 (soft)",
                          waiting_share={"predicted": 0.3, "measured": 0.49}, hidden={"predicted": None, "measured": 0.5}),
    "in-pytorch": dict(landing_device="soft0 (soft)", landing={"rdma": 0.97, "tcp": 0.52},
                       ddp_ratio={"predicted": 1.0, "measured": 0.31}, ddp_device="soft0 (soft)"),
}
# What lesson 05 kept before it was split in two (the sixth edition): lesson 06's figures too, all under "one-sided"
OLD_ONE_SIDED = {**FULL["one-sided"], **FULL["target-cpu"]}
EVERY = {**FULL,
         "one-sided": {**FULL["one-sided"], "frozen_rdma_completed": 4, "frozen_rdma_posted": 4,
                       "frozen_tcp_stalled": True, "frozen_tcp_bytes": 3 << 20, "frozen_target_found": True,
                       "device_kind": "soft"},
         "target-cpu": {**FULL["target-cpu"], "one_cpu_read_us": 3.4, "one_cpu_request_us": 21.0,
                        "rdma_copies_per_byte": None, "device_kind": "soft"},
         "allreduce": {**FULL["allreduce"], "device": "soft0", "disturbed": ""},
         "on-the-wire": dict(write_length=10240, write_packets=10, reth_packets=1, reth_va=0x7f0000001000,
                             reth_rkey=0x1234, lossy_size=256 << 10, loss=0.02, resent=40, clean_ms=20.0,
                             lossy_ms=95.0, headers_share=0.0165),
         "when-it-breaks": {"failures": {
             "wrong PSN": dict(status=12, states=["ERR", "RTS"], ms=50.4, moved={"out_of_seq_request": 1}, refused=None),
             "no REMOTE_WRITE": dict(status=10, states=["ERR", "ERR"], ms=0.3, moved={}, refused=None)}}}


def report(times_us, sizes=(65536, 1 << 20), ranks=4):
    rows = [{"size": s, "count": s // 4, "type": "float32",
             **{p: {"time_us": t, "busbw": answer.busbw(s, t * 1e-6, ranks), "wrong": 0} for p in ("out", "in")}}
            for s, t in zip(sizes, times_us)]
    return Report({"ranks": ranks, "rows": rows})


def test_the_allreduce_lesson_records_exactly_the_agreed_keys_in_seconds_and_gbps():
    ring, tcp = report([100.0, 1000.0]), report([300.0, 4000.0])
    mpi = {"rows": [{"size": 65536, "time_us": 200.0, "busbw": 0.5},
                    {"size": 1 << 20, "time_us": 2000.0, "busbw": 0.8}]}
    got = answer.allreduce_figures(ring, tcp, mpi, "soft")
    assert set(got) == {"ranks", "sizes", "ring_rdma_s", "ring_tcp_s", "mpi_s", "busbw_rdma", "busbw_tcp", "provider",
                        "device", "disturbed"}
    assert got["disturbed"] == ""   # (no spread or waits recorded: nothing says it was)
    assert got["ring_rdma_s"] == pytest.approx([1e-4, 1e-3]) and got["mpi_s"] == pytest.approx([2e-4, 2e-3])
    assert got["busbw_tcp"] == pytest.approx([65536 / 300e-6 / 1e9 * 1.5, (1 << 20) / 4e-3 / 1e9 * 1.5])
    with pytest.raises(ValueError, match="same sizes"):
        answer.allreduce_figures(ring, report([300.0], sizes=(65536,)), mpi, "soft")


def test_record_allreduce_keeps_them_as_evidence_allreduce(tmp_path, monkeypatch):
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(evidence, "EVIDENCE_FILE", str(tmp_path / "evidence.json"))
    mpi = {"rows": [{"time_us": 200.0}, {"time_us": 2000.0}]}
    answer.record_allreduce(report([100.0, 1000.0]), report([300.0, 4000.0]), mpi)
    kept = evidence.recall("allreduce")
    assert kept["ranks"] == 4 and kept["sizes"] == [65536, 1 << 20] and kept["provider"] in ("soft", "pyverbs")


def test_busbw_is_nccl_tests_factor_whatever_the_algorithm():
    assert answer.busbw(1e9, 1.0, 2) == pytest.approx(1.0)          # n = 2: busbw = algbw
    assert answer.busbw(1e9, 1.0, 8) == pytest.approx(2 * 7 / 8)


def test_the_view_answers_with_the_learners_own_numbers():
    view = answer.closing_view(device="soft0", kept=FULL, answers={"welcome": quiz.ANSWER})
    text = str(view)
    assert [m for m, _ in view.missing] == ["on-the-wire", "when-it-breaks"] and "Lesson 01 has not" not in text
    assert "1.0 read() calls" in text and "1000 RDMA WRITEs made 0 syscalls" in text
    assert f"{1.57 / 0.39:.1f}x" in text                              # the busbw ratio at the largest size
    assert "ring AllReduce busbw at 1 MiB" in text and "(right)" in text
    html = view._repr_html_()
    assert "<table>" in html and "data:image/png;base64," in html and "your choice in lesson 00" in html


def test_the_evidence_that_holds_on_every_device_leads_the_view_and_alone_argues():
    view = answer.closing_view(kept=EVERY, answers={})
    first = view.rows[0]
    assert "stopped (SIGSTOP) target" in first[0] and first[1] == "stalled after 3.0 MiB" and first[2] == "4 of 4"
    assert view.rows[1][1:3] == (21.0, 3.4)
    holding = [r for r in view.rows if r[4]]
    assert view.rows[:len(holding)] == holding, "what holds on every device comes first"
    busbw = [r for r in view.rows if r[0].startswith("ring AllReduce busbw")]
    assert busbw and all(not r[4] and "one host: soft0's shared memory against TCP loopback" in r[0] for r in busbw)
    right = next(text for _, ok, text, _ in view.verdict if ok)
    assert "4 of 4 RDMA operations on its memory completed; a TCP sender to it stalled" in right
    assert "first-packet (13)" in right and "access-refused (14)" in right
    assert "busbw" not in right and "ping-pong" not in right, "what holds on this machine only argues nothing"
    assert "kept out of this verdict" in str(view)


def test_a_ping_pong_is_never_shown_without_what_it_measures():
    view = answer.closing_view(kept=EVERY, answers={})
    latency = next(text for i, (_, _, text, _) in enumerate(view.verdict) if i == 0)
    assert "1.5 us by RDMA WRITE and 25.0 us by TCP" in latency
    assert "half round trips between two processes" in latency and "scheduler" in latency
    assert "% of its" not in latency   # (nothing is worked out from it either)
    row = next(r for r in view.rows if "ping-pong" in r[0])
    assert "between two processes" in row[0] and not row[4]
    assert "You measured RDMA WRITE" not in str(view)


def test_copies_per_byte_are_counted_or_given_by_design_never_as_a_measurement():
    view = answer.closing_view(kept=EVERY, answers={})
    copies = next(r for r in view.rows if r[0].startswith("CPU copies per byte"))
    assert copies[1] == 2.0 and copies[2] == "not counted: see by design, below"   # TCP's counted; RDMA's not
    text = str(view)
    assert "By design: an RDMA WRITE's CPU copies per byte (measured only where counted" in text
    mine = [line for line in view.design if line[3]]
    assert len(mine) == 1 and mine[0][0] == "soft0, the emulated NIC (its shared-memory link): these numbers, from soft0"
    assert [c for _, c, _, _ in view.design] == [1, 2, 0]
    counted = {**EVERY, "target-cpu": {**EVERY["target-cpu"], "rdma_copies_per_byte": 1.0}}   # soft0 counted its own
    assert next(r for r in answer.rows(counted) if r[0].startswith("CPU copies"))[2] == 1.0
    mine = [line for line in answer.closing_view(kept=counted, answers={}).design if line[3]]
    assert mine[0][0].endswith("from soft0 (counted too: 1.00, in the table)")


def test_who_pays_rxes_copies_as_linux_6_1_charges_them():
    copies, who = answer.BY_DESIGN[("rxe", None)]
    assert copies == 2 and "post_send" in who and "process context" in who and "system time" in who
    assert "IRQ time" in who and "one host" in who
    assert "charged to no process" not in who


@pytest.mark.parametrize("device, kind", [("soft0", "soft"), ("rxe0", "rxe"), ("mlx5_0", "hardware"), (None, None)])
def test_the_view_names_the_device_the_numbers_came_from(device, kind):
    assert answer.kind_of(device) == kind
    kept = {**EVERY, "allreduce": {**EVERY["allreduce"], "device": device, "provider": "soft" if kind == "soft"
                                   else "pyverbs"}} if device else {}
    view = answer.closing_view(kept=kept, answers={})
    marked = [line for line in view.lines() if line.startswith("> ")]
    if kind is None:
        assert marked == []
    else:
        assert len(marked) == 1 and f"these numbers, from {device}" in marked[0]
        assert marked[0].endswith(f"({answer.BY_DESIGN[(kind, 'shm' if kind == 'soft' else None)][1]})")


def test_the_view_ends_by_challenging_its_answer():
    text = str(answer.closing_view(device="soft0", kept=FULL, answers={}))
    for name in ("devmem TCP", "GPUDirect-TCPX", "SRD"):
        assert name in text


def test_a_run_where_rdma_lost_is_said_so_not_counted_as_evidence_for_it():
    slow = {**FULL, "allreduce": {**FULL["allreduce"], "busbw_rdma": [0.98, 0.43], "busbw_tcp": [0.33, 2.07]}}
    text = str(answer.closing_view(device="soft0", kept=slow, answers={}))
    assert "moved only 0.2x TCP's busbw" in text and "quiet machine" in text
    assert "the same ring moved 0.2x" not in text


def test_a_disturbed_run_is_said_so_and_draws_no_conclusion():
    noisy = report([100.0, 1000.0])
    noisy.data["rows"][-1]["in"].update(spread=3.0, waited=0.25)
    mpi = {"rows": [{"time_us": 200.0}, {"time_us": 2000.0}]}
    got = answer.allreduce_figures(noisy, report([300.0, 4000.0]), mpi, "soft")
    assert got["disturbed"] == "over RDMA, its rounds differed by up to 3.0x and a rank waited for a CPU 25% of the time"
    kept = {**FULL, "allreduce": {**FULL["allreduce"], "disturbed": got["disturbed"]}}
    text = str(answer.closing_view(device="soft0", kept=kept, answers={}))
    assert "was disturbed at 1 MiB (over RDMA, its rounds differed" in text and "cannot say how RDMA and TCP" in text
    assert "the same ring moved" not in text and "busbw was" not in text


@pytest.mark.parametrize("device, holds", [("soft0 (soft)", True), ("mlx5_0 (pyverbs)", True), ("rxe0 (pyverbs)", False)])
def test_the_training_steps_figures_are_labelled_by_what_holds_on_any_device(device, holds):
    kept = {**FULL, "in-pytorch": {**FULL["in-pytorch"], "landing_device": device}}
    figures = answer.gather(kept)
    landing, step, ddp = figures["landing"], figures["step-wait"], figures["ddp-step"]
    assert "kept 97% of its speed by RDMA WRITE, 52% by TCP" in landing.text and landing.holds is holds
    assert ("softirq" in landing.why_not) is not holds
    assert not step.holds and "1.55 ms with the ring over RDMA, 2.71 over TCP" in step.text and "49%" in step.text
    assert not ddp.holds and "0.31 x the same step on Gloo" in ddp.text
    table = answer.rows(kept)
    [row] = [r for r in table if r[0].startswith("a rank's training speed")]
    assert row[1:] == (0.52, 0.97, answer.PYTORCH, holds)
    assert table.index(row) < [r[0] for r in table].index(next(r[0] for r in table if r[0].startswith("ping-pong")))
    assert table[-1][1:] == (2.71, 1.55, answer.TRAINING, False)


def test_missing_lessons_are_named_and_nothing_fails():
    view = answer.closing_view(device=None, kept={}, answers={})
    text = str(view)
    for lesson in ("01", "05", "06", "09", "10", "11", "13", "14"):   # the lessons that record, by today's numbers
        assert f"Lesson {lesson} has not recorded its figures yet" in text
    assert "have not answered lesson 00" in text
    assert answer.LESSONS["allreduce"] in view._repr_html_() and answer.LESSONS["target-cpu"] == "06 The target's CPU"
    partial = answer.closing_view(device="soft0", kept={"allreduce": FULL["allreduce"]}, answers={"welcome": 99})
    assert [m for m, _ in partial.missing] == ["socket-path", "one-sided", "target-cpu", "training-step", "in-pytorch",
                                               "on-the-wire", "when-it-breaks"]
    assert "have not answered" in str(partial)
    assert answer.gather({}).missing == partial.missing[:3] + [("allreduce", answer.LESSONS["allreduce"])] + \
        partial.missing[3:]


@pytest.mark.parametrize("chosen", [i for i in range(len(quiz.CHOICES)) if i != quiz.ANSWER])
def test_a_distractor_is_judged_wrong_and_explained(chosen):
    view = answer.closing_view(device="soft0", kept=FULL, answers={"welcome": chosen})
    assert f"you chose: {quiz.CHOICES[chosen]} (not the answer)" in str(view)
    mine = [v for v in view.verdict if v[3]]
    assert len(mine) == 1 and not mine[0][1] and mine[0][2].startswith(quiz.WHY[chosen])


# ---- the figures and the exercise ----

def test_every_lesson_that_records_gives_its_figures_each_named_and_sorted():
    figures = answer.gather(EVERY)
    assert list(figures) == list(answer.NAMES) and not figures.missing
    assert {f.lesson for f in figures.values()} == set(answer.RECORDING)
    assert {n for n, f in figures.items() if not f.holds} == {"ping-pong", "ring-busbw", "step-wait", "ddp-step"}
    assert {n for n, f in figures.items() if f.bears_on != quiz.ANSWER} == {"ping-pong", "ring-busbw", "step-wait",
                                                                          "ddp-step", "headers", "go-back-n", "retries"}
    assert "0x1234" in figures["first-packet"].text and "10 REM_ACCESS_ERR" in figures["access-refused"].text
    assert "one host: soft0's shared memory against TCP loopback" in figures["ring-busbw"].text
    html = figures._repr_html_()
    assert html.count("<tr>") == 1 + len(answer.NAMES) and "what you measured" in html
    rxe = answer.gather(EVERY, kind="rxe")["ring-busbw"]
    assert not rxe.holds and "rxe's loopback" in rxe.text


def feedback(answer_, figures):
    return exercises.check("the-answer.claims", answer_, figures)


def test_the_answers_exercise_accepts_its_reference_and_a_learners_own_choice_of_figures():
    figures = answer.gather(EVERY)
    reference = exercises.REGISTRY["the-answer.claims"].reference(figures)
    assert feedback(reference, figures).passed and len({figures[n].lesson for n in reference["because"]}) == 3
    mine = {"choice": quiz.ANSWER, "because": ["one-cpu-read", "tcp-copies", "access-refused"]}
    assert feedback(mine, figures).passed
    assert feedback(None, figures).status == "not yet"
    source = exercises.solution_source("the-answer.claims")
    assert source.startswith("def _my_answer(figures):") or source.startswith("def my_answer(figures):")


@pytest.mark.parametrize("wrong, says", [
    ({"choice": 2}, "a dict of two keys"),
    ({"choice": "kernel bypass", "because": []}, "write the index of one of the 5 choices"),
    ({"choice": 2, "because": "stopped-target"}, "a list of figures' names"),
    ({"choice": 2, "because": ["the frozen target", "tcp-receiver", "first-packet"]}, "is not a figure's name"),
    ({"choice": 2, "because": ["stopped-target", "stopped-target", "tcp-receiver"]}, "three different figures"),
    ({"choice": 0, "because": ["stopped-target", "tcp-receiver", "first-packet"]}, "not a message's delay"),
    ({"choice": 2, "because": ["stopped-target", "tcp-receiver", "ping-pong"]}, "measures the scheduler's wake-ups"),
    ({"choice": 2, "because": ["stopped-target", "tcp-receiver", "ring-busbw"]}, "soft0's shared memory against TCP"),
    ({"choice": 2, "because": ["stopped-target", "tcp-receiver", "go-back-n"]}, "TCP retransmits too"),
    ({"choice": 2, "because": ["stopped-target", "tcp-receiver", "headers"]}, "the same bytes for TCP and RDMA"),
])
def test_the_answers_exercise_names_each_wrong_claim_and_why(wrong, says):
    f = feedback(wrong, answer.gather(EVERY))
    assert f.status == "wrong" and says in f.message, f.message


def test_the_answers_exercise_wants_two_lessons_and_each_figure_names_the_lesson_that_measured_it():
    import dataclasses
    figures = answer.gather(EVERY)
    assert {n: f.lesson for n, f in figures.items() if f.lesson in ("one-sided", "target-cpu")} == {
        "stopped-target": "one-sided", "write-target": "one-sided",
        "one-cpu-read": "target-cpu", "receiver-cpu": "target-cpu", "ping-pong": "target-cpu"}
    assert feedback({"choice": 2, "because": ["stopped-target", "write-target", "one-cpu-read"]}, figures).passed
    figures["one-cpu-read"] = dataclasses.replace(figures["one-cpu-read"], lesson="one-sided")   # (as if one lesson)
    f = feedback({"choice": 2, "because": ["stopped-target", "one-cpu-read", "write-target"]}, figures)
    assert f.status == "wrong" and "all three come from lesson 05" in f.message, f.message
    lines = answer.gather(EVERY).lines()
    assert any(line.startswith("one-cpu-read    06") for line in lines)
    assert any(line.startswith("stopped-target  05") for line in lines)


def test_a_figure_the_learners_lessons_did_not_record_cannot_be_cited():
    figures = answer.gather(FULL)   # no lesson 13 or 14, no stopped target
    f = feedback({"choice": 2, "because": ["tcp-receiver", "write-target", "first-packet"]}, figures)
    assert f.status == "wrong" and "'first-packet': your lessons have not recorded it" in f.message


def test_the_view_shows_what_the_learner_committed_to_before_it():
    figures = answer.gather(EVERY)

    def my_answer(figures):
        return {"choice": 3, "because": ["go-back-n", "retries", "tcp-receiver"]}

    text = str(answer.closing_view(kept=EVERY, answers={"welcome": 0}, committed=my_answer))
    assert "In lesson 00 you chose: lower latency than TCP (not the answer)" in text
    assert f"Before this view you answered: {quiz.CHOICES[3]} (not the answer), because of go-back-n, retries" in text
    for broken in (lambda figures: None, lambda figures: 1 / 0, lambda figures: {"choice": 9}):
        said = str(answer.closing_view(kept=EVERY, answers={}, committed=broken))
        assert "Before this view" not in said and "You committed to no answer before this view" in said
    assert "committed to no answer" not in str(answer.closing_view(kept=EVERY, answers={}))   # (not asked)
    assert answer.committed_answer(my_answer, figures)["choice"] == 3


def test_the_quiz_offers_plausible_distractors_beside_the_answer():
    assert "kernel and CPU bypass" in quiz.CHOICES[quiz.ANSWER]       # the real-browser test clicks this text
    assert sum("kernel and CPU bypass" in c for c in quiz.CHOICES) == 1
    assert len(quiz.WHY) == len(quiz.CHOICES) and quiz.WHY[quiz.ANSWER].startswith("Right")
    for word in ("latency", "link bandwidth", "reliable", "socket"):
        assert any(word in c for i, c in enumerate(quiz.CHOICES) if i != quiz.ANSWER), word


def test_nccl_protocols_flag_per_data_as_ncclS_sources_say():
    f = nccl.protocol_figures(1 << 20)
    assert f["LL"]["data_share"] == 0.5 and f["LL"]["flags"] == (1 << 20) // 4 and f["LL"]["unit"] == 16
    assert f["LL128"]["data_share"] == pytest.approx(120 / 128) and f["LL128"]["unit"] == 128
    assert f["LL"]["data_share"] < f["LL128"]["data_share"] < f["Simple"]["data_share"] < 1
    assert "LL128" in str(nccl.protocols()) and str(nccl.steps()).splitlines()[1].split()[:3] == ["8", "14", "6"]


def test_an_answer_saved_under_other_wording_of_the_choices_is_not_read_back(tmp_path, monkeypatch):
    import json
    monkeypatch.setattr(quiz, "ANSWERS_FILE", str(tmp_path / "answers.json"))
    monkeypatch.setattr(quiz.classroom, "record_answer", lambda key, index: None)
    quiz.save_answer("welcome", quiz.ANSWER)
    assert quiz.load_answers() == {"welcome": quiz.ANSWER}
    (tmp_path / "answers.json").write_text(json.dumps({"00": 0}))   # the first edition's file: index 0 only
    assert quiz.load_answers() == {}
    monkeypatch.setattr(quiz, "CHOICES", ["reworded"] + quiz.CHOICES[1:])
    quiz.save_answer("welcome", 1)
    assert quiz.load_answers() == {"welcome": 1}
    monkeypatch.setattr(quiz, "CHOICES", ["reworded", "and this one too"] + quiz.CHOICES[2:])
    assert quiz.load_answers() == {}


def test_what_the_first_edition_saved_under_lesson_numbers_reads_as_the_lessons_it_meant(tmp_path, monkeypatch):
    """Before lesson 05 was split, evidence and answers were keyed "01", "04", "05" (AllReduce then) and "00".
    They read as socket-path, one-sided, allreduce and welcome: never as the lessons those numbers name today
    (04 two-sided, 05 one-sided)."""
    import json
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(evidence, "EVIDENCE_FILE", str(tmp_path / "evidence.json"))
    monkeypatch.setattr(quiz, "ANSWERS_FILE", str(tmp_path / "answers.json"))
    old = {"01": FULL["socket-path"], "04": OLD_ONE_SIDED, "05": FULL["allreduce"]}
    (tmp_path / "evidence.json").write_text(json.dumps(old))
    assert evidence.recall() == {"socket-path": FULL["socket-path"], "one-sided": FULL["one-sided"],
                                 "target-cpu": FULL["target-cpu"], "allreduce": FULL["allreduce"]}   # (split: below)
    assert evidence.recall("posting") == {}
    assert [m for m, _ in answer.closing_view(device="soft0", kept=None, answers={}).missing] == \
        ["training-step", "in-pytorch", "on-the-wire", "when-it-breaks"]   # (the first edition had no such lessons)
    evidence.record("allreduce", ranks=2)          # a new run: its slug wins, and the file is rewritten by slug
    assert evidence.recall("allreduce")["ranks"] == 2 and evidence.recall("one-sided") == FULL["one-sided"]
    assert set(json.loads((tmp_path / "evidence.json").read_text())) == {"socket-path", "one-sided", "target-cpu",
                                                                          "allreduce"}
    (tmp_path / "answers.json").write_text(json.dumps({"00": 1, "00:choice": quiz.CHOICES[1]}))
    assert quiz.load_answers() == {"welcome": 1}


def test_a_writes_counted_copies_are_its_devices_not_every_devices():
    """soft0 counts the copy its initiator's CPU makes for a WRITE (1.00 a byte): a figure of that device, filed with
    this machine's, never under what holds on any device (issue 47); TCP's count alone holds everywhere."""
    counted = {**FULL, "target-cpu": {**FULL["target-cpu"], "rdma_copies_per_byte": 1.0}}
    [row] = [r for r in answer.rows(counted) if r[0].startswith("CPU copies per byte")]
    assert row[2] == 1.0 and row[-1] is False
    [row] = [r for r in answer.rows(FULL) if r[0].startswith("CPU copies per byte")]
    assert row[-1] is True


def test_the_closing_view_shows_the_learners_predictions_beside_their_measurements():
    predicted = {"training-step": {"the AllReduce's share of an RDMA step": {"predicted": 0.3, "measured": 0.49}},
                 "socket-path": {"syscalls per message": {"predicted": None, "measured": 2.0}}}
    view = answer.closing_view(device="soft0", kept=FULL, answers={}, predicted=predicted)
    text = str(view)
    assert "Your predictions, beside what you then measured:" in text
    first, second = text.index("01 syscalls per message: you predicted nothing written, measured 2"), \
        text.index("10 the AllReduce's share of an RDMA step: you predicted 0.3, measured 0.49")
    assert first < second   # the series' order, not the order they were made
    html = view._repr_html_()
    assert "<b>Your predictions, beside what you then measured</b>" in html and "<td>0.49</td>" in html
    assert "Your predictions" not in str(answer.closing_view(device="soft0", kept=FULL, answers={}, predicted={}))


# ---- the one-sided lesson split in two: 05 and 06 record their own figures; what was saved before reads as both ----

def test_evidence_saved_before_the_split_reads_as_the_two_lessons_that_measure_it_today(tmp_path, monkeypatch):
    """Until today lesson 05 (one-sided) kept the one-CPU READ and the dashboard's figures too, under "one-sided":
    they are read as lesson 06's (target-cpu), so nothing is missing and nothing is attributed to the wrong
    lesson; a record of 06's own wins over them, and 05's own figures stay 05's."""
    import json
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(evidence, "EVIDENCE_FILE", str(tmp_path / "evidence.json"))
    before = {**EVERY, "one-sided": {**EVERY["one-sided"], **EVERY["target-cpu"]}}
    del before["target-cpu"]
    (tmp_path / "evidence.json").write_text(json.dumps(before))
    kept = evidence.recall()
    assert kept["target-cpu"] == {k: x for k, x in EVERY["target-cpu"].items()} and kept["one-sided"] == EVERY["one-sided"]
    view = answer.closing_view(kept=None, answers={})
    assert not view.missing and str(view) == str(answer.closing_view(kept=EVERY, answers={}))
    figures = answer.gather()
    assert figures["one-cpu-read"].lesson == "target-cpu" and figures["stopped-target"].lesson == "one-sided"
    assert answer.rows(evidence.recall()) == answer.rows(EVERY)
    answer.record_target_cpu(dashboard_results(write_lat=9.0))   # lesson 06 run today: its own figures win
    mine = answer.gather()
    assert "9.0 us by RDMA WRITE" in mine["ping-pong"].text and "one-cpu-read" not in mine   # (not run with one_cpu)
    assert mine["stopped-target"].text == figures["stopped-target"].text


def _row(size, t=None, bw=None, target_cpu=0.0, initiator_cpu=1e-3, copied=None):
    side = lambda cpu: {"cpu_s": cpu, "wall_s": 1.0, "read_syscalls": 0}   # noqa: E731
    return {"size": size, "iterations": 100, "t_typical": t, "bw_avg_mib": bw, "bytes_copied_by_cpu": copied,
            "initiator": side(initiator_cpu), "target": side(target_cpu)}


def dashboard_results(write_lat=1.5):
    from rdmalab import bench
    return {"write_lat": bench.Results("write_lat", "soft", "soft0", [_row(8, write_lat), _row(64, 3.0)]),
            "tcp_lat": bench.Results("tcp_lat", "tcp", "loopback", [_row(8, 25.0), _row(64, 26.0)]),
            "write_bw": bench.Results("write_bw", "soft", "soft0", [_row(1 << 20, bw=9000.0, copied=100 << 20)]),
            "tcp_bw": bench.Results("tcp_bw", "tcp", "loopback", [_row(1 << 20, bw=2000.0, target_cpu=0.9e-3)])}


def test_lessons_05_and_06_each_record_what_they_measured(tmp_path, monkeypatch):
    from rdmalab.lessons.freeze import FreezeResult
    from rdmalab.lessons.one_cpu import OneCpu
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(evidence, "EVIDENCE_FILE", str(tmp_path / "evidence.json"))
    spent = {"read_syscalls": 0, "write_syscalls": 0, "voluntary_switches": 1, "involuntary_switches": 0, "cpu_s": 2e-5}
    frozen = FreezeResult({"device": "soft0", "rdma_completed": 3, "rdma_posted": 3, "target_found_pattern": True,
                           "tcp_stalled": True, "tcp_bytes_before_stall": 3 << 20}, None, None, None)
    answer.record_one_sided(spent, 1024, frozen)
    assert set(evidence.recall()) == {"one-sided"}
    assert set(evidence.recall("one-sided")) == {"writes", "rdma_target_syscalls", "rdma_target_switches",
                                                 "rdma_target_cpu_ms", "device_kind", "frozen_rdma_completed",
                                                 "frozen_rdma_posted", "frozen_target_found", "frozen_tcp_stalled",
                                                 "frozen_tcp_bytes", "recorded"}
    assert evidence.recall("one-sided")["device_kind"] == "soft"
    assert [m for m, _ in answer.gather().missing][:2] == ["socket-path", "target-cpu"]
    one = OneCpu.from_loops(0, 100, {"read_lat": (3.4, dict(spent, voluntary_switches=0)),
                                     "tcp_rr": (21.0, dict(spent, voluntary_switches=100))})
    kept = answer.record_target_cpu(dashboard_results(), one)
    assert set(kept) == set(evidence.TARGET_CPU_KEYS) | {"device_kind"}
    assert kept["rdma_copies_per_byte"] == pytest.approx(1.0) and kept["lat_size"] == 8
    assert kept["tcp_receiver_cpu_share"] == pytest.approx(0.9) and kept["rdma_target_cpu_share"] == 0.0
    figures = answer.gather()
    assert figures["one-cpu-read"].lesson == "target-cpu" and "3.4 us by RDMA READ, 21.0 us" in figures["one-cpu-read"].text
    assert figures["write-target"].lesson == "one-sided" and "1024 RDMA WRITEs made 0 syscalls" in figures["write-target"].text
