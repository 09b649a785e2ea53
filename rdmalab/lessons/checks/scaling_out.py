"""The scaling lesson (scaling-out): its exercise, a check (raising Wrong with a hint) and a reference solution.

scaling-out.fit: the learner's least-squares fit of alpha, beta and gamma, a function
fit(ring, add, p, turns) -> (alpha, beta, gamma), from ring AllReduce times {n bytes: seconds} of p ranks that
took `turns` turns of a shared CPU each step, and numpy's add times {n bytes: seconds} (the only measurement
that tells gamma from beta: in every ring time the bytes reduced are half the bytes sent).

The check cannot know the costs behind the learner's own times, so it gives the function times made exactly
from known costs (CASES: as if measured without noise), on 2 ranks sharing one CPU and on 4 ranks with a CPU
each, and sees whether it finds those costs. When it does not, the check fits the same times each plausible
wrong way (SLIPS, alone and two at a time: the (p-1)/p factors left out, alpha's 2(p-1) messages miscounted,
the turns not counted, numpy's add times left out, one size only) and names the slips whose answer the
learner's matches, or alpha and beta in each other's place, or a negative cost."""
import itertools

import numpy as np

from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

MiB = 1 << 20
TRUE = (40e-6, 1e-9, 0.25e-9)   # alpha 40 us a message, beta 1 ns a byte sent (1 GB/s), gamma 0.25 ns a byte reduced
CASES = [   # (p, turns, ring sizes, numpy add sizes): times are made from TRUE. 4 ranks first, where 1, p-1 and
    # 2(p-1) messages differ; then 2 ranks taking 2 turns, which a fit that forgets the turns gets wrong
    (4, 1, (64 << 10, 8 * MiB, 32 * MiB), (4 * MiB, 16 * MiB)),
    (2, 2, (64 << 10, 1 * MiB, 16 * MiB, 32 * MiB), (16 * MiB,)),
]
HINT = ("One row per measurement, one column per cost: a ring time of n bytes on p ranks is turns x (2(p-1) "
        "alpha + 2(p-1)/p n beta + (p-1)/p n gamma), a numpy add of n bytes is n gamma. Stack the rows into a "
        "matrix A and the times into y; np.linalg.lstsq(A, y, rcond=None)[0] is (alpha, beta, gamma).")


def times(costs, p, turns, ring_sizes, add_sizes):
    """({n: seconds} of the ring, {n: seconds} of numpy's add) exactly as the model makes them."""
    alpha, beta, gamma = costs
    ring = {n: turns * (2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma)
            for n in ring_sizes}
    return ring, {n: n * gamma for n in add_sizes}


# Each slip: (what to say, how it changes the fit): the right fit is fitted(ring, add, p, turns) with no change.
SLIPS = {
    "factors": "the bytes lack the (p-1)/p factors: each rank sends 2(p-1)/p n bytes and reduces (p-1)/p n "
               "of them, not 2n and n",
    "messages once": "alpha is counted once: the ring sends 2(p-1) messages, each paying alpha",
    "messages p-1": "alpha is counted p-1 times: reduce-scatter and all-gather take p-1 steps each, 2(p-1) in all",
    "turns": "the turns are not counted: on a shared CPU every term of a ring time is paid `turns` times",
    "no add": "numpy's add times are left out: in a ring time gamma always comes with 2 beta (bytes reduced "
              "are half the bytes sent), so no fit of ring times alone can tell them apart",
    "one size": "the fit uses one ring size only: one time cannot tell a message's cost from a byte's; "
                "give lstsq a row for every size",
}
SLIPS["one small size"] = SLIPS["one size"]   # (the largest size alone, or the smallest)


def fitted(ring, add, p, turns, slips=()):
    """Least squares of (alpha, beta, gamma), built right or with `slips` (keys of SLIPS)."""
    steps = 1 if "messages once" in slips else (p - 1 if "messages p-1" in slips else 2 * (p - 1))
    share = 1.0 if "factors" in slips else (p - 1) / p
    k = 1 if "turns" in slips else turns
    sizes = sorted(ring)
    sizes = sizes[-1:] if "one size" in slips else sizes[:1] if "one small size" in slips else sizes
    rows = [[k * steps, k * 2 * share * n, k * share * n] for n in sizes]
    y = [ring[n] for n in sizes]
    if "no add" not in slips:
        rows += [[0.0, 0.0, n] for n in add]
        y += list(add.values())
    return tuple(float(c) for c in np.linalg.lstsq(np.array(rows), np.array(y), rcond=None)[0])


def _close(a, b, rtol=1e-4):
    return all(abs(x - y) <= rtol * max(abs(y), 1e-30) for x, y in zip(a, b))


def _shown(costs):
    alpha, beta, gamma = costs
    return f"alpha {alpha * 1e6:.4g} us, beta {beta * 1e9:.4g} ns/B, gamma {gamma * 1e9:.4g} ns/B"


def _answer(fn, ring, add, p, turns):
    """What the learner's function returns for these times, as three floats; NotYet or Wrong otherwise."""
    try:
        got = fn(dict(ring), dict(add), p, turns)
    except NotImplementedError:
        raise NotYet() from None
    except Exception as error:
        raise Wrong(f"your fit raised {type(error).__name__}: {error}", HINT) from None
    if got is None:
        raise NotYet("my_fit returns None: build the rows, solve them with np.linalg.lstsq, and return "
                     "(alpha, beta, gamma).")
    try:
        values = tuple(float(x) for x in got)
    except (TypeError, ValueError):
        raise Wrong(f"return (alpha, beta, gamma), three numbers in seconds; got {got!r}.") from None
    if len(values) != 3:
        raise Wrong(f"return (alpha, beta, gamma): three numbers, not {len(values)}.")
    if any(v != v for v in values):
        raise Wrong(f"your fit returned {values}: NaN is not a cost.", HINT)
    return values


def _diagnose(got, ring, add, p, turns):
    """What the learner's (alpha, beta, gamma) says about how it was fitted: a sentence."""
    right = fitted(ring, add, p, turns)
    if sorted(got) == sorted(right) or _close(sorted(got), sorted(right)):
        names = ("alpha", "beta", "gamma")
        moved = [names[i] for i in range(3) if not _close((got[i],), (right[i],))]
        return (f"{' and '.join(moved)} are in each other's place: return (alpha, beta, gamma) in that order, "
                f"the coefficients of your columns (messages, bytes sent, bytes reduced) in the order of the columns.")
    for count in (1, 2):
        for slips in itertools.combinations(SLIPS, count):
            made = fitted(ring, add, p, turns, slips)
            if _close(got, made) or _close(sorted(got), sorted(made)):
                said = "; and ".join(SLIPS[s] for s in slips)
                if not _close(got, made):
                    said += "; and alpha and beta are in each other's place"
                return said + "."
    negative = [name for name, v in zip(("alpha", "beta", "gamma"), got) if v <= 0]
    if negative:
        return (f"{' and '.join(negative)} came out {'negative' if len(negative) == 1 else 'negative or zero'}: a "
                f"message and a byte cannot cost negative time. A column of your rows is not what the model "
                f"multiplies {negative[0]} by.")
    return "that is not what the times were made from."


@exercise("scaling-out.fit", "Fit alpha, beta and gamma to your own times, by least squares", hints=[HINT])
def _check_fit(answer):
    if not callable(answer):
        raise Wrong("answer with your function, as the cell does: lambda: my_fit.")
    for p, turns, ring_sizes, add_sizes in CASES:
        ring, add = times(TRUE, p, turns, ring_sizes, add_sizes)
        got = _answer(answer, ring, add, p, turns)
        if not _close(got, TRUE):
            where = (f"On times made exactly from {_shown(TRUE)} ({p} ranks, {turns} turn{'s' if turns > 1 else ''} "
                     f"a step, ring sizes {', '.join(_size(n) for n in ring_sizes)}; numpy's add of "
                     f"{', '.join(_size(n) for n in add_sizes)}), your fit found {_shown(got)}: ")
            raise Wrong(where + _diagnose(got, ring, add, p, turns), HINT)


def _size(n):
    return f"{n // MiB} MiB" if n >= MiB else f"{n >> 10} KiB"


@reference("scaling-out.fit")
def _fit():
    def my_fit(ring, add, p, turns):
        import numpy as np
        rows, seconds = [], []
        for n, t in ring.items():   # the ring: 2(p-1) messages, 2(p-1)/p n bytes sent, (p-1)/p n reduced
            rows.append([turns * 2 * (p - 1), turns * 2 * (p - 1) / p * n, turns * (p - 1) / p * n])
            seconds.append(t)
        for n, t in add.items():    # numpy's add: no message, no byte sent, n bytes reduced
            rows.append([0, 0, n])
            seconds.append(t)
        alpha, beta, gamma = np.linalg.lstsq(np.array(rows), np.array(seconds), rcond=None)[0]
        return alpha, beta, gamma
    return my_fit
