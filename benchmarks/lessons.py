"""Every lesson under papermill, as a learner runs it: on this machine's CPUs, and pinned to one CPU.

    python benchmarks/lessons.py [--quick] [--only SLUG ...] [--out results.json]

Targets (issues 12 and 25): pinned to one CPU (Binder, a workshop server, a small VM), each lesson takes
at most 2x its time on all the CPUs this process may use; lesson 06 (target-cpu), pinned to one CPU, measures
an RDMA READ of 8 B (the learner's loop, or the reference's) at most 0.5x a TCP request/response (remote memory
without the remote CPU); and every RDMA operation on lesson 05's (one-sided) stopped target completes. Lesson
06's 8 B ping-pongs are reported beside them, without a target: on one CPU a ping-pong waits for the scheduler
on any device.
The lessons run one at a time, in order, the two conditions alternating lesson by lesson so that both
see the same machine; each condition keeps its own learner folder (later lessons read what earlier
ones recorded). --quick runs them with QUICK=True, as `make test` does: a smoke run, whose times say
less about what a learner waits for.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from report import emit  # noqa: E402

from rdmalab.lessons.series import slug_of  # noqa: E402
from rdmalab.proc.cpus import usable_cpus  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LESSON_TIMEOUT_S = 1800
RUN = """
import sys, papermill
papermill.execute_notebook(sys.argv[1], sys.argv[2], parameters={"QUICK": sys.argv[3] == "1"},
                           kernel_name="python3", cwd=sys.argv[4], progress_bar=False,
                           execution_timeout=900, start_timeout=120)
"""


def run_lesson(path, out, quick, learner_dir, cpu=None):
    """Execute one lesson in a process of its own (pinned to `cpu`, which its kernel inherits); its wall time."""
    env = dict(os.environ, RDMALAB_LEARNER_DIR=learner_dir, PYTHONPATH=ROOT)
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", RUN, path, out, "1" if quick else "0", os.path.dirname(path)],
                          env=env, preexec_fn=pin, capture_output=True, text=True, timeout=LESSON_TIMEOUT_S)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"{os.path.basename(path)} failed{' pinned to one CPU' if cpu is not None else ''}:\n{tail}")
    return time.monotonic() - start


def one_cpu_figures(learner_dir):
    """What lessons 05 and 06 recorded for lesson 15 in a learner folder (rdmalab.lessons.evidence: "one-sided", the
    stopped target; "target-cpu", the one-CPU READ and the ping-pongs); None for what did not run."""
    from rdmalab.lessons.evidence import migrated
    with open(os.path.join(learner_dir, "evidence.json")) as f:
        kept = migrated(json.load(f))
    five, six = kept.get("one-sided", {}), kept.get("target-cpu", {})
    return {"read_8B_us": six.get("one_cpu_read_us"), "tcp_request_response_8B_us": six.get("one_cpu_request_us"),
            "read_over_request": six["one_cpu_read_us"] / six["one_cpu_request_us"] if six.get("one_cpu_read_us") else None,
            "frozen_rdma_completed": five.get("frozen_rdma_completed"), "frozen_rdma_posted": five.get("frozen_rdma_posted"),
            "frozen_tcp_bytes_before_stall": five.get("frozen_tcp_bytes"),
            "pingpong_scheduler_bound": {"size": six.get("lat_size"), "write_lat_us": six.get("write_lat_us"),
                                         "tcp_lat_us": six.get("tcp_lat_us")}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="QUICK=True, as make test runs them (a smoke run)")
    parser.add_argument("--only", nargs="*", help="these lessons only, by slug (e.g. one-sided target-cpu)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    paths = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
    if args.only:
        paths = [p for p in paths if slug_of(p) in args.only]
        if not paths:
            raise SystemExit(f"no lesson with slug {' or '.join(args.only)}: see notebooks/")
    one_cpu = min(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="rdmalab-lessons-bench-")
    learners = {"all": os.path.join(work, "learner-all"), "one": os.path.join(work, "learner-one")}
    lessons, one_cpu_lessons = {}, None
    for n, path in enumerate(paths):
        slug, times = slug_of(path), {}
        for condition in (("all", "one") if n % 2 == 0 else ("one", "all")):
            out = os.path.join(work, f"{condition}-{os.path.basename(path)}")
            times[condition] = run_lesson(path, out, args.quick, learners[condition],
                                          one_cpu if condition == "one" else None)
            print(f"{slug:20} {'one CPU' if condition == 'one' else 'all CPUs':8} {times[condition]:6.1f} s",
                  file=sys.stderr)
            if condition == "one" and slug in ("one-sided", "target-cpu"):
                one_cpu_lessons = one_cpu_figures(learners["one"])   # (after 06, with 05's too)
        lessons[slug] = {"all_cpus_s": round(times["all"], 1), "one_cpu_s": round(times["one"], 1),
                         "one_over_all": times["one"] / times["all"]}
    targets = {f"one CPU: lesson {slug} <= 2x its time on all CPUs": row["one_over_all"] <= 2.0
               for slug, row in lessons.items()}
    if one_cpu_lessons is not None and one_cpu_lessons["read_over_request"] is not None:
        targets["one CPU: lesson 06's READ <= 0.5 x TCP request/response"] = one_cpu_lessons["read_over_request"] <= 0.5
    if one_cpu_lessons is not None and one_cpu_lessons["frozen_rdma_posted"] is not None:
        targets["one CPU: lesson 05's stopped target takes every RDMA operation"] = \
            one_cpu_lessons["frozen_rdma_completed"] == one_cpu_lessons["frozen_rdma_posted"]
    report = {"benchmark": "lessons", "quick": args.quick, "usable_cpus": usable_cpus(), "one_cpu": one_cpu,
              "lessons": lessons, "lessons_05_06_one_cpu": one_cpu_lessons, "executed_notebooks": work,
              "targets": targets}
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
