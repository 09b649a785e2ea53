"""The lessons, in order, each named by a slug: its notebook's file name without the number
(notebooks/05-one-sided.ipynb is "one-sided").

Whatever outlives a lesson's run is keyed by slug, never by number: the learner's evidence
("allreduce"), the quiz's answers ("welcome"), exercise names ("allreduce.ring") and so the class
records. Renumbering the lessons (as the second edition did, splitting lesson 05 in two; the fifth,
adding the training step and PyTorch after the AllReduce; the sixth, splitting four lessons in two) changes
none of them: only LESSONS below and the notebooks' file names, which tests/test_lengths.py holds
to each other.

Data saved before that split is keyed by the first edition's numbers; FIRST_EDITION reads it as the
lesson it meant, so an old "05" (AllReduce then) is never taken for today's lesson 05 (one-sided). Never add to it.
"""
import os
import re

LESSONS = [   # (slug, title), in the series' order: the index is the lesson's number
    ("welcome", "Welcome"),
    ("socket-path", "The socket path"),
    ("memory-registration", "Memory registration"),
    ("queue-pairs", "Queue pairs"),
    ("two-sided", "Two-sided: SEND, RECV and rdma_cm"),
    ("one-sided", "One-sided operations"),
    ("target-cpu", "The target's CPU"),
    ("posting", "Posting at speed"),
    ("naive-allreduce", "AllReduce, the naive way"),
    ("allreduce", "The ring AllReduce"),
    ("training-step", "Your ring trains a model"),
    ("in-pytorch", "Your ring in PyTorch"),
    ("scaling-out", "Scaling out"),
    ("on-the-wire", "On the wire"),
    ("when-it-breaks", "When it breaks"),
    ("the-answer", "The answer"),
]
FIRST_EDITION = {"00": "welcome", "01": "socket-path", "02": "memory-registration", "03": "queue-pairs",
                 "04": "one-sided", "05": "allreduce", "06": "scaling-out"}
NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "notebooks")


def number(slug):
    """The lesson's number today, as its file name writes it: number("allreduce") == "09"."""
    for i, (s, _) in enumerate(LESSONS):
        if s == slug:
            return f"{i:02d}"
    raise KeyError(f"no lesson {slug!r}: the lessons are {', '.join(s for s, _ in LESSONS)}")


def title(slug):
    """'09 The ring AllReduce': the number and title, as the lessons name each other."""
    return f"{number(slug)} {dict(LESSONS)[slug]}"


def slug_of(path):
    """The slug of a notebook's path or file name: 'notebooks/05-one-sided.ipynb' -> 'one-sided'."""
    return re.sub(r"^\d+-", "", os.path.basename(path)).removesuffix(".ipynb")


def notebook(slug):
    """The file name of lesson `slug`, as it is numbered today: notebook("one-sided") == "05-one-sided.ipynb"."""
    return f"{number(slug)}-{slug}.ipynb"


def renamed(key):
    """A saved key as it is named today: first-edition "05", "05.ring-step" or "00:choice" become
    "allreduce", "allreduce.ring-step" and "welcome:choice"; any other key is returned unchanged."""
    old = re.match(r"(\d\d)(?=$|[.:])", key)
    return FIRST_EDITION[old[1]] + key[2:] if old and old[1] in FIRST_EDITION else key


def by_slug(saved):
    """A saved dict with its first-edition keys renamed (renamed()); where an old and a new key name
    the same thing, the new one's entry wins (it was saved later)."""
    out = {renamed(k): v for k, v in saved.items() if renamed(k) != k}
    out.update((k, v) for k, v in saved.items() if renamed(k) == k)
    return out
