"""The series' opening question (lesson 00), answered with evidence in lesson 05.

    from rdmalab import lessons
    lessons.quiz()                              # the question as a widget; the choice is saved
    lessons.CHOICES[lessons.load_answers()["00"]]   # what was chosen, read back in lesson 05
"""
import json
import os

import ipywidgets as w

from rdmalab.lessons.evidence import LEARNER_DIR

QUESTION = "Which property of RDMA matters most for AllReduce in a training cluster?"
CHOICES = [
    "kernel and CPU bypass, with direct memory-to-memory transfer",
    "software-defined networking",
    "IPv6",
    "a socket-compatible wrapper",
]
ANSWER = 0   # revealed with evidence in lesson 05
ANSWERS_FILE = os.path.join(LEARNER_DIR, "answers.json")


def quiz(key="00"):
    """The series' opening question as a widget; the choice is saved so lesson 05 can recall it."""
    choice = w.RadioButtons(options=CHOICES, value=None, layout=w.Layout(width="auto"))
    note = w.HTML()

    def saved(change):
        if change["new"] is not None:
            save_answer(key, CHOICES.index(change["new"]))
            note.value = "<i>Saved. Lesson 05 answers this with your own measurements.</i>"

    choice.observe(saved, "value")
    return w.VBox([w.HTML(f"<b>{QUESTION}</b>"), choice, note])


def save_answer(key, index):
    answers = load_answers()
    answers[key] = index
    os.makedirs(os.path.dirname(ANSWERS_FILE), exist_ok=True)
    with open(ANSWERS_FILE, "w") as f:
        json.dump(answers, f)


def load_answers():
    try:
        with open(ANSWERS_FILE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
