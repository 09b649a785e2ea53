"""The training-step lesson (training-step): its exercise, DDP's overlap written by hand, and the reference
(rdmalab.allreduce.training's ddp_buckets, launch_in_order and wait_for_all).

The learner writes three functions: my_buckets(sizes, cap) groups the parameters into buckets as DDP does;
my_on_gradient(state, i) runs as backward makes gradient i final and may start buckets' AllReduces
(state.launch(b)); my_before_update(state) runs once backward is over and waits (state.wait(b)) for what the
optimizer step needs. The check runs them on simulated ranks whose gradients become final in slightly different
orders (as autograd's threads make them on real ranks), with no timing involved: it records every launch and
wait, then names the first mistake a learner would fix: a parameter in no bucket or in two, buckets not in
DDP's order or over the cap, a bucket launched before its gradients were final, launched twice or never, ranks
launching buckets in different orders (their AllReduces would pair unlike buckets, or hang), the update reading a
bucket not waited for, a wait during backward, or a bucket launched later than it could have been (no overlap).

training-step.replicas: the learner's my_drifts(replicas) names every (rank, parameter) whose parameter is not rank
0's, bit for bit: the check the lesson's runs make after every step (lessons.training.replicas_agree). The check
gives it replicas it has changed in known places, each as a plausible mistake would miss it: by one unit in the last
place (a tolerance, np.allclose, lets it through), by one weight's sign (a norm, a sum of squares, is unchanged), in
a later layer (only the first layer compared), several at once (stopped at the first), the same on two ranks (each
rank compared with its neighbour, not with rank 0); and replicas that agree (a drift reported where there is none).
"""
import random

import numpy as np

from rdmalab.allreduce import training
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

# parameter sizes in bytes (W1, b1, W2, b2, ...) of models the check tries: the lesson's, and odd ones
MODELS = [[p.nbytes for p in training.init(training.layer_sizes(w, d))] for w, d in ((192, 4), (64, 2), (300, 3))]
CAPS = (128 << 10, 64 << 10, 1 << 20)
EXACT = [1000, 64 << 10, 64 << 10]   # two gradients that fill a 128 KiB bucket exactly: it closes there (>=, not >)
ORDER_HINT = ("Launch buckets in index order, each once every one of its gradients is final and every bucket "
              "before it has been launched: then every rank launches the same AllReduces in the same order, "
              "whatever order its own gradients came in.")


class Simulated:
    """The state the hooks see on one simulated rank, recording what they do."""

    def __init__(self, buckets, rank):
        self.buckets, self.rank = buckets, rank
        self.final, self.launched, self.events = set(), [], []
        self.in_backward = True
        self.reduced = set()   # buckets whose AllReduce finished (only ever by wait(): no timing)

    def launch(self, b):
        if not 0 <= b < len(self.buckets):
            raise Wrong(f"rank {self.rank} launched bucket {b}: the buckets are 0 to {len(self.buckets) - 1}.")
        early = [i for i in self.buckets[b] if i not in self.final]
        if early:
            raise Wrong(f"rank {self.rank} launched bucket {b} before gradient {early[0]} was final: its AllReduce "
                        "would sum a gradient backward had not finished.",
                        "Count a bucket's final gradients; launch it when all of them are in.")
        if b in self.launched:
            raise Wrong(f"rank {self.rank} launched bucket {b} twice: its gradients would be summed twice (each "
                        "of them p times too large).", "Keep which buckets you launched (state.launched).")
        self.launched.append(b)
        self.events.append(("launch", b, len(self.final)))

    def wait(self, b):
        if b not in self.launched:
            raise Wrong(f"rank {self.rank} waited for bucket {b}, which it never launched: it would wait forever.")
        if self.in_backward:
            raise Wrong(f"rank {self.rank} waited for bucket {b} during backward: backward stops until that AllReduce "
                        "ends, so nothing overlaps.", "Wait only in my_before_update, once backward is over.")
        self.reduced.add(b)
        self.events.append(("wait", b, len(self.final)))


def _orders(sizes, rank, rng):
    """The order rank `rank`'s gradients become final: backward's, last layer first, with each layer's weights and
    bias swapped on some ranks and now and then a gradient finishing after its earlier neighbour."""
    order = []
    for i in range(len(sizes) - 2, -1, -2):
        order += [i + 1, i] if (rank + i // 2) % 2 else [i, i + 1]
    for k in range(len(order) - 1):
        if rank and rng.random() < 0.3:
            order[k], order[k + 1] = order[k + 1], order[k]
    return order


@exercise("training-step.overlap", "DDP's buckets, and where the step waits",
          hints=["my_buckets: walk the parameters from the last to the first, closing a bucket once it holds cap "
                 "bytes or more. my_on_gradient: launch buckets in index order, each when all its gradients are in "
                 "state.final. my_before_update: state.wait(b) for every bucket."])
def _check_overlap(answer):
    if not (isinstance(answer, tuple) and len(answer) == 3 and all(callable(fn) for fn in answer)):
        raise Wrong("answer with your three functions, as the cell does: lambda: (my_buckets, my_on_gradient, "
                    "my_before_update).")
    my_buckets, on_gradient, before_update = answer
    for sizes in MODELS + [EXACT]:
        for cap in CAPS:
            _judge_buckets(my_buckets(list(sizes), cap), sizes, cap)
    rng = random.Random(7)
    for sizes in MODELS:
        buckets = training.ddp_buckets_of_sizes(sizes, CAPS[0])
        per_rank = [_one_rank(buckets, sizes, rank, rng, on_gradient, before_update) for rank in range(3)]
        orders = [tuple(s.launched) for s in per_rank]
        if len(set(orders)) > 1:
            raise Wrong(f"the ranks launched their buckets in different orders ({'; '.join(f'rank {r}: {list(o)}' for r, o in enumerate(orders))}): "
                        "AllReduces pair up in the order ranks start them, so rank 0's bucket would be summed "
                        "with rank 1's other bucket, or hang waiting for a size that never comes.", ORDER_HINT)


def _judge_buckets(buckets, sizes, cap):
    if buckets is None:
        raise NotYet("my_buckets returned None.")
    if not list(buckets):   # (the skeleton: it returns its empty list)
        raise NotYet("my_buckets returned no bucket.")
    flat = [i for bucket in buckets for i in bucket]
    for i in range(len(sizes)):
        if flat.count(i) == 0:
            raise Wrong(f"parameter {i} is in no bucket: its gradient would never be summed, and the replicas drift.")
        if flat.count(i) > 1:
            raise Wrong(f"parameter {i} is in {flat.count(i)} buckets: its gradient would be summed more than once.")
    if flat != list(reversed(range(len(sizes)))):
        raise Wrong(f"the buckets hold the parameters in the order {flat}: DDP fills them in reverse, last layer "
                    "first, the order backward makes them final, so that the first bucket is ready first.")
    for b, bucket in enumerate(buckets):
        held = sum(sizes[i] for i in bucket)
        if not bucket:
            raise Wrong(f"bucket {b} is empty.")
        if held - sizes[bucket[-1]] >= cap:
            raise Wrong(f"bucket {b} holds {held} bytes with a {cap}-byte cap: it should have closed before "
                        f"parameter {bucket[-1]}.", "Close a bucket as soon as it holds cap bytes or more.")
        if b < len(buckets) - 1 and held < cap:
            raise Wrong(f"bucket {b} closed at {held} bytes, under the {cap}-byte cap: buckets that small cost an "
                        "AllReduce's fixed cost each (its alpha).", "Close a bucket only once it holds cap bytes.")


def _one_rank(buckets, sizes, rank, rng, on_gradient, before_update):
    state = Simulated(buckets, rank)
    for i in _orders(sizes, rank, rng):
        state.final.add(i)
        on_gradient(state, i)
        due = training.launchable(state)
        if len(state.launched) < due and sorted(state.launched) == state.launched:
            b = len(state.launched)
            raise Wrong(f"rank {rank} left bucket {b} waiting: its gradients were all final (and every bucket before "
                        f"it had gone) when gradient {i} came, but it did not start then, so its AllReduce could not "
                        "overlap the rest of backward.",
                        "Launch a bucket from my_on_gradient as soon as its last gradient is final and every bucket "
                        "before it has gone.")
    state.in_backward = False
    before_update(state)
    for b in range(len(buckets)):
        if b not in state.launched:
            raise Wrong(f"rank {rank} never launched bucket {b}: its gradients would stay rank-local and the "
                        "replicas drift apart.", "Launch every bucket once its gradients are final.")
        if b not in state.reduced:
            raise Wrong(f"rank {rank} updated its parameters without waiting for bucket {b}: nothing says its "
                        "AllReduce has finished (that a later bucket's has is an accident of one queue), so the "
                        "update may read half-summed gradients.",
                        "In my_before_update, state.wait(b) for every bucket.")
    return state


@reference("training-step.overlap")
def _overlap():
    return training.ddp_buckets_of_sizes, training.launch_in_order, training.wait_for_all


# --- training-step.replicas ----------------------------------------------------------------------------------------

RANKS = 4
TOLERANCE = ("a tolerance (np.allclose, np.isclose, a largest difference under some epsilon) lets that through, and "
             "SGD grows such a difference step by step until the ranks train different models: replicas must be "
             "identical bit for bit (np.array_equal)")
SUMMARY = ("its norm and its sum of squares are rank 0's: compare every element (np.array_equal), not a number that "
           "sums the parameter up")


def _replicas():
    """RANKS identical replicas of a small model (W1, b1, ... W4, b4), its biases non-zero as after training."""
    params = training.init(training.layer_sizes(32, 3), seed=3)
    rng = np.random.default_rng(4)
    for b in params[1::2]:
        b[:] = rng.standard_normal(b.shape).astype(np.float32) * 0.1
    return [[p.copy() for p in params] for _ in range(RANKS)]


def _ulp(p):
    flat = p.reshape(-1)
    flat[5] = np.nextafter(flat[5], np.float32(np.inf), dtype=np.float32)


def _sign(p):
    flat = p.reshape(-1)
    k = int(np.argmax(np.abs(flat)))
    flat[k] = -flat[k]


def _nudge(p):
    p.reshape(-1)[3] += np.float32(1e-3)


# each case: (what it is, {(rank, parameter): how it is changed}); the mistakes it tells apart are named in _missed
CASES = [
    ("agree", {}),
    ("sign", {(1, 0): _sign}),   # (before "ulp": a norm may miss one ulp too, and is named here for what it is)
    ("ulp", {(1, 0): _ulp}),
    ("later layer", {(1, 6): _nudge}),
    ("several", {(1, 0): _nudge, (1, 4): _nudge, (3, 2): _nudge}),
    ("two ranks alike", {(2, 3): _nudge, (3, 3): _nudge}),
]


def _made(changes):
    replicas = _replicas()
    for (r, i), change in changes.items():
        change(replicas[r][i])
    return replicas


def _found(fn, replicas):
    """What the learner's function reports, as a set of (rank, parameter); None while it is the skeleton."""
    try:
        got = fn([[p.copy() for p in ps] for ps in replicas])
    except NotImplementedError:
        raise NotYet() from None
    except ValueError as error:
        if "truth value of an array" in str(error):
            raise Wrong("your function compared two arrays with == or != inside an if: numpy compares them element "
                        "by element, and an array of booleans is neither true nor false.",
                        "np.array_equal(a, b) is True when the two arrays are equal in every element.") from None
        raise Wrong(f"your function raised ValueError: {error}") from None
    except Exception as error:
        raise Wrong(f"your function raised {type(error).__name__}: {error}") from None
    if got is None:
        return None
    try:
        pairs = {(int(r), int(i)) for r, i in got}
    except (TypeError, ValueError):
        raise Wrong(f"return a list of (rank, parameter) pairs, as [(1, 0), (3, 2)]; got {got!r}.") from None
    return pairs


def _place(r, i):
    kind = "weights" if i % 2 == 0 else "biases"
    return f"rank {r}'s parameter {i} (layer {i // 2 + 1}'s {kind})"


def _missed(kind, r, i, got):
    """Why a function would miss (r, i) in case `kind`: a sentence naming the mistake."""
    if kind == "ulp":
        return (f"it missed {_place(r, i)}, which differs from rank 0's by one unit in the last place: {TOLERANCE}. "
                "(A sum or a mean of the parameter misses it too.)")
    if kind == "sign":
        return f"it missed {_place(r, i)}, one of whose weights has its sign flipped: {SUMMARY}."
    if kind == "later layer":
        return (f"it missed {_place(r, i)}, the last layer's weights: compare every parameter of every rank, not only "
                "the first layer's.")
    if kind == "several" and len(got) == 1:
        return (f"it found {_place(*next(iter(got)))} and stopped there, missing {_place(r, i)}: keep going after "
                "the first drift, so the message names every replica and parameter that drifted.")
    if kind == "several" and any(q == r and j < i for q, j in got):
        return (f"it found rank {r}'s first drifting parameter and stopped there, missing {_place(r, i)}: keep going "
                "after a rank's first drift, so the message names every parameter that drifted.")
    if r > 1 and got and all(q == 1 for q, _ in got):
        return (f"it missed {_place(r, i)}: it compared rank 1 only. Compare every rank with rank 0.")
    if kind == "two ranks alike":
        return (f"it missed {_place(r, i)}: it is the same as rank {r - 1}'s, but both differ from rank 0's. "
                "Compare every rank with rank 0, the one reference, not with the rank before it.")
    return f"it missed {_place(r, i)}, which differs from rank 0's."


@exercise("training-step.replicas", "Every replica bit-identical: the check, written by you",
          hints=["Compare replicas[r][i] with replicas[0][i] bit for bit (np.array_equal), for every parameter i; "
                 "note each (r, i) that differs, and go on."])
def _check_replicas(my_drifts):
    if not callable(my_drifts):
        raise Wrong("answer with your function, as the cell does: lambda: my_drifts.")
    results = [(kind, changes, _found(my_drifts, _made(changes))) for kind, changes in CASES]
    if any(got is None for *_, got in results):
        raise NotYet("my_drifts returned None: return the list of (rank, parameter) that differ ([] if none do).")
    if not any(got for kind, _, got in results):
        raise NotYet("your function found no drift, not even a weight 0.001 off rank 0's.")
    for kind, changes, got in results:
        if any(r == 0 for r, _ in got):
            raise Wrong(f"it reported rank 0 ({sorted(got)}): rank 0 is the replica the others are compared with, so "
                        "it cannot drift from itself.", "Start at rank 1.")
        extra = sorted(got - set(changes))
        behind = [(r, i) for r, i in extra if (r - 1, i) in changes]
        if behind:
            r, i = behind[0]
            raise Wrong(f"it reported {_place(r, i)}, which is rank 0's bit for bit: it differs only from rank {r - 1}'s, "
                        "which drifted. Compare every rank with rank 0, the one reference, not with the rank before it.")
        if extra:
            where = "replicas that all agree" if not changes else f"replicas changed only at {sorted(changes)}"
            raise Wrong(f"on {where}, it reported {_place(*extra[0])}, which is rank 0's bit for bit.")
    for kind, changes, got in results:
        missed = sorted(set(changes) - got)
        if missed:
            raise Wrong("On replicas the check changed, " + _missed(kind, *missed[0], got))


@reference("training-step.replicas")
def _drifts():
    def my_drifts(replicas):
        import numpy as np
        drifts = []
        for r in range(1, len(replicas)):
            for i, (mine, ref) in enumerate(zip(replicas[r], replicas[0])):
                if not np.array_equal(mine, ref):
                    drifts.append((r, i))
        return drifts
    return my_drifts
