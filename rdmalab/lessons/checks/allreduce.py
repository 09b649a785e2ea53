"""The AllReduce lesson (allreduce): its exercise, the naive AllReduce and the ring written by hand from put and
wait, and the reference solutions (rdmalab.allreduce.algorithms' naive_allreduce and ring_allreduce).

The check runs each function on 3, 4, 2 and 5 ranks as threads over rdmalab.lessons.checking's transport, twice in
a row, with sizes that p does not divide, 4- and 8-byte elements (float32, int32, float64, int64), and a rank
delayed at random points. That transport makes every mistake below fail every time, and the check names it: a
function that calls the library's AllReduce; a put that lands on a slot its target has not used (one stage slot
for all steps), bytes used before their flag (poison in the sums), a put nobody waited for, a deadlock (with the
rank that waited before it put, or, where every rank put first, the count of puts and waits to fix); a put's
source changed before flush() and before the sender heard it had landed (a NIC reads it any time until then);
ranks whose sums differ in the last bits; for the ring, what it forwarded from its stage, a missing all-gather,
the wrong chunk in a step."""
import numpy as np

from rdmalab.allreduce.ranks import wrong_elements
from rdmalab.lessons import checking
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

# (ranks, dtype, elements): 7 and 1003 are divided by neither 3 nor 4; 1 leaves chunks empty. The first cases
# have a chunk for every rank, so the feedback can name chunks.
CASES = [(p, dtype, count) for p in (3, 4, 2) for dtype in ("float32", "int32") for count in (7, 1003, 1)] + \
    [(5, "float64", 1003), (5, "int64", 7), (2, "float64", 7)]   # 8-byte elements, and 5 ranks
LIBRARY = {"allreduce", "allreduce_validated", "ring_allreduce", "naive_allreduce", "REGISTRY", "ring_plan"}
REUSE_HINT = ("A NIC reads a put's source when it sends it, any time until flush() returns (or until you hear the "
              "put has landed): don't change those bytes before. Call comm.t.flush() before you change what you "
              "put, and before you return, since the caller then writes new gradients into x.")
SLOT_HINT = ("Nothing tells a sender that its neighbour has added a chunk (no credit: that would cost a round trip "
             "per step), and a neighbour that another process holds up adds late. Give every step its own slot: "
             "slot s at s x (the largest chunk, in bytes).")
FLAG_HINT = ("A put's bytes may land in any order, at any time, until its flag has: read a stage slot, or pass a "
             "chunk on, only after wait() for the put that fills it has returned.")
RANKS_HINT = ("The function runs on the ranks, which see none of this notebook's names: import what it needs "
              "(import numpy as np) inside it.")


@exercise("allreduce.by-hand", "The naive AllReduce and the ring, from put and wait",
          hints=["Naive: every rank but 0 puts x into its own slot of rank 0's stage and waits; rank 0 waits for "
                 "each, adds its slot into x, then puts the sum into every rank's x. Ring: in reduce-scatter step s, "
                 "put a chunk into the right neighbour's stage, wait for the left, add what arrived; then p - 1 "
                 "all-gather steps pass the finished chunks on, straight into the neighbour's x."])
def _check_by_hand(answer):
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(callable(fn) for fn in answer)):
        raise Wrong("answer with your two functions, as the cell does: lambda: (my_naive, my_ring).")
    for what, fn in zip(("naive AllReduce", "ring"), answer):
        used = _library_names(fn)
        if used:
            raise Wrong(f"your {what} calls the library's AllReduce ({', '.join(sorted(used))}): the exercise is to "
                        "write it yourself, from put and wait.")
        for seed, (p, dtype, count) in enumerate(CASES):
            _judge(what, checking.run(fn, p, count, dtype, seed, library=False))


def _library_names(fn):
    """The names of the library's AllReduce that fn's code (and the functions defined in it) refers to."""
    names, codes = set(), [getattr(fn, "__code__", None)]
    while codes:
        code = codes.pop()
        if code is not None:
            names |= set(code.co_names) & LIBRARY
            codes += [c for c in code.co_consts if hasattr(c, "co_names")]
    return names


@reference("allreduce.by-hand")
def _by_hand():
    from rdmalab.allreduce.algorithms import naive_allreduce, ring_allreduce
    return naive_allreduce, ring_allreduce


def _judge(what, run):
    """Wrong (or NotYet) with what this run of `what` showed, in the order a learner would fix it."""
    ring, where = what == "ring", f"your {what} (on {run})"
    if run.errors:
        rank, error = min(run.errors.items())
        if isinstance(error, NotImplementedError):
            raise NotYet()
        if isinstance(error, checking.LibraryUsed):
            raise Wrong(f"{where}: rank {rank} called the library's AllReduce ({error}): the exercise is to write it "
                        "yourself, from put and wait.")
        raise Wrong(f"{where}: rank {rank} raised {type(error).__name__}: {error}",
                    RANKS_HINT if isinstance(error, NameError) else "")
    if isinstance(run.stopped, checking.Deadlock):
        early = sorted(run.stopped.before_put)
        raise Wrong(f"{where} deadlocked: {run.stopped}.",
                    f"Rank {early[0]} waited before it had put anything: a rank that waits before it puts waits for a "
                    "neighbour doing the same: put first, then wait." if early else
                    "Every rank had put before it waited, and each waits for a put nobody makes: count them. Each put "
                    "needs exactly one wait() on its target, for that sender, and each wait() one put.")
    if run.stopped is not None:
        raise Wrong(f"{where} hung: {run.stopped}.")
    if not run.puts:
        raise NotYet(f"no put yet: your {what} is still the skeleton.")
    overwrite = run.overwrite
    if overwrite is not None and overwrite.put.call == 0:
        raise Wrong(_overwritten(where, overwrite, run.ranks, ring), SLOT_HINT if ring else
                    "Give each rank its own slot in rank 0's stage, (r - 1) x x.nbytes: rank 0 says nothing when it "
                    "has added one.")
    if run.unwaited:
        put = run.unwaited[0]
        raise Wrong(f"{where}: rank {put.target} returned while rank {put.sender}'s {_step(put, run.ranks, ring)} "
                    f"was still on its way to it: nothing waited for its flag, so nothing said its bytes had landed.",
                    "Each put needs one wait() on the rank it goes to: a rank waits for every put made to it.")
    _values(where, run, 0, ring)
    if run.reused:   # (after the sums: a wrong chunk added into the one just sent is named as what it is)
        raise Wrong(_reused(where, run.reused[0], run.ranks, ring), REUSE_HINT)
    if overwrite is not None:
        said = _overwritten(where, overwrite, run.ranks, ring)
        raise Wrong(f"Called a second time, as a training loop calls it: {said}", SLOT_HINT if ring else "")
    _values(where, run, 1, ring)
    if ring:
        _ring_shape(where, run)


def _values(where, run, call, ring):
    """Wrong if a rank's result in `call` is not the sum, saying why where the puts tell it."""
    expected = run.expected[call]
    wrong = {rank: wrong_elements(got, expected, run.magnitude[call], run.ranks)
             for rank, got in enumerate(run.results[call]) if got is not None}
    if not any(off.any() for off in wrong.values()):
        first = run.results[call][0]
        for rank, got in enumerate(run.results[call]):
            if got is not None and first is not None and got.tobytes() != first.tobytes():
                i = int(np.flatnonzero(got.view(np.uint8).reshape(-1, run.dtype.itemsize).any(axis=1)
                                       & (got != first))[0]) if (got != first).any() else 0
                raise Wrong(f"{where}: every rank has the sum, but rank {rank}'s differs from rank 0's in the last "
                            f"bits (element {i}: {got[i]!r} against {first[i]!r}): the ranks added in different orders. "
                            "Replicas that differ drift apart step after step (lesson 07): each chunk must be summed "
                            "once, by one rank, and copied to the others.")
        return
    said = _ring_mistake(run, call) if ring else None   # first what its puts show: it may explain the poison too
    if said:
        raise Wrong(f"{where}: {said}")
    for rank, got in enumerate(run.results[call]):
        poisoned = np.isnan(got) if run.dtype.kind == "f" else np.abs(got.astype(np.int64) - expected) > 1 << 24
        if poisoned.any():
            n = int(poisoned.sum())
            raise Wrong(f"{where}: rank {rank}'s result holds {n} poisoned element{'s' if n > 1 else ''}: bytes used "
                        f"before their flag had landed. Until a put's flag lands (the wait() for it returns), this "
                        f"check's transport fills its bytes with poison ({checking.POISON[run.dtype.name]}), as a "
                        f"real NIC may have written none, some or all of them.", FLAG_HINT)
    if ring:
        raise Wrong(f"{where}: each rank sends the right chunks, but what arrives is added to the wrong one: in "
                    f"step s the chunk arriving from the left neighbour l is its chunk (l - s) % p, that is "
                    f"(r - s - 1) % p.")
    ranks = [rank for rank, off in wrong.items() if off.any()]
    i = int(np.flatnonzero(wrong[ranks[0]])[0])
    raise Wrong(f"{where}: the sums are wrong on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: "
                f"rank {ranks[0]}'s element {i} is {run.results[call][ranks[0]][i]}, and the sum is {expected[i]:g}.")


def _reused(where, reused, p, ring):
    put = reused.put
    when = ("after it returned (the caller writes new values into x then)" if reused.call is None
            or reused.call > put.call else "in the same call")
    return (f"{where}: rank {put.sender} changed the bytes its {_step(put, p, ring)} sent ({put.source[0]} bytes "
            f"{put.source[1]} to {put.source[1] + put.hi - put.lo}) {when}, before flush() and before anything told it "
            f"the put had landed: the NIC may not have read them yet, so rank {put.target} could get the new bytes.")


def _bounds(run):
    return np.linspace(0, run.count, run.ranks + 1).astype(int)


def _step(put, p, ring):
    """A put as the learner thinks of it: its step, for the ring (its puts in the order the reference makes them)."""
    if not ring:
        return "put"
    phase, s = ("reduce-scatter", put.index) if put.index < p - 1 else ("all-gather", put.index - (p - 1))
    return f"put of {phase} step {s}"


def _overwritten(where, overwrite, p, ring):
    put, old = overwrite.put, overwrite.old
    return (f"{where}: rank {put.sender}'s {_step(put, p, ring)} landed on bytes {put.lo} to {put.hi} of rank "
            f"{put.target}'s {put.region} before rank {put.target} had used what rank {old.sender}'s "
            f"{_step(old, p, ring)} left there: nothing rank {put.sender} had heard said it had. Run at another pace, "
            f"those bytes are lost before they are added.")


def _chunk(run, put):
    """Which chunk of x a put sent (None: not from x, or not one chunk)."""
    region, offset = put.source
    bounds, size = _bounds(run), run.dtype.itemsize
    for c in range(run.ranks):
        if region == "data" and (offset, put.hi - put.lo) == (bounds[c] * size, (bounds[c + 1] - bounds[c]) * size):
            return c
    return None


def _ring_mistake(run, call):
    """What a ring whose sums are wrong did differently from the ring, by its puts (None if they look right)."""
    p, bounds, size = run.ranks, _bounds(run), run.dtype.itemsize
    puts = [put for put in run.puts if put.call == call and put.region is not None]
    for put in puts:
        if put.source[0] == "stage":
            return (f"in its {_step(put, p, True)}, rank {put.sender} sent what it had received (bytes of its "
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
                            f"(r - s) % p, here {(r - i) % p}: its own, with what arrived in step s - 1 added to it.")
                continue
            s = i - (p - 1)
            want = (r + 1 - s) % p
            if got != want:
                return (f"in all-gather step {s}, rank {r} sent {what}; in step s a rank sends chunk (r + 1 - s) % p, "
                        f"here {want}: finished here, by the reduce-scatter (s = 0) or by the all-gather's step s - 1.")
            if (put.region, put.lo) != ("data", bounds[want] * size):
                return (f"in all-gather step {s}, rank {r} put chunk {want} at byte {put.lo} of rank {put.target}'s "
                        f"{put.region}; it belongs in its x, at byte bounds[c] x itemsize ({bounds[want] * size}), "
                        f"where that chunk lives.")
    return None


def _ring_shape(where, run):
    """Wrong if the sums are right but the bytes did not move as a ring moves them."""
    p, size = run.ranks, run.dtype.itemsize
    most = 2 * (p - 1) * int(max(np.diff(_bounds(run)))) * size
    for r in range(p):
        sent = [put for put in run.puts if put.sender == r and put.call == 0 and put.region is not None]
        peers = sorted({put.target for put in sent})
        if len(peers) > 1:
            raise Wrong(f"{where}: the sums are right, but rank {r} put to ranks {', '.join(map(str, peers))}: in a "
                        f"ring each rank writes to one neighbour only, so every link carries the same bytes.")
        if sum(put.hi - put.lo for put in sent) > most:
            raise Wrong(f"{where}: the sums are right, but rank {r} sent {sum(put.hi - put.lo for put in sent)} "
                        f"bytes; a ring sends 2 (p - 1) chunks, here at most {most} bytes.")
