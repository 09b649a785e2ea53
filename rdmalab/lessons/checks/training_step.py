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
bucket not waited for, a wait during backward, or a bucket launched later than it could have been (no overlap)."""
import random

from rdmalab.allreduce import training
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

# parameter sizes in bytes (W1, b1, W2, b2, ...) of models the check tries: the lesson's, and odd ones
MODELS = [[p.nbytes for p in training.init(training.layer_sizes(w, d))] for w, d in ((192, 4), (64, 2), (300, 3))]
CAPS = (128 << 10, 64 << 10, 1 << 20)
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
    for sizes in MODELS:
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
