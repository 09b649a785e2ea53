"""The instructor's view (issue 17, item 3): opt-in recording of quiz answers and exercise attempts, one
file per learner, `rdmalab class report DIR`; a missing or unwritable class directory is a no-op with
one warning. Two real learners recording into one class directory is tests/workshop's part."""
import importlib
import json
import os
import pwd
import stat

import pytest

from rdmalab import cli
from rdmalab.lessons import classroom, exercises, series

quiz = importlib.import_module("rdmalab.lessons.quiz")   # the module (lessons.quiz is the function)

pytestmark = pytest.mark.host_only   # files and widgets: no device


NAME = "classroom_test_double"


def check_double(answer, x):
    if answer != 2 * x:
        raise exercises.Wrong(f"{answer} is not twice {x}")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    # an exercise of this test's own (the lessons' change under it): double x
    monkeypatch.setitem(exercises.REGISTRY, NAME, exercises.Exercise(NAME, "double", check_double, lambda x: 2 * x,
                                                                       ["twice"]))
    monkeypatch.setattr(classroom, "_warned", False)
    monkeypatch.setattr(quiz, "ANSWERS_FILE", str(tmp_path / "learner" / "answers.json"))
    monkeypatch.delenv(classroom.ENV, raising=False)
    return tmp_path


def test_nothing_is_recorded_unless_the_instructor_asks(fresh, capsys):
    quiz.save_answer("welcome", 1)
    assert classroom.record_exercise("anything", "passed") is False
    assert os.listdir(fresh) == ["learner"]
    assert capsys.readouterr().err == ""


def test_the_lessons_record_answers_and_attempts_in_the_learners_own_file(fresh, monkeypatch, capsys):
    class_dir = fresh / "class"
    class_dir.mkdir(mode=0o1733)
    monkeypatch.setenv(classroom.ENV, str(class_dir))
    name = NAME
    wrong = (quiz.ANSWER + 1) % len(quiz.CHOICES)
    quiz.save_answer("welcome", wrong)
    quiz.save_answer("welcome", quiz.ANSWER)              # a change of mind: the last answer counts
    exercises.attempt(name, lambda x: None, 3)       # the skeleton: "not yet"
    mine = class_dir / f"{classroom.me()}.json"
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o644 and os.stat(mine).st_uid == os.geteuid()
    record = json.loads(mine.read_text())
    assert record["answers"]["welcome"]["choice"] == quiz.ANSWER
    assert record["exercises"][name]["status"] == "not yet" and record["exercises"][name]["attempts"] == 1
    table = classroom.table(str(class_dir))
    assert table["stuck_on"] == {name: [classroom.me()]} and table["passed"][classroom.me()] == []
    assert classroom.record_exercise(name, "passed") and classroom.record_exercise(name, "wrong")
    table = classroom.table(str(class_dir))
    assert table["passed"][classroom.me()] == [name] and table["stuck_on"] == {}   # once passed, passed
    assert sorted(os.listdir(class_dir)) == [mine.name]   # no scratch file left
    assert cli.main(["class", "report", str(class_dir)]) == 0
    out = capsys.readouterr().out
    assert classroom.me() in out and "(right)" in out
    assert cli.main(["class", "report", "--json", str(class_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["answers"] == {classroom.me(): {"welcome": quiz.ANSWER}}
    widget = classroom.widget(str(class_dir))
    assert classroom.me() in widget.children[1].value


def test_the_class_report_shows_each_learners_predictions_beside_their_measurements(fresh, monkeypatch, capsys):
    class_dir = fresh / "class"
    class_dir.mkdir(mode=0o1733)
    monkeypatch.setenv(classroom.ENV, str(class_dir))
    from rdmalab.lessons import evidence
    monkeypatch.setattr(evidence, "PREDICTIONS_FILE", str(fresh / "learner" / "predictions.json"))
    exercises.compare("syscalls per message", 1, 2.0, lesson="socket-path")
    exercises.compare("the AllReduce's share of an RDMA step", None, 0.45, lesson="training-step")
    table = classroom.table(str(class_dir))
    assert table["predictions"]["socket-path"]["syscalls per message"] == {classroom.me(): [1, 2.0]}
    assert cli.main(["class", "report", str(class_dir)]) == 0
    out = capsys.readouterr().out
    assert "01 syscalls per message (1 of 1 predicted first)" in out and f"{classroom.me()}: 1 -> 2" in out
    training = series.number("training-step")   # (by slug: renumbering the lessons changes nothing here)
    assert f"{training} the AllReduce's share of an RDMA step (0 of 1 predicted first)" in out
    assert out.index("01 syscalls") < out.index(f"{training} the AllReduce")   # in the series' order
    assert cli.main(["class", "report", "--json", str(class_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["predictions"]["training-step"]
    assert evidence.predictions()["socket-path"]["syscalls per message"]["measured"] == 2.0   # the learner's own too


@pytest.mark.parametrize("where", ["missing", "a file"])
def test_a_class_dir_that_cannot_be_written_is_a_no_op_with_one_warning(fresh, monkeypatch, capsys, where):
    target = fresh / "nowhere"
    if where == "a file":
        target.write_text("not a directory")
        target = target / "class"
    monkeypatch.setenv(classroom.ENV, str(target))
    name = NAME
    quiz.save_answer("welcome", 1)
    exercises.attempt(name, lambda x: 2 * x, 3)
    assert classroom.record_exercise(name, "passed") is False
    assert quiz.load_answers()["welcome"] == 1   # the lesson's own saving went on
    err = capsys.readouterr().err
    assert err.count("rdmalab: not recording for the class") == 1, err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it gives a file to another user (chown)")
def test_a_file_owned_by_someone_else_is_neither_trusted_nor_overwritten(fresh, monkeypatch, capsys):
    class_dir = fresh / "class"
    class_dir.mkdir()
    monkeypatch.setenv(classroom.ENV, str(class_dir))
    planted = class_dir / f"{classroom.me()}.json"
    planted.write_text(json.dumps({"answers": {"00": {"choice": 3}}}))
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(planted, nobody, nobody)
    assert classroom.record_answer("welcome", 0) is False
    assert "is not yours" in capsys.readouterr().err
    assert json.loads(planted.read_text()) == {"answers": {"00": {"choice": 3}}}
    assert classroom.table(str(class_dir))["learners"] == []
    assert cli.main(["class", "report", str(class_dir / "absent")]) == 1


def test_a_record_of_the_first_editions_lesson_numbers_reads_as_the_lessons_it_meant(fresh, monkeypatch):
    """A learner's record written before lesson 05 was split names the quiz "00" and exercises "05.ring-step"
    (AllReduce then): the report reads them as welcome and allreduce.ring-step, and a newer attempt under the
    new name wins over the old one."""
    class_dir = fresh / "class"
    class_dir.mkdir(mode=0o1733)
    monkeypatch.setenv(classroom.ENV, str(class_dir))
    old = {"answers": {"00": {"choice": quiz.ANSWER}},
           "exercises": {"05.ring-step": {"attempts": 2, "status": "wrong"},
                         "04.mailbox": {"attempts": 1, "status": "passed"}}}
    (class_dir / f"{classroom.me()}.json").write_text(json.dumps(old))
    table = classroom.table(str(class_dir))
    assert table["answers"][classroom.me()] == {"welcome": quiz.ANSWER}
    assert table["passed"][classroom.me()] == ["one-sided.mailbox"]
    assert table["stuck_on"] == {"allreduce.ring-step": [classroom.me()]}
    assert classroom.record_exercise("allreduce.ring-step", "passed")
    assert classroom.table(str(class_dir))["stuck_on"] == {}
