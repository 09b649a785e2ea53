"""The ring AllReduce lesson (allreduce): its exercises, each a check (raising Wrong with a hint) and a reference
solution.

- "allreduce.schedule": which chunk rank r sends in reduce-scatter step s, which one it adds what arrives to, and
  which it sends in all-gather step s. Any schedule that sums every chunk on every rank passes (played out on 2 to
  6 ranks); a wrong one is named by the classic off-by-ones.
- "allreduce.ring": the ring written by hand from put and wait (reference: rdmalab.allreduce.algorithms'
  ring_allreduce). The check runs it on 3, 4, 2 and 5 ranks as threads over rdmalab.lessons.checking's
  transport, twice in a row, with sizes that p does not divide, 4- and 8-byte elements (float32, int32, float64,
  int64), and a rank delayed at random points. That transport makes every mistake below fail every time, and
  the check names it: a ring that calls the library's AllReduce; a put that lands on a slot its target has not
  used (one stage slot for all steps), bytes used before their flag (poison in the sums), bytes read where no put
  ever wrote, a put nobody waited for, a deadlock (with the rank that waited before it put, or, where every rank
  put first, the puts and waits of the pair that differ); a put's source changed before flush() and before the
  sender heard it had landed (a NIC reads it any time until then); ranks whose sums differ in the last bits; what
  it forwarded from its stage, a missing all-gather, the wrong chunk in a step, a rank that writes to more than
  its right neighbour.
"""
import numpy as np

from rdmalab.lessons import checking
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

# ------------------------------------------------------------------------------------------- the step schedule

SCHEDULE_RANKS = (3, 4, 5, 2, 6)
RIGHT = {"send": lambda p, r, s: (r - s) % p, "add": lambda p, r, s: (r - s - 1) % p,
         "gather": lambda p, r, s: (r + 1 - s) % p}
FORMULA = {"send": "(r - s) % p", "add": "(r - s - 1) % p", "gather": "(r + 1 - s) % p"}
PART = {"send": "the chunk it sends in reduce-scatter step s", "add": "the chunk it adds what arrives to",
        "gather": "the chunk it sends in all-gather step s"}
# the classic off-by-ones, by part: (formula, what it means)
SLIPS = {
    "send": [(lambda p, r, s: (r + s) % p, "it goes round the wrong way: the chunk a rank sends in step s is the one "
              "it added to in step s - 1, one lower each step"),
             (lambda p, r, s: (r - s - 1) % p, "that is the chunk it adds to in step s: in step 0 a rank sends its "
              "own chunk r, and then each step the one it has just added to"),
             (lambda p, r, s: (r - s + 1) % p, "one too far: in step 0 a rank sends its own chunk r"),
             (lambda p, r, s: r % p, "the same chunk every step: in step s a rank sends the one it added to in step "
              "s - 1, so that the partial sum travels on"),
             (lambda p, r, s: s % p, "every rank sends the same chunk in a step, so no rank adds into it what its "
              "left neighbour added: each rank starts from its own chunk r")],
    "add": [(lambda p, r, s: (r - s) % p, "that is the chunk it sends in step s: what arrives from the left is the "
             "left neighbour's chunk (r - 1 - s) % p"),
            (lambda p, r, s: (r + s + 1) % p, "it goes round the wrong way: what arrives from the left is one lower "
             "each step"),
            (lambda p, r, s: (r - s + 1) % p, "what arrives from the left neighbour r - 1 is its chunk (r - 1) - s"),
            (lambda p, r, s: (r - 1) % p, "the same chunk every step: the left neighbour sends a different one each "
             "step, (r - 1 - s) % p")],
    "gather": [(lambda p, r, s: (r - s) % p, "all-gather starts from chunk r, which is not finished on rank r: after "
                "the reduce-scatter rank r holds chunk r + 1 finished (the one it added to last)"),
               (lambda p, r, s: (r + 1 + s) % p, "it goes round the wrong way: in step s a rank sends what arrived "
                "in step s - 1, one lower each step"),
               (lambda p, r, s: (r - s - 1) % p, "chunk r - 1 is finished on rank r - 2, not here: rank r holds chunk "
                "r + 1 finished"),
               (lambda p, r, s: (r + 1) % p, "the same chunk every step: in step s a rank passes on the one that "
                "arrived in step s - 1")],
}


def _schedule(fn, p):
    """{(r, s): (send, add, gather)} as the learner's function gives them; Wrong if it gives something else."""
    out = {}
    for r in range(p):
        for s in range(p - 1):
            got = fn(p, r, s)
            if got is None or (isinstance(got, tuple) and any(c is None or c is Ellipsis for c in got)):
                raise NotYet("the function still returns None for a chunk: write send, add and gather.")
            if not (isinstance(got, (tuple, list)) and len(got) == 3):
                raise Wrong(f"return three chunk numbers, (send, add, gather): for p={p}, r={r}, s={s} it returned "
                            f"{got!r}.")
            for name, c in zip(("send", "add", "gather"), got):
                if not isinstance(c, (int, np.integer)) or isinstance(c, bool):
                    raise Wrong(f"{name} is {c!r} for p={p}, r={r}, s={s}: a chunk is a whole number, 0 to p - 1.")
                if not 0 <= c < p:
                    raise Wrong(f"{name} is {c} for p={p}, r={r}, s={s}: chunks are numbered 0 to {p - 1}, so wrap "
                                f"it with % p (in Python, (r - s) % p is never negative).")
            out[r, s] = tuple(int(c) for c in got)
    return out


def _plays_out(plan, p):
    """Whether the schedule sums every chunk on every rank: each chunk of each rank as a count of each rank's
    contribution, through the reduce-scatter (added to) and the all-gather (copied)."""
    x = [[np.eye(p, dtype=int)[r] for _ in range(p)] for r in range(p)]   # x[r][c]: rank r's chunk c, by whose values
    for s in range(p - 1):   # every rank sends at once; what arrives is added to the receiver's chunk `add`
        sent = [x[r][plan[r, s][0]].copy() for r in range(p)]
        for r in range(p):
            right = (r + 1) % p
            if plan[right, s][1] != plan[r, s][0]:
                return False   # chunk c's sums added into another chunk
            x[right][plan[right, s][1]] = x[right][plan[right, s][1]] + sent[r]
    for s in range(p - 1):   # every rank sends a chunk into the same chunk of its right neighbour's x
        sent = [(plan[r, s][2], x[r][plan[r, s][2]].copy()) for r in range(p)]
        for r, (c, what) in enumerate(sent):
            x[(r + 1) % p][c] = what
    return all((x[r][c] == 1).all() for r in range(p) for c in range(p))


@exercise("allreduce.schedule", "The ring's step schedule: which chunk goes where in step s",
          hints=["Reduce-scatter: rank r starts by sending its own chunk r, and adds what arrives from its left "
                 "neighbour (r - 1) to the same chunk the neighbour sent; then it sends on the chunk it has just added "
                 "to. All-gather: it starts with the chunk it finished last, and passes on what arrives."])
def _check_schedule(answer):
    if not callable(answer):
        raise Wrong("answer with your function, as the cell does: lambda: my_schedule.")
    for p in SCHEDULE_RANKS:
        plan = _schedule(answer, p)
        if _plays_out(plan, p):
            continue
        for part, i in (("send", 0), ("add", 1), ("gather", 2)):
            off = [(r, s) for (r, s), got in plan.items() if got[i] != RIGHT[part](p, r, s)]
            if not off:
                continue
            r, s = off[0]
            why = next((meaning for slip, meaning in SLIPS[part]
                        if all(got[i] == slip(p, r_, s_) for (r_, s_), got in plan.items())), None)
            said = (f"on {p} ranks, rank {r}'s {part} in step {s} is chunk {plan[r, s][i]}; {PART[part]} is "
                    f"{FORMULA[part]}, here {RIGHT[part](p, r, s)}")
            raise Wrong(f"{said}: {why}." if why else f"{said}.")
        raise Wrong(f"on {p} ranks your schedule does not sum every chunk on every rank.")   # (unreachable: the
        # classic schedule plays out)


@reference("allreduce.schedule")
def _schedule_reference():
    def my_schedule(p, r, s):
        send = (r - s) % p        # our own chunk first, then the one we have just added to
        add = (r - s - 1) % p     # what left (r - 1) sent in this step
        gather = (r + 1 - s) % p  # finished here by the reduce-scatter (s = 0), or arrived in step s - 1
        return send, add, gather
    return my_schedule


# ------------------------------------------------------------------------------------------- the ring by hand

class RingJudge(checking.Judge):
    """The verdict on a run of the learner's ring: its puts named by step, its wrong sums by what its puts did."""
    slot_hint = ("Nothing tells a sender that its neighbour has added a chunk (no credit: that would cost a round "
                 "trip per step), and a neighbour that another process holds up adds late. Give every step its own "
                 "slot: slot s at s x (the largest chunk, in bytes).")
    read_hint = ("Read step s's slot at the offset where your left neighbour put it, s x (bytes of the largest "
                 "chunk), as you put yours.")

    def step(self, put, run):
        """A put as the learner thinks of it: its step (its puts in the order the reference makes them)."""
        p = run.ranks
        phase, s = ("reduce-scatter", put.index) if put.index < p - 1 else ("all-gather", put.index - (p - 1))
        return f"put of {phase} step {s}"

    def sums(self, run, call, wrong):
        return ("each rank sends the right chunks, but what arrives is added to the wrong one: in step s the chunk "
                "arriving from the left neighbour l is its chunk (l - s) % p, that is (r - s - 1) % p.")

    def mistake(self, run, call):
        """What a ring whose sums are wrong did differently from the ring, by its puts (None if they look right)."""
        p, bounds, size = run.ranks, _bounds(run), run.dtype.itemsize
        puts = [put for put in run.puts if put.call == call and put.region is not None]
        for put in puts:
            if put.source[0] == "stage":
                return (f"in its {self.step(put, run)}, rank {put.sender} sent what it had received (bytes of its "
                        f"stage), the partial sum from its left neighbour, which lacks rank {put.sender}'s own values. "
                        f"Send x's chunk, to which you added that partial sum.")
        mine = {r: [put for put in puts if put.sender == r] for r in range(p)}
        if all(len(sent) <= p - 1 for sent in mine.values()):
            return (f"each rank put {max(len(sent) for sent in mine.values())} chunks: the reduce-scatter's p - 1, and "
                    f"no all-gather. After the reduce-scatter, rank r holds one finished chunk (r + 1) and partial "
                    f"sums of the others; in p - 1 more steps the finished chunks go round the ring, into each x.")
        for r, sent in mine.items():
            for i, put in enumerate(sent):
                got = _chunk(run, put)
                lo, hi = put.source[1] // size, (put.source[1] + put.hi - put.lo) // size
                what = f"elements {lo} to {hi}" if got is None else f"chunk {got}"
                if i < p - 1:
                    if got != (r - i) % p:
                        return (f"in reduce-scatter step {i}, rank {r} sent {what}; in step s a rank sends chunk "
                                f"(r - s) % p, here {(r - i) % p}: its own, with what arrived in step s - 1 added to "
                                "it.")
                    continue
                s = i - (p - 1)
                want = (r + 1 - s) % p
                if got != want:
                    return (f"in all-gather step {s}, rank {r} sent {what}; in step s a rank sends chunk "
                            f"(r + 1 - s) % p, here {want}: finished here, by the reduce-scatter (s = 0) or by the "
                            "all-gather's step s - 1.")
                if (put.region, put.lo) != ("data", bounds[want] * size):
                    return (f"in all-gather step {s}, rank {r} put chunk {want} at byte {put.lo} of rank "
                            f"{put.target}'s {put.region}; it belongs in its x, at byte bounds[c] x itemsize "
                            f"({bounds[want] * size}), where that chunk lives.")
        return None

    def shape(self, run):
        """Wrong if the sums are right but the bytes did not move as a ring moves them."""
        p, size = run.ranks, run.dtype.itemsize
        where = f"your {self.what} (on {run})"
        most = 2 * (p - 1) * int(max(np.diff(_bounds(run)))) * size
        for r in range(p):
            sent = [put for put in run.puts if put.sender == r and put.call == 0 and put.region is not None]
            peers = sorted({put.target for put in sent})
            if len(peers) > 1:
                raise Wrong(f"{where}: the sums are right, but rank {r} put to ranks {', '.join(map(str, peers))}: in "
                            "a ring each rank writes to one neighbour only, so every link carries the same bytes.")
            if sum(put.hi - put.lo for put in sent) > most:
                raise Wrong(f"{where}: the sums are right, but rank {r} sent {sum(put.hi - put.lo for put in sent)} "
                            f"bytes; a ring sends 2 (p - 1) chunks, here at most {most} bytes.")


def _bounds(run):
    return np.linspace(0, run.count, run.ranks + 1).astype(int)


def _chunk(run, put):
    """Which chunk of x a put sent (None: not from x, or not one chunk)."""
    region, offset = put.source
    bounds, size = _bounds(run), run.dtype.itemsize
    for c in range(run.ranks):
        if region == "data" and (offset, put.hi - put.lo) == (bounds[c] * size, (bounds[c + 1] - bounds[c]) * size):
            return c
    return None


@exercise("allreduce.ring", "The ring AllReduce, from put and wait",
          hints=["In reduce-scatter step s, put chunk (r - s) % p into the right neighbour's stage, in slot s; wait "
                 "for the left; add what arrived to chunk (r - s - 1) % p. Then p - 1 all-gather steps pass the "
                 "finished chunks on, (r + 1 - s) % p, straight into the neighbour's x."])
def _check_ring(answer):
    if isinstance(answer, tuple):
        raise Wrong("answer with your ring alone, as the cell does: lambda: my_ring.")
    if not callable(answer):
        raise Wrong("answer with your function, as the cell does: lambda: my_ring.")
    checking.check(answer, RingJudge("ring"), checking.CASES)


@reference("allreduce.ring")
def _ring():
    from rdmalab.allreduce.algorithms import ring_allreduce
    return ring_allreduce
