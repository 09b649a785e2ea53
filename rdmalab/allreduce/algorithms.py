"""Sum-AllReduce, written once against rdmalab.allreduce.transports (RDMA or TCP), three ways.

    comm = Communicator(transport)                 # inside each rank (rdmalab.allreduce.ranks sets this up)
    x = comm.buffer(count, "float32")              # registered memory: no copy in or out
    comm.allreduce(x, algorithm="ring")            # in place: every rank ends with the sum

Algorithms (n elements, p ranks):
- naive: every rank sends its whole buffer to rank 0, which adds them and sends the sum back.
  Rank 0 receives and sends (p-1) n: its link is the bottleneck.
- ring: reduce-scatter then all-gather around the ring, p-1 steps each. The buffer is cut into p
  chunks (any n: chunk sizes differ by at most one element); in each step a rank sends one chunk to
  its right neighbour and adds the chunk arriving from its left, pipelined in segments. Every rank
  sends 2 (p-1)/p n: the optimum, whatever p.
- hd (recursive halving-doubling, Rabenseifner; p a power of two): reduce-scatter by exchanging
  halves with a partner at distance p/2, p/4, ..., then all-gather by doubling back. Same bytes as
  the ring in 2 log2 p steps instead of 2 (p-1): better when latency dominates.

Accuracy: integers are exact (wrapping on overflow, as numpy's). Floats are summed in an order that
depends on the algorithm and p, so results may differ from numpy's pairwise sum; each element is a sum
of p terms, so the difference is bounded by about (p - 1) * eps * sum(|x_i|) (eps of the dtype);
the tests allow 2 * p * eps * sum(|x_i|) per element. Every rank ends with bit-identical results:
each chunk is reduced by one rank and then copied to all.
"""
import functools

import numpy as np

from rdmalab.errors import RequestError


class Algorithm:
    """An AllReduce the ranks can run: the Communicator method that runs it, whether it needs a power-of-two
    number of ranks, and the stage region (bytes) it needs for `ranks` ranks and buffers of `max_bytes`.
    Adding one: a method marked @algorithm(...) below, its cost terms in model.terms; the CLI's choices,
    validate() and tests/test_allreduce.py take every registered one."""

    def __init__(self, name, run, power_of_two=False, stage=None):
        self.name, self.run, self.power_of_two = name, run, power_of_two
        self.stage = stage or (lambda ranks, max_bytes: max_bytes + 8 * ranks * 4)   # one buffer, one element a chunk


REGISTRY = {}


def algorithm(name, power_of_two=False, stage=None):
    """Register a Communicator method as AllReduce algorithm `name`."""
    def register(run):
        REGISTRY[name] = Algorithm(name, run, power_of_two, stage)
        return run
    return register

DTYPES = ("float32", "float64", "int32", "int64")
SEGMENT_BYTES = 1 << 20          # ring pipelining: chunks move in pieces of at most this


def validate(algorithm, dtype, ranks):
    """ValueError naming the problem and the fix, if this AllReduce cannot run on `ranks` ranks. `algorithm` is
    a registered name, or a function fn(comm, x) that sums x in place (a learner's, lesson 09): taken as it is."""
    own = callable(algorithm)
    if not own and algorithm not in ALGORITHMS:
        raise RequestError(f"algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    try:
        dtype = np.dtype(dtype).name
    except TypeError:
        pass   # not a numpy type at all: named as given below
    if dtype not in DTYPES:
        raise RequestError(f"dtype {dtype}: choose one of {', '.join(DTYPES)}")
    if not own and REGISTRY[algorithm].power_of_two and ranks & (ranks - 1):
        raise RequestError(f"{algorithm} needs a power-of-two number of ranks, not {ranks}: use ring")


class Communicator:
    def __init__(self, transport, alive=None):
        self.t, self.rank, self.size = transport, transport.rank, transport.size
        self.alive = alive        # optional alive(peer) -> bool, for a faster "peer lost"
        self.ring_credit = None   # the transport's traffic when our last ring ended (see _ring)
        self.ring_steps = {}      # (size, dtype) -> the ring compiled for buffer(size, dtype) (_compiled_ring)
        self.data_at = transport.buffer("data").__array_interface__["data"][0]   # where buffer()'s arrays start
        self.in_place = None      # the last x found to start there (an array's memory never moves)

    def buffer(self, count, dtype="float32"):
        """`count` elements in the registered data region (what allreduce works on without copying)."""
        dtype = np.dtype(dtype)
        view = self.t.buffer("data")
        if count * dtype.itemsize > view.nbytes:
            raise ValueError(f"{count} x {dtype} does not fit the {view.nbytes}-byte data region")
        return view[:count * dtype.itemsize].view(dtype)

    def allreduce(self, x, algorithm="ring", out=None):
        """Sum `x` over all ranks. In place (x from buffer()) unless `out` is given or x lives
        elsewhere, in which case x is copied into the data region first (one local copy)."""
        validate(algorithm, x.dtype, self.size)
        return self.allreduce_validated(x, algorithm, out)

    def allreduce_validated(self, x, algorithm, out=None):
        """allreduce() of a request validated already, by the entry point that took it (Cluster.allreduce,
        Cluster.check, rdmalab.allreduce.report): rdmalab.allreduce.ranks calls this, once per iteration."""
        if x is self.in_place:   # the array of the last call, which started at the data region: it still does
            elsewhere = False
        else:
            elsewhere = x.__array_interface__["data"][0] != self.data_at or not x.flags.c_contiguous
            self.in_place = None if elsewhere else x
        if elsewhere:
            work = self.buffer(x.size, x.dtype)
            np.copyto(work, x.reshape(-1))
        else:   # x is the data region's start (from buffer()): the ring works on it as it is
            work = x if x.ndim == 1 else x.reshape(-1)
        if self.size > 1:   # a registered algorithm's method, or a function of the same shape (validate())
            (algorithm if callable(algorithm) else REGISTRY[algorithm].run)(self, work)
        if out is not None:
            np.copyto(out.reshape(-1), work)
            return out
        if elsewhere:
            np.copyto(x.reshape(-1), work)
        return x

    def barrier(self):
        """Every rank signals every other and waits for all of them."""
        others = [r for r in range(self.size) if r != self.rank]
        for peer in others:
            self.t.signal(peer)
        for peer in others:
            self.t.wait(peer, self.alive)
        self.t.flush()

    # -------------------------------------------------------------- helpers

    def handshake(self, writers, targets):
        """Credits for this call: tell the ranks that will write into us that we are ready, and wait
        until the ranks we will write into are ready too (they have finished with the last call)."""
        for peer in writers:
            self.t.signal(peer)
        for peer in targets:
            self.t.wait(peer, self.alive)

    def _send(self, peer, piece, region, offset):
        self.t.put(peer, piece, region, offset)

    def _recv(self, peer):
        self.t.wait(peer, self.alive)

    # -------------------------------------------------------------- naive

    @algorithm("naive", stage=lambda ranks, max_bytes: max(ranks - 1, 1) * max_bytes)   # rank 0 holds everyone's
    def _naive(self, x):
        p = self.size
        others = [r for r in range(p) if r != 0]
        if self.rank == 0:
            self.handshake(others, others)
            stage = self.t.buffer("stage")
            for r in others:   # each rank's buffer arrives into its own slot of the stage
                self._recv(r)
                np.add(x, stage[(r - 1) * x.nbytes:r * x.nbytes].view(x.dtype), out=x)
            for r in others:
                self._send(r, x, "data", 0)
            self.t.flush()
        else:
            self.handshake([0], [0])
            self._send(0, x, "stage", (self.rank - 1) * x.nbytes)
            self._recv(0)
            self.t.flush()

    # -------------------------------------------------------------- ring

    @algorithm("ring")
    def _ring(self, x):
        """Runs ring_plan(): the same pieces every call of a size, so the plan is made once and compiled once
        for this buffer (as NCCL builds its plans, WRs included, before it runs them): each call then only moves
        and adds bytes."""
        left = (self.rank - 1) % self.size
        # Credits, as NCCL keeps them from one call to the next: right has read its stage from our last ring
        # (it added the last of it before its all-gather sent the chunk it finished, which came around the ring
        # to us), so a ring that follows a ring needs no handshake; after anything else on this transport
        # (another algorithm, a barrier, a learner's put), ask again
        if self.ring_credit != self.t.exchanged():
            self.handshake([left], [(self.rank + 1) % self.size])
        wait, alive, add = self.t.wait, self.alive, np.add
        for put_it, mine, theirs in self._compiled_ring(x):
            if put_it is not None:   # put a piece of x into right's stage or data
                put_it(theirs)
            else:                    # wait for left's next flag; then, if the piece landed in our stage, add it
                wait(left, alive)
                if mine is not None:
                    add(mine, theirs, out=mine)
        self.t.flush()   # (our puts have read x: the caller may change it)
        self.ring_credit = self.t.exchanged()

    def _compiled_ring(self, x):
        """ring_plan() for x, as (put_it, None, signaled) to put and (None, x's piece, the stage's piece) or
        (None, None, None) to wait: its views made and its puts built once per size and dtype. x starts where
        the data region does (allreduce_validated sees to it), so its size and dtype say which x it is."""
        key = (x.size, x.dtype)
        steps = self.ring_steps.get(key)
        if steps is None:
            if x.__array_interface__["data"][0] != self.data_at:
                raise ValueError("the ring runs on the data region's start: call comm.allreduce(x)")
            p, r, right = self.size, self.rank, (self.rank + 1) % self.size
            stage, steps = self.t.buffer("stage"), []
            for op, lo, hi, at, signaled in ring_plan(p, r, x.size, x.itemsize):
                if op == "add":
                    steps.append((None, x[lo:hi], stage[at:at + (hi - lo) * x.itemsize].view(x.dtype)))
                elif op == "wait":
                    steps.append((None, None, None))
                else:
                    steps.append((self.t.prepared(right, x[lo:hi], op, at), None, signaled))
            if len(self.ring_steps) >= 16:
                self.ring_steps.clear()
            self.ring_steps[key] = steps = tuple(steps)
        return steps

    # -------------------------------------------------------------- recursive halving-doubling

    @algorithm("hd", power_of_two=True)
    def _hd(self, x):
        p, r = self.size, self.rank
        partners = [r ^ d for d in _halving_distances(p)]
        stage = self.t.buffer("stage")
        self.handshake(partners, partners)
        lo, hi, stage_at, kept = 0, x.size, 0, []
        for d in _halving_distances(p):        # reduce-scatter: keep the half on our side of the partner
            partner, mid = r ^ d, (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if r & d == 0 else ((mid, hi), (lo, mid))
            self._send(partner, x[give[0]:give[1]], "stage", stage_at)
            self._recv(partner)
            n = keep[1] - keep[0]
            incoming = stage[stage_at:stage_at + n * x.itemsize].view(x.dtype)
            np.add(x[keep[0]:keep[1]], incoming, out=x[keep[0]:keep[1]])
            stage_at += max(give[1] - give[0], n) * x.itemsize
            kept.append((lo, hi))
            lo, hi = keep
        for d in reversed(_halving_distances(p)):   # all-gather: double back, writing into the partner's result
            partner = r ^ d
            self._send(partner, x[lo:hi], "data", lo * x.itemsize)
            self._recv(partner)
            lo, hi = kept.pop()
        self.t.flush()


# ---------------------------------------------------------------- by hand, for reading (the AllReduce lessons, 08 and 09)
#
# The lesson's reference solutions: the naive AllReduce and the ring, one chunk per step, from the transport's
# put / wait / flush alone (the methods above do the same with segments and credits). Each is a function
# fn(comm, x), x at the start of the data region; Communicator.allreduce and the cluster's timing take one in
# place of a name. They import numpy inside because a learner's copy runs on the ranks, which see none of a
# notebook's names.


ALGORITHMS = tuple(REGISTRY)   # the names, in the order registered: naive, ring, hd


def naive_allreduce(comm, x):
    """Every rank puts its x into rank 0's stage, a slot each; rank 0 adds them and puts the sum into every x."""
    p, r = comm.size, comm.rank
    if r == 0:
        stage = comm.t.buffer("stage")
        for peer in range(1, p):
            comm.t.wait(peer)                               # its flag: all of its bytes have landed
            slot = (peer - 1) * x.nbytes                    # a slot per rank: no rank writes over another's
            x += stage[slot:slot + x.nbytes].view(x.dtype)
        for peer in range(1, p):
            comm.t.put(peer, x, "data", 0)                  # the sum, straight into its x
    else:
        comm.t.put(0, x, "stage", (r - 1) * x.nbytes)
        comm.t.wait(0)                                      # the sum has landed in our x
    comm.t.flush()   # our WRITEs have read x: the caller may change it


def ring_allreduce(comm, x):
    """The ring: p-1 reduce-scatter steps, then p-1 all-gather steps, one chunk to the right each step."""
    import numpy as np
    p, r = comm.size, comm.rank
    right, left = (r + 1) % p, (r - 1) % p
    bounds = np.linspace(0, x.size, p + 1).astype(int)     # chunk c is x[bounds[c]:bounds[c + 1]]
    slot = int(max(np.diff(bounds))) * x.itemsize           # bytes of the largest chunk
    stage = comm.t.buffer("stage")
    for s in range(p - 1):                                  # reduce-scatter
        c = (r - s) % p                                     # ours, with the s partial sums added so far
        # a slot per step: right says nothing when it has added the last chunk, so never write over one
        comm.t.put(right, x[bounds[c]:bounds[c + 1]], "stage", s * slot)
        comm.t.wait(left)                                   # left's chunk of this step has landed in slot s
        c = (r - s - 1) % p
        n = (bounds[c + 1] - bounds[c]) * x.itemsize
        x[bounds[c]:bounds[c + 1]] += stage[s * slot:s * slot + n].view(x.dtype)
    for s in range(p - 1):                                  # all-gather: chunk r + 1 is finished here
        c = (r + 1 - s) % p                                 # finished: by us (s = 0), or arrived in step s - 1
        comm.t.put(right, x[bounds[c]:bounds[c + 1]], "data", int(bounds[c]) * x.itemsize)
        comm.t.wait(left)                                   # chunk (r - s) has landed in our x
    comm.t.flush()


@functools.lru_cache(maxsize=64)
def ring_plan(p, r, count, itemsize):
    """Rank r's part of a ring AllReduce of `count` elements on p ranks, in order: ("stage" or "data", lo, hi,
    at, signaled) puts x[lo:hi] into right's region at byte `at`; ("add", lo, hi, at, _) waits for left's next
    flag and adds what it put into our stage at `at` to x[lo:hi]; ("wait", ...) waits for left's next flag."""
    bounds = [c * count // p for c in range(p + 1)]   # chunk c is x[bounds[c]:bounds[c + 1]]
    chunk_bytes = max(b - a for a, b in zip(bounds, bounds[1:])) * itemsize
    seg = max(SEGMENT_BYTES // itemsize, 1)
    plan = []
    # reduce-scatter: in step s we send chunk (r - s) and add the incoming chunk (r - s - 1), segment by
    # segment, each added as soon as it lands (while it is still in the caches of the CPU that wrote it)
    for s in range(p - 1):
        send_lo, send_hi = bounds[(r - s) % p], bounds[(r - s) % p + 1]
        recv_lo, recv_hi = bounds[(r - s - 1) % p], bounds[(r - s - 1) % p + 1]
        slot = s * chunk_bytes                           # each step has its own slot of the stage
        for k in range(max(send_hi - send_lo, recv_hi - recv_lo) // seg + 1):
            start, end = send_lo + k * seg, min(send_lo + (k + 1) * seg, send_hi)
            if start < end:
                plan.append(("stage", start, end, slot + (start - send_lo) * itemsize, False))
            start, end = recv_lo + k * seg, min(recv_lo + (k + 1) * seg, recv_hi)
            if start < end:
                plan.append(("add", start, end, slot + (start - recv_lo) * itemsize, False))
    # all-gather: in step s we send chunk (r + 1 - s), fully reduced, straight into right's result. No
    # go-ahead from right is needed first: right added into that chunk in its step s - 1 and sent it on in
    # step s, and that send had landed (its bytes read) before rank r + 2 sent its step s + 1, which our
    # reduce-scatter and all-gather so far have waited for, around the ring (with 2 ranks, right's send
    # came to us, before its flag). Right never adds into the chunk it finishes, which we never send it.
    for s in range(p - 1):
        send_lo, send_hi = bounds[(r + 1 - s) % p], bounds[(r + 1 - s) % p + 1]
        recv_lo, recv_hi = bounds[(r - s) % p], bounds[(r - s) % p + 1]
        for k in range(max(send_hi - send_lo, recv_hi - recv_lo) // seg + 1):
            start, end = send_lo + k * seg, min(send_lo + (k + 1) * seg, send_hi)
            if start < end:
                plan.append(("data", start, end, start * itemsize, False))
            if recv_lo + k * seg < recv_hi:
                plan.append(("wait", 0, 0, 0, False))
    last = max((i for i, op in enumerate(plan) if op[0] == "data"), default=None)
    if last is not None:   # our last put asks for a completion as it goes: the flush then sends nothing
        plan[last] = plan[last][:4] + (True,)
    return tuple(plan)


def _halving_distances(p):
    d, out = p // 2, []
    while d >= 1:
        out.append(d)
        d //= 2
    return out


def stage_bytes(algorithm, size, max_bytes):
    """Stage region an algorithm needs on `size` ranks (Algorithm.stage)."""
    return REGISTRY[algorithm].stage(size, max_bytes)
