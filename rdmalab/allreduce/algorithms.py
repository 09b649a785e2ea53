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
    """ValueError naming the problem and the fix, if this AllReduce cannot run on `ranks` ranks."""
    if algorithm not in ALGORITHMS:
        raise RequestError(f"algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    try:
        dtype = np.dtype(dtype).name
    except TypeError:
        pass   # not a numpy type at all: named as given below
    if dtype not in DTYPES:
        raise RequestError(f"dtype {dtype}: choose one of {', '.join(DTYPES)}")
    if REGISTRY[algorithm].power_of_two and ranks & (ranks - 1):
        raise RequestError(f"{algorithm} needs a power-of-two number of ranks, not {ranks}: use ring")


class Communicator:
    def __init__(self, transport, alive=None):
        self.t, self.rank, self.size = transport, transport.rank, transport.size
        self.alive = alive        # optional alive(peer) -> bool, for a faster "peer lost"

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
        work = self.buffer(x.size, x.dtype)
        if work.ctypes.data != x.ctypes.data:
            np.copyto(work, x.reshape(-1))
        if self.size > 1:
            REGISTRY[algorithm].run(self, work)
        if out is not None:
            np.copyto(out.reshape(-1), work)
            return out
        if work.ctypes.data != x.ctypes.data:
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
        p, r = self.size, self.rank
        right, left = (r + 1) % p, (r - 1) % p
        bounds = np.linspace(0, x.size, p + 1).astype(np.int64)   # chunk c is x[bounds[c]:bounds[c+1]]
        chunk_bytes = int(max(np.diff(bounds))) * x.itemsize
        seg = max(SEGMENT_BYTES // x.itemsize, 1)
        stage = self.t.buffer("stage")
        self.handshake([left], [right])
        # reduce-scatter: in step s we send chunk (r - s) and add the incoming chunk (r - s - 1)
        for s in range(p - 1):
            send_c, recv_c = (r - s) % p, (r - s - 1) % p
            lo, hi = bounds[send_c], bounds[send_c + 1]
            pieces = range(lo, hi, seg) if hi > lo else []
            for start in pieces:
                end = min(start + seg, hi)
                self._send(right, x[start:end], "stage", s * chunk_bytes + (start - lo) * x.itemsize)
            rlo, rhi = bounds[recv_c], bounds[recv_c + 1]
            for start in (range(rlo, rhi, seg) if rhi > rlo else []):
                end = min(start + seg, rhi)
                self._recv(left)
                offset = s * chunk_bytes + (start - rlo) * x.itemsize
                incoming = stage[offset:offset + (end - start) * x.itemsize].view(x.dtype)
                np.add(x[start:end], incoming, out=x[start:end])
        # right may still be reading its own chunks for its reduce-scatter: wait for its go-ahead
        self.t.signal(left)
        self.t.wait(right, self.alive)
        # all-gather: in step s we send chunk (r + 1 - s), fully reduced, straight into right's result
        for s in range(p - 1):
            send_c = (r + 1 - s) % p
            lo, hi = bounds[send_c], bounds[send_c + 1]
            for start in (range(lo, hi, seg) if hi > lo else []):
                end = min(start + seg, hi)
                self._send(right, x[start:end], "data", start * x.itemsize)
            recv_c = (r - s) % p
            for _ in (range(bounds[recv_c], bounds[recv_c + 1], seg) if bounds[recv_c + 1] > bounds[recv_c] else []):
                self._recv(left)
        self.t.flush()

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


# ---------------------------------------------------------------- the ring, unpipelined, for reading (the AllReduce lesson, 06)


ALGORITHMS = tuple(REGISTRY)   # the names, in the order registered: naive, ring, hd

def chunk_bounds(count, p):
    """Element boundaries of the p chunks of a ring: chunk c is x[bounds[c]:bounds[c + 1]]."""
    return np.linspace(0, count, p + 1).astype(np.int64)


def reduce_scatter_step(comm, x, step, bounds, stage):
    """One step of the ring's reduce-scatter on this rank: send chunk (rank - step) to the right
    neighbour's stage, then add the chunk (rank - step - 1) that the left neighbour sent us."""
    p, r = comm.size, comm.rank
    right, left = (r + 1) % p, (r - 1) % p
    send_c, recv_c = (r - step) % p, (r - step - 1) % p
    slot = step * int(max(np.diff(bounds))) * x.itemsize          # each step lands in its own stage slot
    comm.t.put(right, x[bounds[send_c]:bounds[send_c + 1]], "stage", slot)
    comm.t.wait(left, comm.alive)
    n = bounds[recv_c + 1] - bounds[recv_c]
    x[bounds[recv_c]:bounds[recv_c + 1]] += stage[slot:slot + n * x.itemsize].view(x.dtype)


def ring_allreduce(comm, x, step=reduce_scatter_step):
    """The whole ring, one chunk per step: p-1 reduce-scatter steps (`step`), then p-1 all-gather
    steps writing each finished chunk straight into the right neighbour's buffer."""
    p, r = comm.size, comm.rank
    if p == 1:
        return x
    right, left = (r + 1) % p, (r - 1) % p
    bounds, stage = chunk_bounds(x.size, p), comm.t.buffer("stage")
    comm.handshake([left], [right])
    for s in range(p - 1):
        step(comm, x, s, bounds, stage)
    comm.t.signal(left)                    # our chunks are final: right may write into us
    comm.t.wait(right, comm.alive)
    for s in range(p - 1):
        c = (r + 1 - s) % p
        comm.t.put(right, x[bounds[c]:bounds[c + 1]], "data", int(bounds[c]) * x.itemsize)
        comm.t.wait(left, comm.alive)
    comm.t.flush()
    return x


def check_ring(comm, step, counts=(1, 5, 1003, 65536), dtype="int64", slow_rank=None, delay=0.0, pace=0.0):
    """On one rank: run ring_allreduce with `step` on known values; wrong elements per count.

    Two ways to set the ranks' pace, to tell a step's kinds of mistake apart:
    - `slow_rank`: that rank learns of each arrival `delay` seconds late (its waits return late), as a rank
      does whose CPU another process holds. Its left neighbour, which nothing holds back in the
      reduce-scatter, is then a step ahead every time: a step that reuses where the last chunk landed has
      it overwritten before it is added.
    - `pace`: every rank waits that long before each put into a stage, so that its neighbour has long
      added what came before: then only a step that computes the wrong chunks is wrong."""
    import time
    t = comm.t
    late, paced = comm.rank == slow_rank, pace > 0
    if late:
        on_time = t.wait

        def wait_late(peer, alive=None):
            on_time(peer, alive)
            time.sleep(delay)
        t.wait = wait_late
    if paced:
        at_once = t.put

        def put_paced(peer, src, region, offset):
            if region == "stage":
                time.sleep(pace)
            at_once(peer, src, region, offset)
        t.put = put_paced
    try:
        wrong = []
        for count in counts:
            x = comm.buffer(count, dtype)
            x[:] = np.arange(count, dtype=dtype) * (comm.rank + 1)
            ring_allreduce(comm, x, step)
            expected = np.arange(count, dtype=dtype) * (comm.size * (comm.size + 1) // 2)
            wrong.append(int(np.count_nonzero(x != expected)))
        return wrong
    finally:   # the class's own methods again
        if late:
            del t.wait
        if paced:
            del t.put


def _halving_distances(p):
    d, out = p // 2, []
    while d >= 1:
        out.append(d)
        d //= 2
    return out


def stage_bytes(algorithm, size, max_bytes):
    """Stage region an algorithm needs on `size` ranks (Algorithm.stage)."""
    return REGISTRY[algorithm].stage(size, max_bytes)
