"""Differential truth: did the conformance suite observe the same outcomes on soft0 and on rxe0?

    python softroce/compare_traces.py soft.json rxe.json

Each trace (tests/conformance/conftest.py, RDMALAB_TRACE) lists, per test, the completions (status,
opcode, byte_len, imm_data, wc_flags, wr_id), errnos, QP states (cached and queried) and the
pairs' memory hashes it observed. Where the two differ, rxe is right: change the emulator.
Exit status 1 when any test differs or ran on one provider only.
"""
import json
import sys


def compare(reference, candidate):
    """Lines describing every difference; empty when the traces agree."""
    problems = []
    for test in sorted(set(reference) | set(candidate)):
        if test not in candidate or test not in reference:
            problems.append(f"{test}: ran on one provider only")
            continue
        a, b = reference[test], candidate[test]
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                problems.append(f"{test}: observation {i + 1}: {x[0]} {x[1]} on one, {y[0]} {y[1]} on the other")
                break
        else:
            if len(a) != len(b):
                problems.append(f"{test}: {len(a)} observations against {len(b)}")
    return problems


def main(soft_path, real_path):
    soft, real = json.load(open(soft_path)), json.load(open(real_path))
    problems = compare(real["tests"], soft["tests"])
    count = sum(len(obs) for obs in real["tests"].values())
    names = f"{soft['provider']} and {real['provider']}"
    if problems:
        print(f"differential: {len(problems)} of {len(real['tests'])} conformance tests differ between {names}:")
        print("\n".join(f"  {p}" for p in problems))
        return 1
    print(f"differential: {len(real['tests'])} conformance tests, {count} observations, identical on {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
