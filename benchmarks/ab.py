"""soft0 before and after a change, measured side by side: write_lat and send_lat at 8 B (t_typical) and
write_bw at 1 MiB (BW average), each run in turn on this checkout (A) and on a commit (B, checked out in a
temporary git worktree), round after round, so that both see the same machine.

    python benchmarks/ab.py --before REV [--rounds 5] [--iters 2000] [--pin 0] [--out ab.json]

Reports each test's median over the rounds for A and B and the ratio A/B (latency: below 1 is faster;
bandwidth: above 1 is faster). No target is judged: "unchanged within noise" is the spread between rounds,
printed beside it (min and max). --pin 0 runs every round pinned to CPU 0, as `taskset -c 0`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import emit  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = {"write_lat": (8, "t_typical"), "send_lat": (8, "t_typical"), "write_bw": (1 << 20, "bw_avg_mib")}
ONE = """import json, sys
from rdmalab import bench
test, size, key, iters = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
print(json.dumps(bench.run(test, sizes=[size], iters=iters, provider="soft").rows[0][key]))"""


def measure(tree, test, iters, pin):
    size, key = TESTS[test]
    command = [sys.executable, "-c", ONE, test, str(size), key, str(iters)]
    if pin is not None:
        command = ["taskset", "-c", pin] + command
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=tree, RDMALAB_PROVIDER="soft"))
    if done.returncode:
        raise SystemExit(f"ab: {test} failed in {tree}:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with (B)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--pin", help="a CPU list for taskset (e.g. 0)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rdmalab-ab-") as scratch:
        before = os.path.join(scratch, "before")
        subprocess.run(["git", "-C", HERE, "worktree", "add", "--detach", before, args.before],
                       check=True, capture_output=True)
        try:
            got = {tree: {test: [] for test in TESTS} for tree in ("A", "B")}
            for r in range(args.rounds):
                order = (("A", HERE), ("B", before)) if r % 2 == 0 else (("B", before), ("A", HERE))
                for test in TESTS:
                    for name, tree in order:
                        got[name][test].append(measure(tree, test, args.iters, args.pin))
                        print(f"round {r + 1}/{args.rounds} {name} {test:9} {got[name][test][-1]:.2f}", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", HERE, "worktree", "remove", "--force", before], capture_output=True)
    figures = {}
    for test, (size, key) in TESTS.items():
        a, b = statistics.median(got["A"][test]), statistics.median(got["B"][test])
        figures[test] = {"size": size, "figure": key, "A_median": a, "B_median": b, "A_over_B": a / b,
                         "A_rounds": got["A"][test], "B_rounds": got["B"][test]}
    report = {"before": args.before, "after": subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                                           capture_output=True, text=True).stdout.strip(),
              "pinned": args.pin, "rounds": args.rounds, "iters": args.iters, "tests": figures, "targets": {}}
    for test, f in figures.items():
        print(f"{test:9} A {f['A_median']:9.2f}  B {f['B_median']:9.2f}  A/B {f['A_over_B']:.3f}  "
              f"(A {min(f['A_rounds']):.2f}-{max(f['A_rounds']):.2f}, B {min(f['B_rounds']):.2f}-{max(f['B_rounds']):.2f})",
              file=sys.stderr)
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
