"""The series' opening question (the welcome lesson), answered with evidence in the AllReduce lesson.

    from rdmalab import lessons
    lessons.quiz()                                    # the question as a widget; the choice is saved
    lessons.CHOICES[lessons.load_answers()["welcome"]]   # what was chosen, read back in the AllReduce lesson

Every choice is something RDMA really offers or is really sold on; only one of them is what makes
AllReduce fast. WHY says, for each, what is true about it and why it is or is not THE answer;
the AllReduce lesson's closing view (rdmalab.lessons.answer) adds the learner's own numbers to it.
Answers are keyed by the lesson's slug (rdmalab.lessons.series); the first edition's "00" reads as "welcome".
"""
import json
import os

import ipywidgets as w

from rdmalab.lessons import classroom
from rdmalab.lessons.evidence import LEARNER_DIR
from rdmalab.lessons.series import by_slug, number

QUESTION = "Which property of RDMA matters most for AllReduce in a training cluster?"
CHOICES = [
    "lower latency than TCP",
    "more link bandwidth than Ethernet offers",
    "kernel and CPU bypass: the NIC moves data memory to memory, with no copy and no remote CPU",
    "reliable delivery, implemented in the NIC",
    "a socket-compatible API, so existing programs run unchanged",
]
ANSWER = 2   # revealed with evidence in the AllReduce lesson
# Why each choice is, or is not, THE answer (indexes as CHOICES).
WHY = [
    "Latency matters for small messages (the alpha term, 2(p-1) of them per ring AllReduce), but the "
    "AllReduce of gradients moves megabytes to gigabytes per step: it is bandwidth-bound, and its time is "
    "set by what each byte costs, not by the first byte's delay.",
    "Not a property of RDMA: RoCE runs over the same Ethernet links as TCP (100 GbE, 400 GbE), and "
    "InfiniBand and Ethernet ship the same link speeds. On the same wire RDMA still wins, and on this "
    "machine there is no wire at all.",
    "Right. The NIC places the bytes straight into registered memory on the other side: no system call, "
    "no copy through a kernel, no context switch, and the remote CPU does nothing. On a hardware NIC no CPU "
    "touches a ring step's bytes at all, so the CPUs cannot slow the link down however many steps there are.",
    "TCP is reliable too (the kernel retransmits). RC's reliability in the NIC helps because the NIC, not "
    "the CPU, does the work: that is the bypass again, not reliability as such.",
    "Socket wrappers over RDMA (SDP, rsocket in rdma-core's librdmacm) give back some of the gain, but keep "
    "send/receive semantics: the receiver must post buffers and be told, and the one-sided writes a ring "
    "uses are hidden. They help port programs; they are not what makes AllReduce fast.",
]
ANSWERS_FILE = os.path.join(LEARNER_DIR, "answers.json")


def quiz(key="welcome"):
    """The series' opening question as a widget; the choice is saved so the AllReduce lesson can recall it."""
    choice = w.RadioButtons(options=CHOICES, value=None, layout=w.Layout(width="auto"))
    note = w.HTML()

    def saved(change):
        if change["new"] is not None:
            save_answer(key, CHOICES.index(change["new"]))
            note.value = f"<i>Saved. Lesson {number('allreduce')} answers this with your own measurements.</i>"

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
