"""The PyTorch lesson (in-pytorch): its exercise, DDP's communication hook written by the learner, and the reference
(rdmalab.allreduce.ddp.ring_hook). Needs PyTorch: without it the check says how to add it.

The learner writes my_hook(state, bucket), which DDP calls with each bucket of gradients (bucket.buffer(): one flat
tensor) and which returns a torch.futures.Future holding the bucket's gradients averaged over the ranks;
state.comm is the rank's Communicator, state.ring(comm, x) the ring (it sums x over the ranks, in place, where x
lies in the registered region: state.comm.buffer(n)). The check calls the hook on 2 and 3 simulated ranks (a
thread each; their ring adds the ranks' arrays), with buckets of several sizes, and names the first mistake: no
Future, a Future never completed, a ring run on memory the NIC has not registered, the sum where DDP needs the
mean, a rank's own gradients handed back, ranks that disagree in a bit.

in-pytorch.landing-cost: the landing experiment's figure, written by the learner: my_cost(alone, landing, landed_Bps),
rank 0's training steps per second alone and while a stream lands landed_Bps bytes a second in its memory, gives the
milliseconds of rank 0's compute lost per GB (1e9 bytes) landed: 1e3 (1 - landing / alone) / (landed_Bps / 1e9). The
check gives it made-up rates (one with landing faster than alone, as noise makes RDMA's) and names each slip whose
figure the learner's matches: the share kept for the share lost, alone/landing - 1 (longer per step, not lost per
second), time lost per step or steps lost per second, a negative figure clamped to 0, and the units (seconds, per
byte, per MB, per GiB). Needs no PyTorch."""
import threading

import numpy as np

from rdmalab.allreduce.ddp import HookState
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

INSTALL = ("PyTorch is not installed here: pip install torch (CPU wheels: pip install torch --index-url "
           "https://download.pytorch.org/whl/cpu), restart the kernel and run the lesson again. The lesson goes on "
           "without it.")
CASES = [(2, (7, 4096)), (3, (1003, 10))]   # (ranks, bucket sizes in elements): 1003 is not divided by 3


class SimulatedComm:
    """One simulated rank's Communicator, as far as a hook sees it: rank, size, buffer(n) (its registered region)."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size
        self.region = np.zeros(1 << 14, np.float32)

    def buffer(self, count, dtype="float32"):
        if count * np.dtype(dtype).itemsize > self.region.nbytes:
            raise ValueError(f"{count} x {dtype} does not fit the {self.region.nbytes}-byte data region")
        return self.region.view(np.uint8)[:count * np.dtype(dtype).itemsize].view(dtype)


class SimulatedRing:
    """The ranks' ring: every rank's array summed (in rank order: the same bits on every rank), each rank's in place.
    A rank whose hook has returned for its last bucket has `left`: a ring call it never joins fails at once."""

    def __init__(self, size):
        self.size, self.calls, self.arrived, self.left = size, [0] * size, {}, set()
        self.changed = threading.Condition()

    def __call__(self, comm, x):
        if not isinstance(x, np.ndarray) or not np.shares_memory(x, comm.region):
            raise Wrong(f"rank {comm.rank} ran the ring on memory outside its registered region: the NIC can read "
                        "and write only registered memory (an RDMA WRITE from elsewhere fails, lesson 02).",
                        "Copy the gradients into work = state.comm.buffer(n), run state.ring(state.comm, work) on it, "
                        "and copy the sums back.")
        with self.changed:
            self.calls[comm.rank] += 1
            here = self.arrived.setdefault(self.calls[comm.rank], {})
            here[comm.rank] = x.copy()
            self.changed.notify_all()
            self.changed.wait_for(lambda: len(here) == self.size or self.left, timeout=10)
            if len(here) < self.size:
                raise Stuck()
            total = sum(here[r] for r in sorted(here))
        x[:] = total

    def leave(self, rank):
        with self.changed:
            self.left.add(rank)
            self.changed.notify_all()


class Stuck(Exception):
    """A rank waited in the ring for a rank that never came."""


class Bucket:
    """What a hook reads of DDP's GradBucket: buffer() (the bucket's gradients, flat), index(), is_last()."""

    def __init__(self, tensor, index, last):
        self._tensor, self._index, self._last = tensor, index, last

    def buffer(self):
        return self._tensor

    def index(self):
        return self._index

    def is_last(self):
        return self._last


@exercise("in-pytorch.hook", "DDP's communication hook, your ring inside",
          hints=["grads = bucket.buffer(); work = state.comm.buffer(grads.numel()); copy grads.numpy() into work; "
                 "state.ring(state.comm, work); copy work back into grads divided by state.comm.size; return a "
                 "torch.futures.Future whose result you set to grads."])
def _check_hook(my_hook):
    try:
        import torch
    except ImportError:
        raise NotYet(INSTALL, "Add PyTorch, or go on: the lesson runs its reference hook where PyTorch is.")
    if not callable(my_hook):
        raise Wrong("answer with your function, as the cell does: lambda: my_hook.")
    for p, sizes in CASES:
        ring = SimulatedRing(p)
        grads = [[torch.from_numpy(np.random.default_rng(100 * r + k).standard_normal(n).astype(np.float32))
                  for k, n in enumerate(sizes)] for r in range(p)]
        results, errors = {}, {}

        def rank(r):
            comm = SimulatedComm(r, p)
            try:
                for k, g in enumerate(grads[r]):
                    results[r, k] = my_hook(HookState(comm, ring), Bucket(g.clone(), k, k == len(sizes) - 1))
            except BaseException as error:   # (told below, naming the rank)
                errors[r] = error
            ring.leave(r)

        threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(p)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        _judge(torch, p, sizes, grads, results, errors, ring.calls)


def _judge(torch, p, sizes, grads, results, errors, calls):
    wrong = [e for e in errors.values() if isinstance(e, (Wrong, NotYet))]
    if wrong:
        raise wrong[0]
    if errors:
        r, error = min(errors.items())
        if isinstance(error, NotImplementedError):
            raise NotYet()
        if isinstance(error, Stuck):
            ran = ", ".join(f"rank {q} {n} time{'s' if n != 1 else ''}" for q, n in enumerate(calls))
            raise Wrong(f"on {p} ranks with {len(sizes)} buckets, the ranks ran the ring unequally ({ran}): a rank "
                        "that skips a bucket leaves the others waiting for it (a real ring hangs).",
                        "Run state.ring once for every bucket, on every rank.")
        raise Wrong(f"on {p} ranks, rank {r}'s hook raised {type(error).__name__}: {error}")
    for k, n in enumerate(sizes):
        mean = sum(g[k].numpy().astype(np.float64) for g in grads) / p
        own = None
        for r in range(p):
            got = results.get((r, k))
            if got is None:
                raise NotYet("your hook returned None: return a torch.futures.Future holding the averaged gradients.")
            if not isinstance(got, torch.futures.Future):
                raise Wrong(f"your hook returned a {type(got).__name__}, not a torch.futures.Future: DDP waits on "
                            "the future of every bucket, then reads its value.",
                            "done = torch.futures.Future(); done.set_result(grads); return done")
            if not got.done():
                raise Wrong("your hook returned a Future nobody completed: DDP would wait for it forever at the end "
                            "of backward.", "Set its result (done.set_result(grads)) once the ring has finished.")
            value = got.value()
            value = value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value
            if not isinstance(value, torch.Tensor) or value.numel() != n:
                raise Wrong(f"your Future's value is {type(value).__name__}"
                            f"{f' of {value.numel()} elements' if isinstance(value, torch.Tensor) else ''}, not the "
                            f"bucket's {n} gradients as a tensor: DDP copies it into the parameters' .grad.")
            got_np = value.detach().numpy().astype(np.float64).reshape(-1)
            if np.array_equal(got_np, grads[r][k].numpy().astype(np.float64)):
                raise Wrong(f"rank {r}'s future holds its own gradients, not the ranks' average: the ring's sums never "
                            "reached the tensor you returned.", "Copy the summed work back into grads (grads.copy_("
                            "torch.from_numpy(work))) before you divide and return it.")
            if np.allclose(got_np, mean * p, rtol=1e-5, atol=1e-6):
                raise Wrong(f"rank {r}'s future holds the sum over the {p} ranks, not their mean: DDP's own hook "
                            "divides by the number of ranks, so the step would be p times too long (the same as a "
                            "learning rate p times too high).", "Divide by state.comm.size.")
            if not np.allclose(got_np, mean, rtol=1e-5, atol=1e-6):
                worst = int(np.argmax(np.abs(got_np - mean)))
                raise Wrong(f"rank {r}'s averaged gradients differ from the ranks' mean: element {worst} of bucket "
                            f"{k} is {got_np[worst]:.6g}, the mean is {mean[worst]:.6g}.")
            if own is None:
                own = got_np
            elif not np.array_equal(got_np, own):
                raise Wrong(f"rank {r}'s averaged gradients differ from rank 0's in the last bits: the replicas would "
                            "drift apart. Every rank must divide the same sum in the same way.")


@reference("in-pytorch.hook")
def _hook():
    from rdmalab.allreduce.ddp import ring_hook
    return ring_hook


# --- in-pytorch.landing-cost ----------------------------------------------------------------------------------------

# (alone, landing) steps per second and bytes landed per second: made-up rates, as the lesson's stream gives them
LANDING = [(50.0, 40.0, 2e9), (80.0, 20.0, 0.5e9), (60.0, 60.6, 3e9)]
RATES = {   # a figure made from the rates, rightly or as a slip does: lost compute (s a second), before the units
    "right": lambda a, l: 1 - l / a,
    "kept": lambda a, l: l / a,
    "inverted": lambda a, l: a / l - 1,
    "per step": lambda a, l: 1 / l - 1 / a,
    "steps": lambda a, l: a - l,
    "clamped": lambda a, l: max(0.0, 1 - l / a),
}
SAID = {
    "kept": "landing / alone is the share of its speed rank 0 kept; what it lost is 1 - landing / alone",
    "inverted": ("alone / landing - 1 is how much longer a step took than alone; the stream's bytes are counted per "
                 "second of the stream, and in each of those seconds rank 0 lost 1 - landing / alone of a second"),
    "per step": ("1/landing - 1/alone is the time lost per step; per second of the stream rank 0 ran landing steps, "
                 "so it lost 1 - landing / alone of a second"),
    "steps": ("alone - landing is steps lost per second, not seconds: each step took 1/alone s, so the time lost is "
              "(alone - landing) / alone = 1 - landing / alone"),
    "clamped": ("the figure was clamped at 0, but where landing came out faster than alone (noise) the figure is "
                "negative: show it as measured, so its sign tells the noise"),
}
UNITS = {1.0: "", 1e-3: "seconds, not milliseconds", 1e-9: "per byte, not per GB (1e9 bytes)",
         1e-12: "seconds per byte, not milliseconds per GB",
         1e-6: "per MB, not per GB", 1e3: "microseconds, not milliseconds", 2 ** 30 / 1e9: "per GiB (2**30 bytes), "
         "not per GB (1e9 bytes)"}
COST_HINT = ("lost = 1 - landing / alone is the share of each second rank 0 did not compute; divide by the GB that "
             "landed in that second (landed_Bps / 1e9) and multiply by 1000 for milliseconds.")


def landing_cost(alone, landing, landed_Bps, rate="right", unit=1.0):
    """Milliseconds of compute lost per GB landed, or what slip `rate` (a key of RATES) and a `unit` factor make."""
    return unit * 1e3 * RATES[rate](alone, landing) / (landed_Bps / 1e9)


def _close_all(got, made):
    return all(abs(g - m) <= 1e-6 * max(abs(m), 1e-12) for g, m in zip(got, made))


@exercise("in-pytorch.landing-cost", "What a GB that lands costs the computing rank",
          hints=["What share of each second did rank 0 not compute? Then per GB that landed in that second."])
def _check_landing_cost(my_cost):
    if not callable(my_cost):
        raise Wrong("answer with your function, as the cell does: lambda: my_cost.")
    got = []
    for alone, landing, landed in LANDING:
        try:
            value = my_cost(alone, landing, landed)
        except NotImplementedError:
            raise NotYet() from None
        except Exception as error:
            raise Wrong(f"your function raised {type(error).__name__}: {error}", COST_HINT) from None
        if value is None:
            raise NotYet("my_cost returned None: return the milliseconds of compute lost per GB landed.")
        try:
            got.append(float(value))
        except (TypeError, ValueError):
            raise Wrong(f"return one number, milliseconds per GB; got {value!r}.") from None
    right = [landing_cost(*case) for case in LANDING]
    if _close_all(got, right):
        return
    k = next(k for k in range(len(LANDING)) if not _close_all(got[k:k + 1], right[k:k + 1]))   # the first it gets wrong
    alone, landing, landed = LANDING[k]
    where = (f"Rank 0 ran {alone:g} steps/s alone and {landing:g} while {landed / 1e9:g} GB/s landed"
             f"{' (faster: noise)' if landing > alone else ''}: it lost {right[k]:.4g} ms of compute per GB; your "
             f"function says {got[k]:.4g}: ")
    for rate in RATES:
        for unit, unit_said in UNITS.items():
            if (rate, unit) != ("right", 1.0) and _close_all(got, [landing_cost(*c, rate, unit) for c in LANDING]):
                said = "; and ".join(x for x in (SAID.get(rate, ""), unit_said) if x)
                raise Wrong(where + said + ".", COST_HINT)
    raise Wrong(where + "that is not what the rates make.", COST_HINT)


@reference("in-pytorch.landing-cost")
def _landing_cost():
    def my_cost(alone, landing, landed_Bps):
        lost = 1 - landing / alone   # the share of each second rank 0 did not compute
        return 1e3 * lost / (landed_Bps / 1e9)
    return my_cost
