"""What the learner measured, kept between lessons, so that the last lesson (the-answer) answers the series'
question with their own numbers rather than with prose.

    from rdmalab.lessons import evidence
    evidence.record("socket-path", tcp_reads_per_message=1.0, ...)
    evidence.recall()          # {"socket-path": {...}, "one-sided": {...}, ...}: what has been recorded so far
    evidence.keep_prediction("socket-path", "syscalls per message", 1, 2.0)   # exercises.compare(..., lesson=)
    evidence.predictions()     # {"socket-path": {"syscalls per message": {"predicted": 1, "measured": 2.0}}, ...}

Who records what (rdmalab.lessons.answer.gather names each figure the last lesson cites):
    socket-path      the notebook: a TCP receiver's syscalls, switches, copies per byte, CPU share, latency
    one-sided        answer.record_one_sided: the RDMA WRITE target's costs, the stopped target
    target-cpu       answer.record_target_cpu: the one-CPU READ against a TCP request, the dashboard's rows
                     (saved under "one-sided" before the sixth edition split that lesson: recall() reads it as
                     target-cpu's)
    allreduce        answer.record_allreduce: the rings' times and busbw over both transports, MPI's, the device
    on-the-wire      packets.record: a WRITE's packets and its RETH, go-back-N under loss, a ring's header share
    when-it-breaks   failures.record (failures.table calls it): each failure's status, QP states, time, counters

Lessons are keyed by slug (rdmalab.lessons.series), so renumbering them misreads nothing; figures saved
by the first edition under numbers ("01", "04", "05") are read as the lessons they came from (migrated()).
The figures live beside the quiz's answers in ~/.cache/rdmalab/ (RDMALAB_LEARNER_DIR moves both).
"""
import json
import os
import time

from rdmalab.lessons.series import by_slug

LEARNER_DIR = os.environ.get("RDMALAB_LEARNER_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "rdmalab")
EVIDENCE_FILE = os.path.join(LEARNER_DIR, "evidence.json")
PREDICTIONS_FILE = os.path.join(LEARNER_DIR, "predictions.json")   # what the learner predicted, beside what came
# What the target's CPU lesson records; until the one-sided lesson was split in two (the sixth edition) it kept
# them too, under "one-sided"
TARGET_CPU_KEYS = ("one_cpu_read_us", "one_cpu_request_us", "write_lat_us", "tcp_lat_us", "lat_size", "bw_size",
                   "rdma_target_cpu_share", "tcp_receiver_cpu_share", "rdma_copies_per_byte")


def record(lesson, **figures):
    """Keep `figures` (numbers, short strings) as what lesson `lesson` (a slug) measured; returns them."""
    kept = recall()
    kept[lesson] = {**figures, "recorded": time.strftime("%Y-%m-%d %H:%M")}
    _write(EVIDENCE_FILE, kept)
    return figures


def recall(lesson=None):
    """Everything recorded so far, by slug (or one lesson's figures: {} when it has not run)."""
    try:
        with open(EVIDENCE_FILE) as f:
            kept = migrated(json.load(f))
    except (OSError, ValueError, AttributeError):   # unreadable, or not a dict: nothing kept
        kept = {}
    return kept.get(lesson, {}) if lesson is not None else kept


def migrated(saved):
    """Evidence saved by any edition, as today's lessons keep it: first-edition numbers read as slugs
    (series.by_slug), and what lesson 05 kept before the sixth edition split it in two, the one-CPU READ and the
    dashboard's figures (TARGET_CPU_KEYS) under "one-sided", read as target-cpu's; a target-cpu record of its own
    wins over them."""
    kept = by_slug(saved)
    five = kept.get("one-sided") or {}
    moved = {k: five[k] for k in TARGET_CPU_KEYS if k in five}
    if not moved:
        return kept
    out = {**kept, "one-sided": {k: x for k, x in five.items() if k not in TARGET_CPU_KEYS}}
    if not kept.get("target-cpu"):
        out["target-cpu"] = {**moved, **{k: five[k] for k in ("device_kind", "recorded") if k in five}}
    return out


def _write(path, kept):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    scratch = f"{path}.{os.getpid()}"
    with open(scratch, "w") as f:
        json.dump(kept, f, indent=1)
    os.replace(scratch, path)      # a lesson killed mid-write leaves the old file whole


def keep_prediction(lesson, what, predicted, measured):
    """Keep what the learner predicted for `what` in lesson `lesson` (a slug) beside what was measured: the last
    lesson shows them side by side. A run again replaces that prediction's entry."""
    kept = predictions()
    kept.setdefault(lesson, {})[what] = {"predicted": predicted, "measured": measured,
                                         "recorded": time.strftime("%Y-%m-%d %H:%M")}
    _write(PREDICTIONS_FILE, kept)


def predictions():
    """{slug: {what: {"predicted", "measured", "recorded"}}}: every prediction kept, by lesson."""
    try:
        with open(PREDICTIONS_FILE) as f:
            kept = json.load(f)
        return kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        return {}
