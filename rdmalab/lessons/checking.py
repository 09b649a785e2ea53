"""The AllReduce lessons' checking transport (naive-allreduce, allreduce): a learner's AllReduce on p ranks, run as
threads of this process over memory that shows each mistake every time, not only when a real machine's timing
happens to; and the verdict on such a run (Judge), which names the mistake.

    run = checking.run(my_ring, ranks=3, count=7, dtype="float32", seed=1)
    run.results, run.expected, run.errors, run.overwrite, run.stopped, run.puts, run.unwaited, run.sent, run.waited
    checking.check(my_ring, RingJudge("ring"), CASES)   # raises exercises.Wrong (or NotYet) naming the mistake

Each rank gets a Communicator (rdmalab.allreduce.algorithms) over a CheckingTransport, which has the interface
of rdmalab.allreduce.transports (put, signal, wait, flush, buffer), and the learner's function is called twice
in a row, as a training loop calls it. What the transport adds:

- A put's bytes land when its flag does, as late as RDMA allows: when the target's wait() for it returns.
  Until then the target's bytes hold poison (NaN; 0x3f3f3f3f for integers), as they may hold anything on a
  real NIC. A rank that reads a slot before it waits for the slot's flag adds poison, whatever the timing.
- It sees a put land on bytes whose last put the target may not have used yet. A rank uses what landed
  after its wait() returned and before its next call (put, signal, wait or flush); a sender may write
  there again once it has heard of that next call, through puts and signals passed on from rank to rank.
  Vector clocks keep what each rank has heard of every other, so the verdict is the same every run.
- One rank (chosen by the seed) is delayed at random points, so that the threads interleave differently.
- A put's source is read when the NIC reads it: any time until the sender's flush() returns, or until the sender
  has heard (through the vector clocks) that the put has landed (its bytes precede its flag). A rank whose own
  code changes a put's source before either is seen changing it (`run.reused`), whatever the timing.
- A run where every rank waits for another, and none has anything on its way, is a deadlock, named at once.
- Puts and waits are counted per sender, target and call (run.sent, run.waited), so that a missing or extra
  wait() is named where it is, not where its effect shows.
- Bytes that no put ever wrote hold poison too. Poison in a result is then traced (Judge): run again with those
  bytes zeroed, it either stays (bytes used before their flag) or goes (bytes nobody ever put), whatever the timing.
"""
import builtins
import collections
import random
import threading
import time
import types

import numpy as np

from rdmalab.allreduce.algorithms import Communicator, stage_bytes
from rdmalab.allreduce.ranks import wrong_elements
from rdmalab.allreduce.transports import Transport
from rdmalab.lessons.exercises import NotYet, Wrong

POISON = {"float32": np.float32("nan"), "float64": np.float64("nan"), "int32": np.int32(0x3F3F3F3F),
          "int64": np.int64(0x3F3F3F3F3F3F3F3F)}
TIMEOUT_S = 20.0   # a run that takes longer is stuck (a loop that never ends)
DELAY_S = 0.002    # the slow rank sleeps up to this long, at about half of its calls


class Stop(Exception):
    """The run is over (a deadlock, a rank that hung): a rank still waiting stops where it is."""


class Put:
    """One put (or signal: no region, no bytes) from `sender` to `target`, the `index`-th of its call `call`."""

    def __init__(self, sender, target, call, index, region, offset, data, source, clock):
        self.sender, self.target, self.call, self.index, self.region = sender, target, call, index, region
        self.lo, self.hi, self.data = offset, offset + (0 if data is None else data.nbytes), data
        self.source = source      # (region, byte offset) of what was sent, in the sender's memory
        self.clock = clock        # what the sender had heard of every rank when it put
        self.used = None          # the target's clock once it has used the bytes (its first call after they landed)
        self.landed = None        # the target's clock when its wait() made the bytes land


class Fabric:
    """The ranks' memory and what is on its way between them, for one run; every change under one lock."""

    def __init__(self, ranks, region_bytes, dtype, seed, zeroed=None):
        self.p = ranks
        poison = np.full(max(region_bytes.values()) // np.dtype(dtype).itemsize + 1, POISON[dtype])
        self.poison = poison.view(np.uint8)
        self.memory = [{name: self.poison[:n].copy() for name, n in region_bytes.items()} for _ in range(ranks)]
        for (rank, region), mask in (zeroed or {}).items():   # (Run.again: bytes no put wrote, zeroed)
            self.memory[rank][region][mask] = 0
        self.written = [{name: np.zeros(n, bool) for name, n in region_bytes.items()} for _ in range(ranks)]
        self.sent = collections.Counter()     # (sender, target, call): puts and signals
        self.waited = collections.Counter()   # (sender, target, call): the target's wait()s for that sender
        self.clock = [[0] * ranks for _ in range(ranks)]        # clock[a][b]: what a has heard of b's calls
        self.on_the_way = collections.defaultdict(collections.deque)   # (sender, target): puts not yet waited for
        self.unused = [[] for _ in range(ranks)]   # puts into each rank whose bytes it may not have used yet
        self.landed = [[] for _ in range(ranks)]   # what each rank's last wait() made land
        self.puts, self.waiting, self.finished = [], {}, set()
        self.overwrites = []    # every put that landed on bytes not used yet (the run goes on)
        self.unread = [[] for _ in range(ranks)]   # each rank's puts the NIC may not have read yet: neither
                                                   # flushed nor known to have landed
        self.reused = []        # (put, the sender's call that saw its source changed): Reused
        self.current = [None] * ranks                       # each rank's AllReduce call under way
        self.puts_made = collections.Counter()              # (rank, call): puts and signals it made in that call
        self.stopped = None     # why the run stopped: a Deadlock, or a sentence (a rank that hung)
        self.cv = threading.Condition()
        self.slow, self.rng = seed % ranks, random.Random(seed)

    def pause(self, rank):
        """The slow rank sleeps at random points (outside the lock)."""
        if rank == self.slow and self.rng.random() < 0.5:
            time.sleep(self.rng.uniform(0, DELAY_S))

    def call(self, rank, call=None):
        """A call of `rank`'s (under the lock): it has used what its last wait() landed; its clock ticks; and what
        its code did since its last call is seen: a put's source it changed while the NIC might still read it."""
        self._sources_kept(rank, call)
        for put in self.landed[rank]:
            put.used = self.clock[rank][rank] + 1
        self.landed[rank] = []
        self.clock[rank][rank] += 1

    def _fabric_writes(self, rank, region, lo, hi):
        """A peer's put writes rank's bytes lo..hi: a source of rank's own puts there is no longer its code's to
        keep (whether that put could come yet is the overwrite check's to say)."""
        self.unread[rank] = [put for put in self.unread[rank] if put.source[0] != region
                             or not (put.source[1] < hi and lo < put.source[1] + put.data.nbytes)]

    def _sources_kept(self, rank, call):
        still = []
        for put in self.unread[rank]:
            if put.landed is not None and self.clock[rank][put.target] >= put.landed:
                continue   # the sender has heard that it landed: the NIC read it before
            region, at = put.source
            if not np.array_equal(self.memory[rank][region][at:at + put.data.nbytes], put.data):
                self.reused.append(Reused(put, call))
                continue
            still.append(put)
        self.unread[rank] = still

    def put(self, sender, target, call, index, region, offset, data, source):
        with self.cv:
            self.call(sender, call)
            put = Put(sender, target, call, index, region, offset, data, source, list(self.clock[sender]))
            self.current[sender] = call
            self.puts_made[sender, call] += 1
            self.sent[sender, target, call] += 1
            if data is not None and data.nbytes:
                self.written[target][region][put.lo:put.hi] = True
                self._overwrites(put)
                self._fabric_writes(target, region, put.lo, put.hi)
                self.memory[target][region][put.lo:put.hi] = self.poison[put.lo:put.hi]   # not landed yet
                self.unused[target].append(put)
                self.unread[sender].append(put)
            self.puts.append(put)
            self.on_the_way[sender, target].append(put)
            self.cv.notify_all()

    def _overwrites(self, put):
        """Note each put that lands on bytes the target may not have used yet (what the sender had heard
        decides it, not the timing: the same puts every run)."""
        heard = self.clock[put.sender][put.target]
        for old in list(self.unused[put.target]):
            if old.region == put.region and old.lo < put.hi and put.lo < old.hi:
                if old.used is None or heard < old.used:
                    self.overwrites.append(Overwrite(put, old))
                self.unused[put.target].remove(old)

    @property
    def overwrite(self):
        """The first overwrite in the program's order (call, put, sender, target), not in the threads' timing,
        so that a run names the same one however the machine's load interleaved the ranks."""
        key = lambda o: (o.put.call, o.put.index, o.put.sender, o.put.target)   # noqa: E731
        return min(self.overwrites, key=key, default=None)

    def wait(self, rank, peer, call=None):
        with self.cv:
            self.call(rank, call)
            self.current[rank] = call
            self.waiting[rank] = peer
            self.waited[peer, rank, call] += 1
            try:
                while not self.on_the_way[peer, rank]:
                    if self.stopped is not None:
                        raise Stop()
                    if self._deadlocked():
                        before_put = {r for r in self.waiting if not self.puts_made[r, self.current[r]]}
                        self.stopped = Deadlock(dict(self.waiting), set(self.finished), before_put)
                        self.cv.notify_all()
                        raise Stop()
                    self.cv.wait(0.05)
            finally:
                del self.waiting[rank]
            put = self.on_the_way[peer, rank].popleft()
            if put.data is not None:
                self._fabric_writes(rank, put.region, put.lo, put.hi)
                self.memory[rank][put.region][put.lo:put.hi] = put.data   # the flag has landed: so have the bytes
            self.clock[rank] = [max(a, b) for a, b in zip(self.clock[rank], put.clock)]
            put.landed = self.clock[rank][rank]
            self.landed[rank].append(put)

    def _deadlocked(self):
        running = set(range(self.p)) - self.finished
        return all(r in self.waiting and not self.on_the_way[self.waiting[r], r] for r in running)

    def flush(self, rank, call=None):
        with self.cv:
            self.call(rank, call)
            self.unread[rank] = []   # flush() returned: the NIC has read every put's source

    def returned(self, rank, call):
        """The rank's AllReduce returned (its caller may now change x): a call, as far as its sources go."""
        with self.cv:
            self._sources_kept(rank, call)

    def finish(self, rank):
        with self.cv:
            self.call(rank)
            self.finished.add(rank)
            self.cv.notify_all()


class Overwrite:
    """A put that landed on bytes its target may not have used yet (`put`), and the put that landed there before."""

    def __init__(self, put, old):
        self.put, self.old = put, old

    def __str__(self):
        put, old = self.put, self.old
        return (f"rank {put.sender}'s put number {put.index + 1} landed on bytes {put.lo} to {put.hi} of rank "
                f"{put.target}'s {put.region}, where rank {old.sender}'s put number {old.index + 1} had landed, and "
                f"nothing rank {put.sender} had heard said that rank {put.target} had used it yet")


class Reused:
    """A put whose source its sender's own code changed before flush() and before hearing that it had landed."""

    def __init__(self, put, call):
        self.put, self.call = put, call   # call: the sender's AllReduce call in which it was seen (None: in its last)


class Deadlock:
    """Every rank that had not returned was waiting for a rank that had nothing on its way to it."""

    def __init__(self, waiting, finished, before_put=()):
        self.waiting, self.finished = waiting, finished
        self.before_put = set(before_put)   # the ranks that waited before making any put in their call

    def __str__(self):
        who = "; ".join(f"rank {r} waited for rank {peer}" + (" (which had returned)" if peer in self.finished else "")
                        for r, peer in sorted(self.waiting.items()))
        return f"every rank waited for another and none had put anything for it: {who}"


class CheckingTransport(Transport):
    """One rank's side of a Fabric, with the interface of rdmalab.allreduce.transports."""

    def __init__(self, fabric, rank):
        self.fabric, self.rank, self.size = fabric, rank, fabric.p
        self.call, self.index = 0, 0     # which call of the AllReduce this is, and how many puts it has made
        self.messages = 0                # puts and signals sent, waits ended: exchanged()

    def buffer(self, region="data"):
        return self.fabric.memory[self.rank][region]

    def _peer(self, peer):
        """A peer a rank is connected to (a real transport has a queue pair per other rank, and none else)."""
        if not isinstance(peer, (int, np.integer)) or not 0 <= peer < self.size or peer == self.rank:
            raise ValueError(f"rank {self.rank} has no connection to rank {peer!r}: it is connected to every other "
                             f"rank, 0 to {self.size - 1} (wrap a neighbour's number with % p)")
        return int(peer)

    def put(self, peer, src, region, offset, signaled=False):
        peer = self._peer(peer)
        src = src.view(np.uint8).reshape(-1)
        mine = self.fabric.memory[self.rank]
        source = next(((name, src.ctypes.data - view.ctypes.data) for name, view in mine.items()
                       if view.ctypes.data <= src.ctypes.data <= view.ctypes.data + view.nbytes - src.nbytes), None)
        if source is None:
            raise ValueError("put() sends from a registered region only: x, or comm.t.buffer(...)")
        target = self.fabric.memory[peer][region]
        offset = int(offset)
        if offset < 0 or offset + src.nbytes > target.nbytes:
            raise ValueError(f"put of {src.nbytes} bytes at {offset} overflows rank {peer}'s {region} "
                             f"({target.nbytes} bytes)")
        self.fabric.pause(self.rank)
        self.fabric.put(self.rank, peer, self.call, self.index, region, offset, src.copy(), source)   # (what it
        # had when it put: the bytes that land; a later change before flush() is seen as Reused)
        self.index += 1
        self.messages += 1

    def signal(self, peer):
        peer = self._peer(peer)
        self.fabric.pause(self.rank)
        self.fabric.put(self.rank, peer, self.call, self.index, None, 0, None, None)
        self.index += 1
        self.messages += 1

    def wait(self, peer, alive=None):
        peer = self._peer(peer)
        self.fabric.pause(self.rank)
        self.fabric.wait(self.rank, peer, self.call)
        self.fabric.pause(self.rank)
        self.messages += 1

    def exchanged(self):
        return self.messages

    def flush(self):
        self.fabric.flush(self.rank, self.call)   # (nothing to drain: every put's source counts as read from now on)


class LibraryUsed(Exception):
    """The learner's function called the library's AllReduce, which the exercise asks them to write."""


class CheckingCommunicator(Communicator):
    """A Communicator whose allreduce() (the library's) refuses: the exercise's functions are written from put and
    wait."""

    def allreduce(self, x, algorithm="ring", out=None):
        raise LibraryUsed("comm.allreduce")

    allreduce_validated = allreduce


class Run:
    """What one run of a learner's AllReduce did: per call, each rank's result and the expected sum."""

    def __init__(self, ranks, count, dtype):
        self.ranks, self.count, self.dtype = ranks, count, np.dtype(dtype)
        self.inputs, self.results, self.expected, self.magnitude = [], [], [], []
        self.errors = {}      # rank -> the exception its code raised
        self.overwrite = None  # the first Overwrite
        self.stopped = None   # a Deadlock, or a sentence (a rank that hung)
        self.puts = []        # every put and signal, in order
        self.unwaited = []    # puts whose flag the target never waited for
        self.reused = []      # Reused: puts whose source changed while the NIC might still read it
        self.sent = collections.Counter()     # (sender, target, call): puts and signals
        self.waited = collections.Counter()   # (sender, target, call): the target's wait()s for that sender
        self.never_put = {}   # (rank, region): the bytes that no put wrote, in any call
        self.again = None     # again(zeroed={(rank, region): mask}): the same run, those bytes zeroed at the start

    def __str__(self):
        return f"{self.ranks} ranks, {self.count} {self.dtype} elements"


def as_on_the_ranks(fn):
    """A notebook's function as the ranks run it: on an engine it finds none of the notebook's names (ipyparallel
    sends its code, not its globals). Functions of a module keep theirs, as they do there."""
    if getattr(fn, "__module__", None) != "__main__" or not isinstance(fn, types.FunctionType):
        return fn
    return types.FunctionType(fn.__code__, {"__builtins__": builtins}, fn.__name__, fn.__defaults__,
                              fn.__closure__)


def run(fn, ranks, count, dtype, seed=0, calls=2, library=True, zeroed=None):
    """fn(comm, x) on `ranks` threads, `calls` times in a row, each rank's x filled with its own values first.
    library=False: comm.allreduce (the library's AllReduce) refuses, as the exercises' checks want. `zeroed`
    ({(rank, region): byte mask}): bytes that start as zeros instead of poison (Run.again)."""
    dtype = np.dtype(dtype)
    data = count * dtype.itemsize
    regions = {"data": data, "stage": max(stage_bytes(a, ranks, data) for a in ("naive", "ring"))}
    fabric, out = Fabric(ranks, regions, dtype.name, seed, zeroed), Run(ranks, count, dtype)
    out.again = lambda zeroed: run(fn, ranks, count, dtype, seed, calls, library, zeroed)
    values = np.random.default_rng(seed)
    for _ in range(calls):
        terms = [values.integers(-1000, 1000, count).astype(dtype) if dtype.kind == "i"
                 else values.standard_normal(count).astype(dtype) for _ in range(ranks)]
        wide = np.float64 if dtype.kind == "f" else dtype
        out.inputs.append(terms)
        out.expected.append(sum(t.astype(wide) for t in terms))
        out.magnitude.append(sum(np.abs(t.astype(wide)) for t in terms))
        out.results.append([None] * ranks)
    fn = as_on_the_ranks(fn)

    def rank(r):
        t = CheckingTransport(fabric, r)
        comm = Communicator(t) if library else CheckingCommunicator(t)
        x = comm.buffer(count, dtype)
        try:
            for call in range(calls):
                t.call, t.index = call, 0
                x[:] = out.inputs[call][r]
                fn(comm, x)
                out.results[call][r] = x.copy()
                fabric.returned(r, call)
        except Stop:
            pass
        except BaseException as error:   # the learner's code failed: that is the verdict
            out.errors[r] = error
        finally:
            fabric.finish(r)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True, name=f"rank {r}") for r in range(ranks)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    with fabric.cv:
        if stuck and fabric.stopped is None:
            fabric.stopped = f"rank {', '.join(map(str, stuck))} had not returned after {TIMEOUT_S:.0f} s"
        fabric.cv.notify_all()   # a rank still waiting stops
        for r in range(ranks):   # (the caller changes x after the last call too: puts never flushed count)
            fabric.memory[r]["data"][:] = fabric.poison[:fabric.memory[r]["data"].nbytes]
            fabric._sources_kept(r, None)
        out.overwrite, out.stopped, out.puts = fabric.overwrite, fabric.stopped, list(fabric.puts)
        out.reused = sorted(fabric.reused, key=lambda u: (u.put.call, u.put.index, u.put.sender))
        out.sent, out.waited = collections.Counter(fabric.sent), collections.Counter(fabric.waited)
        out.never_put = {(r, name): ~mask for r in range(ranks) for name, mask in fabric.written[r].items()
                         if name != "data"}   # (x is written by its caller: only the stage can hold bytes never put)
        if out.stopped is None:   # (a run that stopped early left puts on their way: they say nothing)
            out.unwaited = [put for queue in fabric.on_the_way.values() for put in queue]
    return out


# ---------------------------------------------------------------- the verdict on a learner's AllReduce

LIBRARY = {"allreduce", "allreduce_validated", "ring_allreduce", "naive_allreduce", "REGISTRY", "ring_plan"}
REUSE_HINT = ("A NIC reads a put's source when it sends it, any time until flush() returns (or until you hear the "
              "put has landed): don't change those bytes before. Call comm.t.flush() before you change what you "
              "put, and before you return, since the caller then writes new gradients into x.")
FLAG_HINT = ("A put's bytes may land in any order, at any time, until its flag has: read a stage slot, or pass a "
             "chunk on, only after wait() for the put that fills it has returned.")
RANKS_HINT = ("The function runs on the ranks, which see none of this notebook's names: import what it needs "
              "(import numpy as np) inside it, and write there what it uses of your other functions.")
SLICE_HINT = ("A slice came out another length than the chunk it should hold: stage offsets are bytes (x.nbytes, "
              "x.itemsize), x's bounds are elements, and a slot must end inside the stage.")
CALLS = ("first", "second", "third", "fourth", "fifth")
# The exercises' cases (ranks, dtype, elements): 7 and 1003 are divided by neither 3 nor 4; 1 leaves chunks empty;
# then 8-byte elements and 5 ranks. The first cases have a chunk for every rank, so the feedback can name chunks.
CASES = [(p, dtype, count) for p in (3, 4, 2) for dtype in ("float32", "int32") for count in (7, 1003, 1)] + \
    [(5, "float64", 1003), (5, "int64", 7), (2, "float64", 7)]


def library_names(fn):
    """The names of the library's AllReduce that fn's code (and the functions defined in it) refers to."""
    names, codes = set(), [getattr(fn, "__code__", None)]
    while codes:
        code = codes.pop()
        if code is not None:
            names |= set(code.co_names) & LIBRARY
            codes += [c for c in code.co_consts if hasattr(c, "co_names")]
    return names


def check(fn, judge, cases):
    """Run the learner's fn on every case (ranks, dtype, elements), each with its own seed; the first thing a run
    shows wrong is raised as Wrong (or NotYet), by `judge` (a Judge)."""
    used = library_names(fn)
    if used:
        raise Wrong(f"your {judge.what} calls the library's AllReduce ({', '.join(sorted(used))}): the exercise is to "
                    "write it yourself, from put and wait.")
    for seed, (p, dtype, count) in enumerate(cases):
        judge(run(fn, p, count, dtype, seed, library=False))


def _times(n):
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def counted(run, sender, target, call):
    """'in the first call, rank 0 put to rank 1 twice, and rank 1 waited for rank 0 once'."""
    return (f"in the {CALLS[call] if call < len(CALLS) else f'call number {call + 1}'} call, rank {sender} put to rank "
            f"{target} {_times(run.sent[sender, target, call])}, and rank {target} waited for rank {sender} "
            f"{_times(run.waited[sender, target, call])}")


def _uneven(run, more):
    """(sender, target, call) of the first pair whose puts exceed its waits (more="puts") or the reverse, else None."""
    keys = sorted(set(run.sent) | set(run.waited), key=lambda k: (k[2], k[1], k[0]))
    for key in keys:
        if (run.sent[key] > run.waited[key]) if more == "puts" else (run.waited[key] > run.sent[key]):
            return key
    return None


class Judge:
    """The verdict on a run of a learner's AllReduce (`what`: "naive AllReduce", "ring"): Wrong, or NotYet, saying
    what the run showed, in the order a learner would fix it. A lesson's subclass names its puts as the lesson
    teaches them (step), says how to give each put bytes of its own (slot_hint) and where to read (read_hint),
    explains wrong sums from its puts (mistake, sums), checks how the bytes moved (shape), and which ranks wait
    before they put by design (waits_first: a deadlock names another)."""
    slot_hint = read_hint = ""
    waits_first = ()   # ranks the algorithm has wait before they put (the naive AllReduce's rank 0)

    def __init__(self, what):
        self.what = what

    def step(self, put, run):
        """A put as the learner thinks of it."""
        return "put"

    def mistake(self, run, call):
        """What the puts show, when the sums of `call` are wrong (before any poison is traced): a sentence, or None."""
        return None

    def sums(self, run, call, wrong):
        """Wrong sums with no poison and no mistake() to name: a sentence. `wrong`: {rank: elements off}."""
        ranks = [rank for rank, off in wrong.items() if off.any()]
        i = int(np.flatnonzero(wrong[ranks[0]])[0])
        return (f"the sums are wrong on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: rank "
                f"{ranks[0]}'s element {i} is {run.results[call][ranks[0]][i]}, and the sum is "
                f"{run.expected[call][i]:g}.")

    def shape(self, run):
        """The sums are right: Wrong if the bytes did not move as the algorithm moves them."""

    def __call__(self, run):
        where = f"your {self.what} (on {run})"
        if run.errors:
            rank, error = min(run.errors.items())
            if isinstance(error, NotImplementedError):
                raise NotYet()
            if isinstance(error, LibraryUsed):
                raise Wrong(f"{where}: rank {rank} called the library's AllReduce ({error}): the exercise is to write "
                            "it yourself, from put and wait.")
            hint = RANKS_HINT if isinstance(error, NameError) else \
                SLICE_HINT if isinstance(error, ValueError) and "broadcast" in str(error) else ""
            raise Wrong(f"{where}: rank {rank} raised {type(error).__name__}: {error}", hint)
        if isinstance(run.stopped, Deadlock):
            raise Wrong(f"{where} deadlocked: {run.stopped}{self._deadlock_cause(run)}.", self._deadlock_hint(run))
        if run.stopped is not None:
            raise Wrong(f"{where} hung: {run.stopped}.")
        if not run.puts:
            raise NotYet(f"no put yet: your {self.what} is still the skeleton.")
        overwrite = run.overwrite
        if overwrite is not None and overwrite.put.call == 0:
            raise Wrong(self._overwritten(where, overwrite, run), self.slot_hint)
        if run.unwaited:
            put = run.unwaited[0]
            uneven = _uneven(run, "puts")
            raise Wrong(f"{where}: rank {put.target} returned while rank {put.sender}'s {self.step(put, run)} was "
                        f"still on its way to it: nothing waited for its flag, so nothing said its bytes had landed"
                        + (f" ({counted(run, *uneven)})." if uneven else "."),
                        "Each put needs one wait() on the rank it goes to: a rank waits for every put made to it.")
        self._values(where, run, 0)
        if run.reused:   # (after the sums: a wrong chunk added into the one just sent is named as what it is)
            raise Wrong(self._reused(where, run.reused[0], run), REUSE_HINT)
        if overwrite is not None:
            raise Wrong(self._second_call(where, run), self.slot_hint)
        self._values(where, run, 1)
        self.shape(run)

    def _early(self, run):
        """The ranks of a deadlock that waited before their first put of the call (but those the algorithm has wait
        first, as the naive AllReduce's rank 0)."""
        return sorted(r for r in run.stopped.before_put if r not in self.waits_first)

    def _deadlock_cause(self, run):
        """What the deadlock's counts say: the rank that waited before its first put, or else the pair whose
        waits outnumber its puts."""
        early = self._early(run)
        if early:
            return f". Rank {early[0]} waited before its first put"
        uneven = _uneven(run, "waits")
        return f". Counted per pair: {counted(run, *uneven)}" if uneven else ""

    def _deadlock_hint(self, run):
        if self._early(run):   # (only then: a rank that waited first)
            return "A rank that waits before it puts waits for a neighbour doing the same: put first, then wait."
        return ("Every rank had put before it waited, and each waits for a put nobody makes: count them. Each put "
                "needs exactly one wait() on its target, for that sender, and each wait() one put.")

    def _values(self, where, run, call):
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
                                f"bits (element {i}: {got[i]!r} against {first[i]!r}): the ranks added in different "
                                "orders. Replicas that differ drift apart step after step (lesson 10): each chunk must "
                                "be summed once, by one rank, and copied to the others.")
            return
        said = self.mistake(run, call)   # first what its puts show: it may explain the poison too
        if said:
            raise Wrong(f"{where}: {said}")
        poisoned = self._poisoned(run, call)
        if poisoned and run.overwrite is not None:   # (a put of the next call landed on bytes not yet added)
            raise Wrong(self._second_call(where, run), self.slot_hint)
        if poisoned:
            self._poison(where, run, call, poisoned)
        raise Wrong(f"{where}: {self.sums(run, call, wrong)}")

    @staticmethod
    def _poisoned(run, call):
        """{rank: how many of its result's elements hold poison} in `call` (ranks with none left out)."""
        out = {}
        for rank, got in enumerate(run.results[call]):
            if got is None:
                continue
            if run.dtype.kind == "f":
                poisoned = np.isnan(got)
            else:
                poisoned = np.abs(got.astype(np.int64) - run.expected[call]) > 1 << 24
            if poisoned.any():
                out[rank] = int(poisoned.sum())
        return out

    def _poison(self, where, run, call, poisoned):
        """Poison in a result: bytes used before their flag, or bytes nobody ever put (run again with those zeroed,
        the poison goes)."""
        rank, n = min(poisoned.items())
        holds = f"rank {rank}'s result holds {n} poisoned element{'s' if n > 1 else ''}"
        never = {key: mask for key, mask in run.never_put.items() if mask.any()}
        if never and self._clean(run.again(never), call):
            readers = [r for r in range(run.ranks) if (r, "stage") in never and
                       sum(self._poisoned(run.again({(r, "stage"): never[r, "stage"]}), call).values())
                       < sum(poisoned.values())]
            reader = readers[0] if readers else rank
            landed = sorted({(put.lo, put.hi) for put in run.puts if put.target == reader and put.region == "stage"})
            said = (f"puts to it landed on bytes {self._ranges(landed)} only" if landed
                    else "no put ever went to it")
            raise Wrong(f"{where}: {holds}, from bytes nobody ever put: rank {reader} read bytes of its stage that no "
                        f"put wrote, in any call ({said}). This check fills such bytes with poison "
                        f"({POISON[run.dtype.name]}) so that it shows; a real stage holds whatever was left there.",
                        self.read_hint)
        raise Wrong(f"{where}: {holds}: bytes used before their flag had landed. Until a put's flag lands (the wait() "
                    f"for it returns), this check's transport fills its bytes with poison ({POISON[run.dtype.name]}), "
                    "as a real NIC may have written none, some or all of them.", FLAG_HINT)

    def _clean(self, again, call):
        return not again.errors and again.stopped is None and not self._poisoned(again, call)

    @staticmethod
    def _ranges(landed):
        shown = [f"{lo} to {hi}" for lo, hi in landed[:4]] + (["..."] if len(landed) > 4 else [])
        return ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]

    def _reused(self, where, reused, run):
        put = reused.put
        when = ("after it returned (the caller writes new values into x then)" if reused.call is None
                or reused.call > put.call else "in the same call")
        return (f"{where}: rank {put.sender} changed the bytes its {self.step(put, run)} sent ({put.source[0]} bytes "
                f"{put.source[1]} to {put.source[1] + put.hi - put.lo}) {when}, before flush() and before anything "
                f"told it the put had landed: the NIC may not have read them yet, so rank {put.target} could get the "
                "new bytes.")

    def _second_call(self, where, run):
        return f"Called a second time, as a training loop calls it: {self._overwritten(where, run.overwrite, run)}"

    def _overwritten(self, where, overwrite, run):
        put, old = overwrite.put, overwrite.old
        return (f"{where}: rank {put.sender}'s {self.step(put, run)} landed on bytes {put.lo} to {put.hi} of rank "
                f"{put.target}'s {put.region} before rank {put.target} had used what rank {old.sender}'s "
                f"{self.step(old, run)} left there: nothing rank {put.sender} had heard said it had. Run at another "
                "pace, those bytes are lost before they are added.")
