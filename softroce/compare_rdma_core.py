"""rdma-core's own tests on both providers: does every test that passes on rxe0 pass on soft0?

    python softroce/compare_rdma_core.py rxe.json soft.json [--known GAPS] [--strict]

Both files come from `python -m rdmalab.verbs.run --unittest DIR --json FILE` (with --provider pyverbs
on rxe0). Prints the per-module counts side by side, then each test that passes on rxe0 and not on
soft0 (exit status 1 when there is any), and, as notes, tests that skip on rxe0 but fail or error on
soft0 (--strict: these fail the comparison too). A test soft0 passes and rxe0 does not is listed for
information: it is where soft0 does more than rxe, or rxe has a bug.
--known GAPS (tests/rdmacore/soft0-gaps.txt): tests soft0 is known not to pass yet, one id a line
(# comments). Those may pass on rxe0 and not on soft0; a listed test that soft0 now passes, or that
rxe0 no longer passes, fails the comparison until it is taken off the list.
"""
import json
import sys


def outcome(results, test):
    info = results["tests"].get(test)
    return info["outcome"] if info else "absent"


def module_counts(results):
    return {name: m for name, m in results["modules"].items()}


def compare(rxe, soft):
    tests = sorted(set(rxe["tests"]) | set(soft["tests"]))
    lost = [t for t in tests if outcome(rxe, t) == "pass" and outcome(soft, t) != "pass"]
    broken = [t for t in tests if outcome(rxe, t) == "skip" and outcome(soft, t) in ("fail", "error", "absent")]
    gained = [t for t in tests if outcome(soft, t) == "pass" and outcome(rxe, t) != "pass"]
    return lost, broken, gained


def table(rxe, soft):
    lines = [f"{'module':32} {'rxe0 pass/skip/fail/error':>26}   {'soft0 pass/skip/fail/error':>26}"]
    a, b = module_counts(rxe), module_counts(soft)
    total = {"rxe": [0] * 4, "soft": [0] * 4}

    def cell(m, key):
        if m is None:
            return "absent"
        if m.get("import_error"):
            return "no import"
        row = [m["pass"], m["skip"], m["fail"], m["error"]]
        total[key] = [x + y for x, y in zip(total[key], row)]
        return "/".join(map(str, row))
    for name in sorted(set(a) | set(b)):
        lines.append(f"{name:32} {cell(a.get(name), 'rxe'):>26}   {cell(b.get(name), 'soft'):>26}")
    lines.append(f"{'total':32} {'/'.join(map(str, total['rxe'])):>26}   {'/'.join(map(str, total['soft'])):>26}")
    return lines


def read_known(path):
    return {line.split("#")[0].strip() for line in open(path)} - {""}


def main(argv):
    strict = "--strict" in argv
    argv = [a for a in argv if a != "--strict"]
    known = set()
    if "--known" in argv:
        i = argv.index("--known")
        known = read_known(argv[i + 1])
        del argv[i:i + 2]
    paths = [a for a in argv if not a.startswith("--")]
    if len(paths) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rxe, soft = (json.load(open(p)) for p in paths)
    print("\n".join(table(rxe, soft)))
    lost, broken, gained = compare(rxe, soft)
    stale = sorted(t for t in known if t not in lost)
    expected = [t for t in lost if t in known]
    lost = [t for t in lost if t not in known]

    def show(title, tests):
        if tests:
            print(f"\n{title} ({len(tests)}):")
            for t in tests:
                reason = (soft["tests"].get(t) or {}).get("reason", "") or "(not run on soft0)"
                print(f"  {t}: rxe0 {outcome(rxe, t)}, soft0 {outcome(soft, t)}: {reason.splitlines()[-1][:160] if reason else ''}")
    show("passes on rxe0, not on soft0", lost)
    show("skips on rxe0, fails on soft0", broken)
    show("passes on soft0, not on rxe0", gained)
    if stale:
        print(f"\nlisted as soft0 gaps but no longer one (soft0 passes, or rxe0 does not): take them off the list ({len(stale)}):")
        print("\n".join(f"  {t}: rxe0 {outcome(rxe, t)}, soft0 {outcome(soft, t)}" for t in stale))
    bad = len(lost) + len(stale) + (len(broken) if strict else 0)
    print(f"\nrdma-core's tests: {len(lost)} pass on rxe0 and not on soft0"
          f"{f' (besides {len(expected)} known soft0 gaps)' if known else ''}; "
          f"{len(broken)} skip on rxe0 and fail on soft0{' (fatal with --strict)' if broken and not strict else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
