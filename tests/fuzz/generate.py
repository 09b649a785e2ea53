"""Writes a corpus of short verbs programs for the differential fuzzer, drawn by hypothesis.

    python -m tests.fuzz.generate --seed 14 --count 300 > tests/fuzz/corpus.json

Runs on the host (the Soft-RoCE guest has no hypothesis): the programs are plain JSON data that
tests/fuzz/interpreter.py runs anywhere. The same seed and hypothesis version give the same corpus.
The draws lean towards programs that work (valid keys, offsets in bounds, QPs in RTS), so most of
them move data, with enough wrong keys, bounds, access flags, masks and states to reach the errors.
"""
import argparse
import json
import sys

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.interpreter import ACCESS, OPCODES, REQUIRED

ATTRIBUTES = sorted({a for names in REQUIRED.values() for a in names})


def often(common, *rare):
    """`common` three times in four, else one of `rare`."""
    return st.sampled_from([common] * 3 * len(rare) + list(rare))


def weighted(*pairs):
    """One of the strategies, each drawn `weight` times as often: pairs of (weight, strategy)."""
    return st.sampled_from([s for weight, s in pairs for _ in range(weight)]).flatmap(lambda s: s)


access = st.lists(st.sampled_from(ACCESS), unique=True).map(sorted)
offsets = st.sampled_from([0, 0, 0, 8, 64, 1000, 4088, 4090, 4096, 8192])
lengths = st.sampled_from([8, 8, 8, 1, 16, 64, 0, 1000, 1024, 2500, 4096, 4097])
# local SGEs mostly in MR 0, remote ranges mostly in MR 1 (overlapping copies are a known difference)
local_mr, remote_mr = st.sampled_from([0, 0, 0, 1, 2, 3]), st.sampled_from([1, 1, 1, 0, 2, 3])
mr_index = st.sampled_from([0, 1, 1, 2, 3])
sge = st.fixed_dictionaries({"mr": local_mr, "off": offsets, "len": lengths,
                             "lkey": often("own", "bogus", "mr:1", "mr:2")})
atomic_sge = st.fixed_dictionaries({"mr": local_mr, "off": st.sampled_from([0, 8, 8, 4, 4088]),
                                    "len": often(8, 4, 16), "lkey": often("own", "bogus")})
remote = st.fixed_dictionaries({"mr": remote_mr, "off": offsets, "rkey": often("own", "bogus", "zero")})
atomic_remote = st.fixed_dictionaries({"mr": remote_mr, "off": st.sampled_from([0, 8, 4, 4088, 4096]),
                                       "rkey": often("own", "bogus", "zero")})
imm = st.sampled_from([0, 1, 0x12345678, 0xFFFFFFFF])


@st.composite
def send_wr(draw):
    opcode = draw(st.sampled_from(OPCODES))
    atomic = opcode.startswith("ATOMIC")
    sges = draw(st.lists(atomic_sge if atomic else sge, min_size=0, max_size=3)
                if draw(st.integers(0, 4)) == 0 else st.lists(atomic_sge if atomic else sge, min_size=1, max_size=1))
    wr = {"opcode": opcode, "signaled": draw(often(True, False)), "imm": draw(imm), "sges": sges}
    if opcode.startswith(("RDMA", "ATOMIC")):
        wr["remote"] = draw(atomic_remote if atomic else remote)
    return wr


recv_wr = st.fixed_dictionaries({"sges": st.one_of(st.lists(sge, min_size=1, max_size=1),
                                                   st.lists(sge, min_size=0, max_size=3))})
sides = st.sampled_from(["a", "b"])
steps = weighted(
    (8, st.fixed_dictionaries({"op": st.just("post_send"), "wrs": st.lists(send_wr(), min_size=1, max_size=3)})),
    (4, st.fixed_dictionaries({"op": st.just("post_recv"), "wrs": st.lists(recv_wr, min_size=1, max_size=2)})),
    (3, st.fixed_dictionaries({"op": st.just("poll"), "cq": sides, "n": st.integers(1, 4)})),
    (1, st.fixed_dictionaries({"op": st.just("reg_mr"), "size": st.sampled_from([4096, 64, 8, 1, 0, 8192]),
                           "access": access})),
    (1, st.fixed_dictionaries({"op": st.just("dereg_mr"), "mr": mr_index})),
    (2, st.fixed_dictionaries({"op": st.just("modify"), "qp": sides,
                           # (not SQD yet: soft0 has it since 2026-12-06, and regressions.json keeps a program)
                           "state": st.sampled_from(["RTS", "ERR", "RTR", "INIT", "RESET"]),
                           "mask": often("right", *[f"drop:{a}" for a in ATTRIBUTES],
                                         *[f"add:{a}" for a in ATTRIBUTES])})),
    (1, st.fixed_dictionaries({"op": st.just("query"), "qp": sides})),
    (1, st.fixed_dictionaries({"op": st.just("create_cq"), "cqe": st.sampled_from([1, 2, 4, 100, 0, -1, 1 << 22])})),
    (1, st.fixed_dictionaries({"op": st.just("destroy_cq"), "cq": st.integers(0, 2)})),
)
setups = st.fixed_dictionaries({
    "state": often("RTS", "RESET", "INIT", "RTR"),
    "sq_sig_all": st.sampled_from([1, 0]),
    "max_send_wr": st.sampled_from([8, 1, 2, 4]),
    "max_recv_wr": st.sampled_from([8, 1, 2, 4]),
    "access_b": st.one_of(st.just(list(ACCESS)), access),
    "max_dest_rd_atomic_b": often(1, 0, 4),
})
programs = st.fixed_dictionaries({"setup": setups, "steps": st.integers(1, 12).flatmap(
    lambda n: st.lists(steps, min_size=n, max_size=n))})


def generate(count, seed_value, batch=10):
    """`count` distinct programs, in batches of `batch` from seeds derived from `seed_value`: one long
    run of hypothesis mutates its own examples into neighbours, many short ones spread wider. The
    first example of each run, hypothesis' simplest, is left out."""
    found = {}
    for run in range(10 * count // batch + 1):
        drawn = []

        @seed(seed_value * 1000 + run)
        @settings(max_examples=batch + 1, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(programs)
        def draw(program):
            drawn.append(program)

        draw()
        for program in drawn[1:]:
            if len(found) < count:
                found.setdefault(json.dumps(program, sort_keys=True), program)
        if len(found) == count:
            break
    return list(found.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args(argv)
    drawn = generate(args.count, args.seed)
    json.dump({"seed": args.seed, "count": len(drawn), "written by": "python -m tests.fuzz.generate",
               "programs": {f"s{args.seed}-{i:03d}": p for i, p in enumerate(drawn)}}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
