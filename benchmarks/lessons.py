"""Every lesson under papermill, as a learner runs it: on this machine's CPUs, and pinned to one CPU.

    python benchmarks/lessons.py [--quick] [--only SLUG ...] [--out results.json]

Targets (issue 12): pinned to one CPU (Binder, a workshop server, a small VM), each lesson takes at
most 2x its time on all the CPUs this process may use, and lesson 04's RDMA-vs-TCP line still shows
the RDMA WRITE faster than TCP at its largest size (1 MiB; 64 KiB with QUICK).
The lessons run one at a time, in order, the two conditions alternating lesson by lesson so that both
see the same machine; each condition keeps its own learner folder (later lessons read what earlier
ones recorded). --quick runs them with QUICK=True, as `make test` does: a smoke run, whose times say
less about what a learner waits for.
"""
import argparse
import glob
import json
import os
import re
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
RDMA_VS_TCP = re.compile(r"at (\d+) B: RDMA WRITE ([\d.]+) us vs TCP ([\d.]+) us")
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


def rdma_vs_tcp(executed):
    """Lesson 04's printed line 'at N B: RDMA WRITE x us vs TCP y us', from an executed notebook."""
    for cell in json.load(open(executed))["cells"]:
        for output in cell.get("outputs", []):
            found = RDMA_VS_TCP.search("".join(output.get("text", "")))
            if found:
                size, rdma, tcp = found.groups()
                return {"size": int(size), "rdma_write_us": float(rdma), "tcp_us": float(tcp)}
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="QUICK=True, as make test runs them (a smoke run)")
    parser.add_argument("--only", nargs="*", help="these lessons only, by slug (e.g. one-sided)")
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
    lessons, lesson_04 = {}, None
    for n, path in enumerate(paths):
        slug, times = slug_of(path), {}
        for condition in (("all", "one") if n % 2 == 0 else ("one", "all")):
            out = os.path.join(work, f"{condition}-{os.path.basename(path)}")
            times[condition] = run_lesson(path, out, args.quick, learners[condition],
                                          one_cpu if condition == "one" else None)
            print(f"{slug:20} {'one CPU' if condition == 'one' else 'all CPUs':8} {times[condition]:6.1f} s",
                  file=sys.stderr)
            if condition == "one" and slug == "one-sided":
                lesson_04 = rdma_vs_tcp(out)
        lessons[slug] = {"all_cpus_s": round(times["all"], 1), "one_cpu_s": round(times["one"], 1),
                         "one_over_all": times["one"] / times["all"]}
    targets = {f"one CPU: lesson {slug} <= 2x its time on all CPUs": row["one_over_all"] <= 2.0
               for slug, row in lessons.items()}
    if lesson_04 is not None:
        targets["one CPU: lesson 04 shows RDMA WRITE faster than TCP at its largest size"] = \
            lesson_04["rdma_write_us"] < lesson_04["tcp_us"]
    report = {"benchmark": "lessons", "quick": args.quick, "usable_cpus": usable_cpus(), "one_cpu": one_cpu,
              "lessons": lessons, "lesson_04_one_cpu": lesson_04, "executed_notebooks": work, "targets": targets}
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
