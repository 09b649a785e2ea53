"""The scaling lesson (scaling-out): its exercise, a check (raising Wrong with a hint) and a reference solution.

scaling-out.predict-4: from costs fitted to 2-rank ring times, predict the ring's time on 4 ranks at each size,
each rank with a CPU of its own (as in a cluster; the lesson then counts the turns its ranks took on one CPU).
The check recomputes the model's prediction and, when the answer differs, names the usual slips
(the 2-rank terms, the (p-1)/p factor forgotten, alpha counted once, gamma left out, the turns counted)."""
from rdmalab.lessons.exercises import Wrong, exercise, reference

RANKS = 4


def _ring(costs, p, n, steps=None, share=None, reduce=True):
    """The ring's time with some terms changed, to recognise an answer built that way."""
    steps = 2 * (p - 1) if steps is None else steps
    share = (p - 1) / p if share is None else share
    return steps * costs.alpha + 2 * share * n * costs.beta + (share * n * costs.gamma if reduce else 0.0)


SLIPS = [  # (how the answer was built, what to say)
    (lambda c, n: _ring(c, 2, n), "these are the 2-rank times: use p = 4 in every term."),
    (lambda c, n: _ring(c, RANKS, n, share=1.0), "the bandwidth terms lack the (p-1)/p factor: each rank sends "
                                                  "2 (p-1)/p n bytes, not 2 n."),
    (lambda c, n: _ring(c, RANKS, n, steps=1), "alpha is counted once: the ring takes 2 (p-1) steps, each "
                                               "paying alpha."),
    (lambda c, n: _ring(c, RANKS, n, steps=RANKS - 1), "alpha is counted p-1 times: reduce-scatter AND "
                                                       "all-gather each take p-1 steps, 2 (p-1) in all."),
    (lambda c, n: _ring(c, RANKS, n, reduce=False), "the reduction term is missing: (p-1)/p n gamma."),
    (lambda c, n: _ring(c, RANKS, n) * RANKS, "this counts the turns the ranks take on one CPU: predict the time "
                                              "with a CPU per rank; the lesson counts the turns itself."),
    (lambda c, n: _ring(c, RANKS, n) * 1e3, "the times look like milliseconds: answer in seconds."),
]


@exercise("scaling-out.predict-4", "Predict the ring's time on 4 ranks from a 2-rank fit",
          hints=["T = 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma with p = 4: costs.alpha, costs.beta "
                 "(seconds per byte sent) and costs.gamma (seconds per byte reduced); n in bytes, T in seconds."])
def _check_predict(answer, costs, sizes):
    if not isinstance(answer, dict):
        raise Wrong(f"answer with a dict {{size in bytes: predicted seconds}}, not {type(answer).__name__}.")
    if sorted(answer) != sorted(sizes):
        raise Wrong(f"predict every size and only those: expected keys {sorted(sizes)}, got {sorted(answer)}.")
    for n in sizes:
        right = _ring(costs, RANKS, n)
        got = answer[n]
        if not isinstance(got, (int, float)) or got != got:
            raise Wrong(f"the prediction for {n} bytes is {got!r}: give a number of seconds.")
        if abs(got - right) <= 1e-6 * abs(right):
            continue
        for built, says in SLIPS:
            if abs(got - built(costs, n)) <= 1e-6 * abs(built(costs, n)):
                raise Wrong(f"at {n} bytes: {says}")
        raise Wrong(f"at {n} bytes you predict {got * 1e3:.4g} ms; the model says {right * 1e3:.4g} ms.")


@reference("scaling-out.predict-4")
def _predict_4(costs, sizes):
    p = RANKS
    return {n: 2 * (p - 1) * costs.alpha + 2 * (p - 1) / p * n * costs.beta + (p - 1) / p * n * costs.gamma
            for n in sizes}
