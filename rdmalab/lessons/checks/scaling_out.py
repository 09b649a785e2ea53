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
learner's matches, or alpha and beta in each other's place, or a negative cost. Then it gives times with a few
percent of noise, as measured ones have, from 64 KiB to 32 MiB: more equations than unknowns, which no three costs
meet exactly. Least squares then minimizes the sum of the squared misses, and plain misses in seconds let the
largest size decide alone; the fit must weigh each equation by its relative miss (its row and its time divided by
that time), as rdmalab.allreduce.model.fit does. Named: no weights, weights squared, the add rows left unweighted,
the rows divided but not the times.

scaling-out.ring-time: the learner's my_ring_time(p, n, alpha, beta, gamma), the ring's time on p ranks with a
processor each, which the lesson then uses for 4 ranks and for a cluster. Checked at 2, 4 and 1024 ranks against
each slip (RING_SLIPS), alone or two at a time: the (p-1)/p factors, p or p-1 messages instead of 2(p-1), beta not
doubled, gamma doubled, (p - 1) // p (0 in integer division)."""
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
        "matrix A and the times into y, divide each row and its time by that time (A / y[:, None] and y / y), and "
        "np.linalg.lstsq(..., rcond=None)[0] is (alpha, beta, gamma).")
WEIGHT_HINT = ("Divide each equation, its row and its time, by that time: A / y[:, None] and y / y (ones). Then "
               "every equation's miss is relative, and 64 KiB's time counts as much as 32 MiB's.")


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


def fitted(ring, add, p, turns, slips=(), weights="relative"):
    """Least squares of (alpha, beta, gamma), built right or with `slips` (keys of SLIPS), each equation weighed
    by `weights` (a key of WEIGHTS: "relative", each row and its time divided by the time, is right)."""
    steps = 1 if "messages once" in slips else (p - 1 if "messages p-1" in slips else 2 * (p - 1))
    share = 1.0 if "factors" in slips else (p - 1) / p
    k = 1 if "turns" in slips else turns
    sizes = sorted(ring)
    sizes = sizes[-1:] if "one size" in slips else sizes[:1] if "one small size" in slips else sizes
    rows = [[k * steps, k * 2 * share * n, k * share * n] for n in sizes]
    y = [ring[n] for n in sizes]
    ring_rows = len(rows)
    if "no add" not in slips:
        rows += [[0.0, 0.0, n] for n in add]
        y += list(add.values())
    A, y = np.array(rows, float), np.array(y, float)
    w = 1 / y if weights in ("relative", "rows only") else 1 / y ** 2 if weights == "squared" else np.ones(len(y))
    if weights == "ring only":
        w[:ring_rows] = 1 / y[:ring_rows]
    b = y if weights == "rows only" else y * w
    return tuple(float(c) for c in np.linalg.lstsq(A * w[:, None], b, rcond=None)[0])


WEIGHTS = {   # how a fit may weigh its equations, and what is wrong with each but "relative"
    "relative": "",
    "none": ("your fit weighs every equation alike, by its miss in seconds: 32 MiB's time is hundreds of times 64 "
             "KiB's, so it alone decides, and alpha, which only the small size shows, comes out of noise"),
    "squared": ("your fit divides each equation by its time squared: then the smallest time counts most, as much too "
                "much as an unweighted fit counts the largest"),
    "ring only": ("your fit divides the ring's equations by their times but not the adds': their misses, in "
                  "seconds, count for nothing beside the ring's relative ones, and gamma is off"),
    "rows only": ("your fit divides each row by its time but not the time itself: divide the whole equation, "
                  "its row and its time (which becomes 1)"),
}
# times as measured: a few percent off the model, by fixed amounts (p, turns, {n: factor} of the ring, of the adds)
NOISY = (2, 2, {64 << 10: 1.04, 1 * MiB: 0.97, 8 * MiB: 1.02, 32 * MiB: 0.985}, {16 * MiB: 0.98, 32 * MiB: 1.015})


def noisy_times(costs=TRUE):
    """The NOISY case's ({n: s} of the ring, {n: s} of the adds, p, turns)."""
    p, turns, ring_noise, add_noise = NOISY
    ring, add = times(costs, p, turns, ring_noise, add_noise)
    return ({n: t * ring_noise[n] for n, t in ring.items()}, {n: t * add_noise[n] for n, t in add.items()}, p, turns)


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
        raise NotYet("my_fit returns None: return (alpha, beta, gamma).")
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
    for weights in ("rows only",):   # (on exact times the other weights find the right costs)
        if _close(got, fitted(ring, add, p, turns, (), weights)):
            return WEIGHTS[weights] + "."
    for count in (1, 2):
        for slips, weights in itertools.product(itertools.combinations(SLIPS, count), ("relative", "none")):
            made = fitted(ring, add, p, turns, slips, weights)
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


@exercise("scaling-out.fit", "Fit alpha, beta and gamma to your own times, by least squares",
          hints=["A row per time: what alpha, beta and gamma are multiplied by in it."])
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
    ring, add, p, turns = noisy_times()
    got, right = _answer(answer, ring, add, p, turns), fitted(ring, add, p, turns)
    if not _close(got, right):
        where = (f"On times with a few percent of noise, as measured ones have ({p} ranks, {turns} turns a step, ring "
                 f"sizes {', '.join(_size(n) for n in ring)}: more equations than unknowns, which no three costs meet "
                 f"exactly), the fit should find {_shown(right)}; yours found {_shown(got)}: ")
        said = next((WEIGHTS[w] for w in WEIGHTS if w != "relative" and _close(got, fitted(ring, add, p, turns, (), w))),
                    "each equation should count by its relative miss")
        raise Wrong(where + said + ".", WEIGHT_HINT)


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
        A, y = np.array(rows), np.array(seconds)
        alpha, beta, gamma = np.linalg.lstsq(A / y[:, None], y / y, rcond=None)[0]   # each equation by its relative miss
        return alpha, beta, gamma
    return my_fit


# --- scaling-out.ring-time ------------------------------------------------------------------------------------------

RING_HINT = ("2(p-1) messages of alpha each (p-1 steps of reduce-scatter, p-1 of all-gather); each step sends n/p "
             "bytes, 2(p-1)/p n in all; only the reduce-scatter adds, (p-1)/p n bytes.")
RIGHT_TERMS = lambda p, n: (2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n)   # noqa: E731
RING_SLIPS = {   # each slip: (what to say, (messages, bytes sent, bytes reduced) as that slip counts them)
    "factors": ("the bytes lack the (p-1)/p factors: each of the 2(p-1) steps sends a chunk of n/p bytes, so a rank "
                "sends 2(p-1)/p n and reduces (p-1)/p n, not 2n and n",
                lambda p, n: (2 * (p - 1), 2 * n, n)),
    "messages p": ("the messages are 2p: the ring takes p-1 steps to reduce-scatter and p-1 to all-gather, 2(p-1) "
                   "alphas", lambda p, n: (2 * p, 2 * (p - 1) / p * n, (p - 1) / p * n)),
    "messages p-1": ("the messages are p-1: that is the reduce-scatter alone; the all-gather takes p-1 more steps",
                     lambda p, n: (p - 1, 2 * (p - 1) / p * n, (p - 1) / p * n)),
    "beta once": ("beta is counted once: the reduce-scatter sends (p-1)/p n bytes and the all-gather as many again, "
                  "2(p-1)/p n beta", lambda p, n: (2 * (p - 1), (p - 1) / p * n, (p - 1) / p * n)),
    "gamma doubled": ("gamma's factor is doubled: a rank adds only during the reduce-scatter, (p-1)/p n bytes; the "
                      "all-gather only copies", lambda p, n: (2 * (p - 1), 2 * (p - 1) / p * n, 2 * (p - 1) / p * n)),
    "integer": ("(p - 1) // p is 0 in integer division, so the bytes cost nothing: write (p - 1) / p",
                lambda p, n: (2 * (p - 1), 0.0, 0.0)),
}
RING_POINTS = [(4, 32 * MiB), (2, 64 << 10), (1024, 26 * 10 ** 9), (4, 64 << 10)]
RING_COSTS = [TRUE, (5e-6, 1 / 50e9, 1 / 2e12)]   # this lab's made-up costs, and a cluster's (RDMA at 400 Gb/s, a GPU)


def ring_time(p, n, costs, slips=()):
    """The model's ring time, or what `slips` (keys of RING_SLIPS, one or two) make of it: each slip changes the
    terms it counts otherwise."""
    terms = list(RIGHT_TERMS(p, n))
    for slip in slips:
        for k, (theirs, right) in enumerate(zip(RING_SLIPS[slip][1](p, n), RIGHT_TERMS(p, n))):
            if theirs != right:
                terms[k] = theirs
    return sum(t * c for t, c in zip(terms, costs))


def _ring_answers(fn, points):
    got = []
    for p, n, costs in points:
        try:
            value = fn(p, n, *costs)
        except NotImplementedError:
            raise NotYet() from None
        except Exception as error:
            raise Wrong(f"your function raised {type(error).__name__}: {error}", RING_HINT) from None
        if value is None:
            raise NotYet("my_ring_time returned None: return the time in seconds.")
        try:
            got.append(float(value))
        except (TypeError, ValueError):
            raise Wrong(f"return one number, the time in seconds; got {value!r}.") from None
    return got


@exercise("scaling-out.ring-time", "The ring's time on p ranks, as code",
          hints=["The formula at the top of the lesson, in Python."])
def _check_ring_time(my_ring_time):
    if not callable(my_ring_time):
        raise Wrong("answer with your function, as the cell does: lambda: my_ring_time.")
    points = [(p, n, costs) for costs in RING_COSTS for p, n in RING_POINTS]
    got = _ring_answers(my_ring_time, points)
    right = [ring_time(p, n, costs) for p, n, costs in points]
    if _close(got, right, 1e-6):
        return
    k = next(k for k in range(len(got)) if not _close(got[k:k + 1], right[k:k + 1], 1e-6))
    p, n, costs = points[k]
    where = (f"For {p} ranks and {_size(n) if n < 10 ** 9 else f'{n / 1e9:g} GB'} with {_shown(costs)}, the ring "
             f"takes {right[k]:.4g} s; your function says {got[k]:.4g} s: ")
    for count in (1, 2):
        for slips in itertools.combinations(RING_SLIPS, count):
            if _close(got, [ring_time(p, n, costs, slips) for p, n, costs in points], 1e-6):
                raise Wrong(where + "; and ".join(RING_SLIPS[s][0] for s in slips) + ".", RING_HINT)
    raise Wrong(where + "that is not 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma.", RING_HINT)


@reference("scaling-out.ring-time")
def _ring_time():
    def my_ring_time(p, n, alpha, beta, gamma):
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
    return my_ring_time
