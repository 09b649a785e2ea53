"""The AllReduce lesson's closing view (rdmalab.lessons.answer), the quiz it judges, the NCCL protocol table,
and the evidence and answers saved by slug (an old file's lesson numbers read as the lessons they meant)."""
import importlib

import pytest

from rdmalab.allreduce.report import Report
from rdmalab.lessons import answer, evidence, nccl

quiz = importlib.import_module("rdmalab.lessons.quiz")   # the module: `lessons.quiz` is the widget function

FULL = {
    "socket-path": dict(tcp_syscalls_per_message=2.0, tcp_switches_per_message=1.0, tcp_copies_per_byte=2.0,
               tcp_receiver_cpu_share=0.9, tcp_lat_us=20.0, lat_size=8),
    "one-sided": dict(writes=1000, rdma_target_syscalls=0, rdma_target_switches=0, rdma_target_cpu_ms=0.02,
               write_lat_us=1.5, tcp_lat_us=25.0, lat_size=8, rdma_target_cpu_share=0.01,
               tcp_receiver_cpu_share=0.95, bw_size=1 << 20),
    "allreduce": dict(ranks=4, sizes=[65536, 1 << 20], ring_rdma_s=[1e-4, 1e-3], ring_tcp_s=[3e-4, 4e-3],
               mpi_s=[2e-4, 2e-3], busbw_rdma=[0.98, 1.57], busbw_tcp=[0.33, 0.39], provider="soft"),
}


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
                        "disturbed"}
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
    assert not view.missing and "has not recorded" not in text
    assert "2.0 syscalls" in text and "1000 RDMA WRITEs made 0 syscalls" in text
    assert f"{1.57 / 0.39:.1f}x" in text                              # the busbw ratio at the largest size
    assert "ring AllReduce busbw at 1 MiB" in text and "(right)" in text
    html = view._repr_html_()
    assert "<table>" in html and "data:image/png;base64," in html and "your choice" in html


def test_the_evidence_that_holds_on_every_device_leads_the_view():
    frozen = {**FULL, "one-sided": {**FULL["one-sided"], "frozen_rdma_completed": 4, "frozen_rdma_posted": 4,
                                    "frozen_tcp_stalled": True, "frozen_tcp_bytes": 3 << 20, "frozen_target_found": True,
                                    "one_cpu_read_us": 3.4, "one_cpu_request_us": 21.0,
                                    "rdma_copies_per_byte": 1.0, "device_kind": "soft"}}
    view = answer.closing_view(device="soft0", kept=frozen, answers={})
    first = view.rows[0]
    assert "stopped (SIGSTOP) target" in first[0] and first[1] == "stalled after 3.0 MiB" and first[2] == "4 of 4"
    assert view.rows[1][1:3] == (21.0, 3.4)
    copies = next(r for r in view.rows if r[0] == "CPU copies per byte delivered")
    assert copies[1] == 2.0 and "initiator's CPU" in copies[2]   # soft0 copies once, and says who
    assert "4 of 4 RDMA operations on its memory completed while a TCP sender to it stalled" in str(view)
    hardware = {**frozen, "one-sided": {**frozen["one-sided"], "rdma_copies_per_byte": 0.0, "device_kind": "hardware"}}
    copies = next(r for r in answer.rows(hardware) if r[0] == "CPU copies per byte delivered")
    assert copies[2].startswith("0: none")


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


def test_missing_lessons_are_named_and_nothing_fails():
    view = answer.closing_view(device=None, kept={}, answers={})
    text = str(view)
    for lesson in ("01", "04", "06"):   # socket-path, one-sided and allreduce, by today's numbers
        assert f"Lesson {lesson} has not recorded its figures yet" in text
    assert "have not answered lesson 00" in text
    assert "06 AllReduce by hand" in view._repr_html_()
    partial = answer.closing_view(device="soft0", kept={"allreduce": FULL["allreduce"]}, answers={"welcome": 99})
    assert [m for m, _ in partial.missing] == ["socket-path", "one-sided"] and "have not answered" in str(partial)


@pytest.mark.parametrize("chosen", [i for i in range(len(quiz.CHOICES)) if i != quiz.ANSWER])
def test_a_distractor_is_judged_wrong_and_explained(chosen):
    view = answer.closing_view(device="soft0", kept=FULL, answers={"welcome": chosen})
    assert f"you chose: {quiz.CHOICES[chosen]} (not the answer)" in str(view)
    mine = [v for v in view.verdict if v[3]]
    assert len(mine) == 1 and not mine[0][1] and mine[0][2].startswith(quiz.WHY[chosen])


@pytest.mark.parametrize("device, kind", [("soft0", "soft"), ("rxe0", "rxe"), ("mlx5_0", "hardware"), (None, None)])
def test_the_view_says_who_copied_on_the_device_that_measured(device, kind):
    assert answer.kind_of(device) == kind
    marked = [line for line in answer.closing_view(device=device, kept={}, answers={}).lines() if line.startswith("> ")]
    assert marked == ([f"> {answer.WHO_COPIES[kind]}"] if kind else [])


def test_the_quiz_offers_plausible_distractors_beside_the_answer():
    assert "kernel and CPU bypass" in quiz.CHOICES[quiz.ANSWER]       # the real-browser test clicks this text
    assert sum("kernel and CPU bypass" in c for c in quiz.CHOICES) == 1
    assert len(quiz.WHY) == len(quiz.CHOICES) and quiz.WHY[quiz.ANSWER].startswith("Right")
    for word in ("latency", "link bandwidth", "reliable", "socket"):
        assert any(word in c for i, c in enumerate(quiz.CHOICES) if i != quiz.ANSWER), word


def test_nccl_protocols_flag_per_data_as_ncclS_sources_say():
    f = nccl.protocol_figures(1 << 20)
    assert f["LL"]["data_share"] == 0.5 and f["LL"]["flags"] == (1 << 20) // 4
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
    """Before lesson 04 was split, evidence and answers were keyed "01", "04", "05" (AllReduce then) and "00".
    They read as socket-path, one-sided, allreduce and welcome: never as today's lesson 05 (posting)."""
    import json
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(evidence, "EVIDENCE_FILE", str(tmp_path / "evidence.json"))
    monkeypatch.setattr(quiz, "ANSWERS_FILE", str(tmp_path / "answers.json"))
    old = {"01": FULL["socket-path"], "04": FULL["one-sided"], "05": FULL["allreduce"]}
    (tmp_path / "evidence.json").write_text(json.dumps(old))
    assert evidence.recall() == FULL and evidence.recall("posting") == {}
    assert not answer.closing_view(device="soft0", kept=None, answers={}).missing
    evidence.record("allreduce", ranks=2)          # a new run: its slug wins, and the file is rewritten by slug
    assert evidence.recall("allreduce")["ranks"] == 2 and evidence.recall("one-sided") == FULL["one-sided"]
    assert set(json.loads((tmp_path / "evidence.json").read_text())) == {"socket-path", "one-sided", "allreduce"}
    (tmp_path / "answers.json").write_text(json.dumps({"00": 1, "00:choice": quiz.CHOICES[1]}))
    assert quiz.load_answers() == {"welcome": 1}
