"""The differential fuzzer: runs a corpus of verbs programs on soft0 and on a real device, compares.

    python -m tests.fuzz.differential [CORPUS.json ...] [--shrink DIR] [--record FILE|-]

tests/fuzz/expected-rxe0.json holds rxe0's traces of the regression programs and of the corpus' first
40 (--limit: the number of regressions plus 40), which test_fuzz.py checks on any provider:
    softroce/vm.sh sh -c 'RDMALAB_TIME_SCALE=5 python -m tests.fuzz.differential tests/fuzz/regressions.json \
        tests/fuzz/corpus.json --limit 54 --record - 2>/dev/null' > tests/fuzz/expected-rxe0.json

Both providers are loaded in one process (rdmalab.verbs.soft and pyverbs), so each program runs on
soft0 and then on rxe0 and their traces (tests/fuzz/interpreter.py) are compared at once, as
softroce/compare_traces.py compares the conformance suite's. A program that differs is first rerun
on rxe0: if rxe0 does not repeat itself the program is reported as unstable (a flaw of the fuzzer,
not of soft0). Otherwise it is shrunk (tests/fuzz/shrink.py) to a minimal program that still differs,
printed and, with --shrink DIR, written there as JSON: add it to tests/fuzz/regressions.json under a
name that says what it shows, and record rxe0's traces again (above). --record writes traces in
softroce/compare_traces.py's format, so two recorded runs can be compared with it too.
A program that raises (a PyverbsUserError, an interpreter error) fails the run too.
A program that reaches a difference the fuzzer found before (interpreter.KNOWN, listed with its reason in
docs/emulated-nic.md) is marked so in its trace; where soft0's link does not model it (UNMODELLED), its
difference is reported as known (--shrink-known shrinks it all the same). The exit
status is 1 if any other difference, or an unstable program, was found.
"""
import argparse
import json
import os
import sys
import time

from rdmalab.verbs.soft.hardware import LINK
from tests.fuzz.interpreter import KNOWN, UNMODELLED, Device, load, ring_flaw
from tests.fuzz.shrink import shrink

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus.json")


def first_difference(reference, candidate):
    """(index, reference's observation, candidate's) where the traces part, or None if identical."""
    for i, (x, y) in enumerate(zip(reference, candidate)):
        if x != y:
            return i, x, y
    if len(reference) != len(candidate):
        i = min(len(reference), len(candidate))
        return i, reference[i] if i < len(reference) else None, candidate[i] if i < len(candidate) else None
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="*", default=[CORPUS])
    parser.add_argument("--reference", default="pyverbs", help="the provider that is right (default pyverbs)")
    parser.add_argument("--candidate", default="soft")
    parser.add_argument("--shrink", metavar="DIR", help="write each difference's minimal program here")
    parser.add_argument("--shrink-known", action="store_true", help="treat a difference marked known as any "
                        "other (shrink it): does the mark explain it, or does something else differ too?")
    parser.add_argument("--record", metavar="FILE", help="write the reference's traces here (-: to stdout, "
                        "and the report to stderr)")
    parser.add_argument("--quiet", type=float, help="seconds without a completion after which a WR is taken "
                        "to never complete (default 0.02 times RDMALAB_TIME_SCALE)")
    parser.add_argument("--limit", type=int, help="run only the first N programs")
    parser.add_argument("--max-shrink", type=int, default=3, help="shrink at most this many differing programs "
                        "(each takes up to 400 runs on both providers); the others are only reported")
    args = parser.parse_args(argv)
    report = sys.stderr if args.record == "-" else sys.stdout

    def say(*lines):
        print(*lines, file=report, flush=True)

    programs = {}
    for path in args.corpus:
        programs.update(load(path))
    names = list(programs)[:args.limit]
    ref, cand = Device(args.reference, args.quiet), Device(args.candidate, args.quiet)
    start, traces, differing, unstable, known, marked, shrinking = time.monotonic(), {}, [], [], {}, [], 0.0
    for name in names:
        if os.environ.get("RDMALAB_FUZZ_VERBOSE"):
            say(name)
        expected = traces[name] = ref.run(programs[name])
        got = cand.run(programs[name])
        for device, trace in ((ref, expected), (cand, got)):
            if any(what == "exception" for what, _ in trace):   # the program (or the interpreter) is at fault
                unstable.append(name)
                say(f"{name}: raised on {device.name}: {device.last_error!r}: a generated program must only "
                    "reach errors that verbs report (errno, completion status); fix the generator or interpreter")
        if name in unstable:
            continue
        where = first_difference(expected, got)
        if where is None:
            continue
        marks = sorted({value for what, value in got if what == "known difference" and value in UNMODELLED[LINK]})
        if ring_flaw(name, expected, got):
            marks.append(ring_flaw(name, expected, got))
        if marks and not args.shrink_known:
            marked.append(name)
            for mark in marks:
                known.setdefault(mark, []).append(name)
            continue
        if ref.run(programs[name]) != expected:
            unstable.append(name)
            say(f"{name}: {ref.name} gave two different traces: the program's outcome depends on timing")
            continue
        differing.append(name)
        i, x, y = where
        say(f"{name}: observation {i + 1}: {x} on {ref.name}, {y} on {cand.name}")
        if len(differing) > args.max_shrink:
            continue
        began = time.monotonic()
        smallest = shrink(programs[name], lambda p: ref.run(p) != cand.run(p))
        shrinking += time.monotonic() - began
        a, b = ref.run(smallest), cand.run(smallest)
        say(f"  minimal program: {json.dumps(smallest)}\n  {ref.name}: {a}\n  {cand.name}: {b}")
        if args.shrink:
            os.makedirs(args.shrink, exist_ok=True)
            with open(os.path.join(args.shrink, f"{name}.json"), "w") as out:
                json.dump({"found by": name, **smallest, f"{ref.name}'s trace": a}, out, indent=1)
    elapsed = time.monotonic() - start
    if args.record:
        with (open(args.record, "w") if args.record != "-" else sys.stdout) as out:
            json.dump({"provider": ref.name, "tests": traces}, out, indent=0)
    observations = sum(len(t) for t in traces.values())
    for mark, names_ in known.items():
        say(f"known difference ({len(names_)} programs, e.g. {names_[0]}): {mark}: {KNOWN.get(mark, 'not modelled')}")
    say(f"fuzz: {len(names)} programs, {observations} observations in {elapsed:.0f} s ({shrinking:.0f} s shrinking): "
        f"{len(names) - len(differing) - len(unstable) - len(marked)} identical on {cand.name} and {ref.name}, "
        f"{len(marked)} differ as known, {len(differing)} differ otherwise, {len(unstable)} unstable or broken")
    ref.close()
    cand.close()
    return 1 if differing or unstable else 0


if __name__ == "__main__":
    sys.exit(main())
