"""The series' opening question (the welcome lesson), answered with evidence in the last lesson (the-answer).

    from rdmalab import lessons
    lessons.quiz()                                    # the question as a widget; the choice is saved
    lessons.CHOICES[lessons.load_answers()["welcome"]]   # what was chosen, read back in the last lesson

Every choice is something RDMA really offers or is really sold on; only one of them is what makes
AllReduce fast. WHY says, for each, what is true about it and why it is or is not THE answer;
the last lesson's closing view (rdmalab.lessons.answer) adds the learner's own numbers to it.
Answers are keyed by the lesson's slug (rdmalab.lessons.series); the first edition's "00" reads as "welcome".
"""
import json
import os

import ipywidgets as w

from rdmalab.lessons import classroom
from rdmalab.lessons.evidence import LEARNER_DIR
from rdmalab.lessons.series import by_slug, number
from rdmalab.lessons.question import ANSWER, CHOICES, QUESTION, WHY  # noqa: F401 (lessons.quiz's names)

ANSWERS_FILE = os.path.join(LEARNER_DIR, "answers.json")


def quiz(key="welcome"):
    """The series' opening question as a widget; the choice is saved so the last lesson can recall it."""
    choice = w.RadioButtons(options=CHOICES, value=None, layout=w.Layout(width="auto"))
    note = w.HTML()

    def saved(change):
        if change["new"] is not None:
            save_answer(key, CHOICES.index(change["new"]))
            note.value = f"<i>Saved. Lesson {number('the-answer')} answers this with your own measurements.</i>"

    choice.observe(saved, "value")
    return w.VBox([w.HTML(f"<b>{QUESTION}</b>"), choice, note])


def save_answer(key, index):
    """Keep choice `index` as the answer to question `key`, with the choice's words: an answer saved
    under an earlier wording of the choices is not read back as whatever now sits at its index."""
    answers = _saved()
    answers[key], answers[f"{key}:choice"] = index, CHOICES[index]
    os.makedirs(os.path.dirname(ANSWERS_FILE), exist_ok=True)
    with open(ANSWERS_FILE, "w") as f:
        json.dump(answers, f)
    classroom.record_answer(key, index)   # the instructor's view, when RDMALAB_CLASS_DIR is set


def load_answers():
    """{question: index into CHOICES} for the answers saved with today's choices."""
    saved = _saved()
    return {key: index for key, index in saved.items() if ":" not in key and isinstance(index, int)
            and 0 <= index < len(CHOICES) and saved.get(f"{key}:choice") == CHOICES[index]}


def _saved():
    try:
        with open(ANSWERS_FILE) as f:
            return by_slug(json.load(f))
    except (OSError, ValueError, AttributeError):
        return {}
