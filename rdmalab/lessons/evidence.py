"""What the learner measured, kept between lessons, so that lesson 05 answers the series' question
with their own numbers rather than with prose.

    from rdmalab.lessons import evidence
    evidence.record("01", tcp_syscalls_per_message=2.0, ...)   # lessons 01, 04 and 05 record
    evidence.recall()          # {"01": {...}, "04": {...}, ...}: what has been recorded so far

The figures live beside the quiz's answers in ~/.cache/rdmalab/ (RDMALAB_LEARNER_DIR moves both).
"""
import json
import os
import time

LEARNER_DIR = os.environ.get("RDMALAB_LEARNER_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "rdmalab")
EVIDENCE_FILE = os.path.join(LEARNER_DIR, "evidence.json")


def record(lesson, **figures):
    """Keep `figures` (numbers, short strings) as what lesson `lesson` measured; returns them."""
    kept = recall()
    kept[lesson] = {**figures, "recorded": time.strftime("%Y-%m-%d %H:%M")}
    os.makedirs(LEARNER_DIR, exist_ok=True)
    scratch = f"{EVIDENCE_FILE}.{os.getpid()}"
    with open(scratch, "w") as f:
        json.dump(kept, f, indent=1)
    os.replace(scratch, EVIDENCE_FILE)      # a lesson killed mid-write leaves the old file whole
    return figures


def recall(lesson=None):
    """Everything recorded so far (or one lesson's figures: {} when it has not run)."""
    try:
        with open(EVIDENCE_FILE) as f:
            kept = json.load(f)
    except (OSError, ValueError):
        kept = {}
    return kept.get(lesson, {}) if lesson is not None else kept
