"""Data-parallel training on the ranks: a small MLP learns handwritten digits, its gradients summed by an AllReduce.

    # on every rank (Cluster.run passes each rank's Communicator):
    cluster.run(training.train, {"algorithm": my_ring, "steps": 200, "overlap": True})
    # on every rank: how much of a rank's compute a stream of incoming gradients takes
    cluster.run(training.compute_while_landing, {"seconds": 1.0, "nbytes": 1 << 20})

What a data-parallel step is, as PyTorch's DistributedDataParallel runs it (and this module, in numpy):
every rank holds the same model and takes its own shard of the global batch; forward and backward give
each rank its gradients; an AllReduce sums them (each rank's loss is scaled by 1 / the global batch, so
the sum is the global batch's mean gradient, where DDP sums and then divides by p), and every rank
applies the same update, so the replicas stay bit-identical. Backward runs from the last layer to the first, so the last layer's
gradients are ready first: DDP groups them in *buckets* (reverse order, a size cap each) and starts a
bucket's AllReduce as soon as it is full and every bucket before it has started (all ranks start
the same AllReduces in the same order), while backward goes on through earlier layers. What is left
of the AllReduce after backward ends is what the step waits for.

Each step is timed on each rank, as a profiler's timeline draws it: "compute" (forward, backward, the
update), "communicate" (inside the AllReduce, doing: puts, adds, copies) and "idle" (inside the
AllReduce, waiting for a neighbour's bytes: time in the transport's wait()). With overlap, the
AllReduces run in a communication thread, and what the step's own thread waits for at its end is "idle".

The data: rdmalab/allreduce/data/digits.csv.gz (UCI's handwritten digits, CC BY 4.0; its README there),
1797 images of 8x8 pixels, shipped with the lab: nothing is downloaded.
"""
import gzip
import hashlib
import os
import queue
import threading
import time

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits.csv.gz")
TEST_ROWS = 297          # held out for accuracy: the rest (1500) is the training set
WIDTH, DEPTH = 192, 4    # hidden units in each hidden layer, and how many hidden layers
BUCKET_CAP = 128 << 10   # DDP's cap is 25 MB (1 MB for its first bucket), for models of GBs; this model's gradients
                         # are 0.5 MB, so 128 KiB makes 4 buckets


def digits():
    """(train_x, train_y, test_x, test_y): pixels scaled to 0..1 as float32, labels 0-9, split by a fixed seed."""
    table = np.loadtxt(gzip.open(DATA, "rt"), delimiter=",", dtype=np.float32)
    order = np.random.default_rng(0).permutation(len(table))
    x, y = table[order, :-1] / 16.0, table[order, -1].astype(np.int64)
    return x[TEST_ROWS:], y[TEST_ROWS:], x[:TEST_ROWS], y[:TEST_ROWS]


def layer_sizes(width=WIDTH, depth=DEPTH):
    """64 pixels in, `depth` hidden layers of `width` units (ReLU), 10 digits out."""
    return (64, *[width] * depth, 10)


def init(sizes, seed=0):
    """Parameters [W1, b1, W2, b2, ...] (He-initialised, float32), the same on every rank for the same seed."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        params += [(rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype(np.float32),
                   np.zeros(fan_out, np.float32)]
    return params


def forward(params, x):
    """Activations of every layer; the last is the logits."""
    acts = [x]
    for i in range(0, len(params), 2):
        z = acts[-1] @ params[i] + params[i + 1]
        acts.append(np.maximum(z, 0) if i + 2 < len(params) else z)
    return acts


def loss_and_grads(params, x, y, scale, ready=None):
    """Softmax cross-entropy summed over the rows of (x, y) and multiplied by `scale` (1 / global batch: every
    rank's gradients then add up to the global batch's mean gradient), and its gradients, computed last layer
    first; ready(i, grad) is called as soon as params[i]'s gradient is final (what DDP's autograd hooks see)."""
    acts = forward(params, x)
    logits = acts[-1] - acts[-1].max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    loss = -np.log(prob[np.arange(len(y)), y] + 1e-12).sum() * scale
    delta = prob
    delta[np.arange(len(y)), y] -= 1
    delta *= scale
    grads = [None] * len(params)
    for i in range(len(params) - 2, -1, -2):               # last layer first, as backward runs
        grads[i], grads[i + 1] = acts[i // 2].T @ delta, delta.sum(axis=0)
        if ready:
            ready(i + 1, grads[i + 1])
            ready(i, grads[i])
        if i:
            delta = (delta @ params[i].T) * (acts[i // 2] > 0)
    return float(loss), grads


def accuracy(params, x, y):
    return float((forward(params, x)[-1].argmax(axis=1) == y).mean())


def ddp_buckets_of_sizes(sizes, cap):
    """DDP's bucketing of parameters of `sizes` bytes (in the model's order): from the last parameter to the first,
    a bucket closes once it holds `cap` bytes or more (a parameter is never split). A list of buckets, each a list
    of parameter indices, the first bucket holding the last layer's."""
    buckets, current, held = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        held += sizes[i]
        if held >= cap:
            buckets.append(current)
            current, held = [], 0
    if current:
        buckets.append(current)
    return buckets


def ddp_buckets(params, cap=BUCKET_CAP):
    return ddp_buckets_of_sizes([p.nbytes for p in params], cap)


def digest(array):
    """A short fingerprint of an array's bytes: replicas that agree bit for bit have the same one."""
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=8).hexdigest()


class TimedWaits:
    """A transport whose wait() is timed: the time a rank spends waiting for a neighbour's bytes."""

    def __init__(self, transport):
        self.inner, self.waited = transport, 0.0

    def wait(self, peer, alive=None):
        start = time.perf_counter()
        self.inner.wait(peer, alive)
        self.waited += time.perf_counter() - start

    def __getattr__(self, name):   # put, signal, flush, buffer, rank, size, ...: the transport's own
        return getattr(self.inner, name)


def train(comm, options, communicator=None):
    """Train on this rank's shards; returns this rank's step records, its replicas' fingerprints and accuracy.

    options: algorithm (a registered name or a function f(comm, x), as lesson 09's), steps, batch (the global
    batch, split over ranks), width, depth, lr, seed, overlap (buckets reduced in a thread while backward runs),
    bucket_cap (bytes), buckets (a list of index lists, else ddp_buckets'), on_gradient and before_update (the
    overlap's hooks: Reducer), drift (a (rank, step, index)
    whose parameter this rank nudges once, to show the check catching a replica that drifts).
    communicator: one to use instead of a Communicator over comm's transport (MpiComm)."""
    from rdmalab.allreduce.algorithms import Communicator
    o = {"algorithm": "ring", "steps": 100, "batch": 128, "width": WIDTH, "depth": DEPTH, "lr": 0.1, "seed": 0,
         "overlap": False, "bucket_cap": BUCKET_CAP, "buckets": None, "on_gradient": launch_in_order,
         "before_update": wait_for_all, "drift": None, **options}
    timed = TimedWaits(comm.t)
    comm = communicator or Communicator(timed, comm.alive)   # (MPI: its own, whose waits are inside Allreduce)
    p, r = comm.size, comm.rank
    train_x, train_y, test_x, test_y = digits()
    params = init(layer_sizes(o["width"], o["depth"]), o["seed"])
    buckets = o["buckets"] or ddp_buckets(params, o["bucket_cap"])
    reducer = Reducer(comm, params, buckets, o["algorithm"], o["overlap"], o["on_gradient"], o["before_update"])
    rng = np.random.default_rng(o["seed"] + 1)              # the same global batches on every rank
    records, prints = [], []
    try:
        for step in range(o["steps"]):
            rows = rng.choice(len(train_x), o["batch"], replace=False)[r::p]   # this rank's shard
            t0, waited0 = time.perf_counter(), timed.waited
            reducer.start_step()
            loss, grads = loss_and_grads(params, train_x[rows], train_y[rows], 1.0 / o["batch"],
                                         ready=reducer.ready if o["overlap"] else None)
            t1 = time.perf_counter()
            if not o["overlap"]:
                reducer.reduce_all(grads)
            t2 = time.perf_counter()
            reducer.finish()                                   # every bucket is in: the step may update
            t3 = time.perf_counter()
            for param, grad in zip(params, grads):
                param -= o["lr"] * grad
            if o["drift"] and tuple(o["drift"][:2]) == (r, step):
                params[o["drift"][2]].flat[0] += 1e-3          # a replica that drifts (a bug, a bit flip)
            t4 = time.perf_counter()
            records.append({"step": step, "loss": loss, "start": t0, "backward": t1 - t0,
                            "reduce": t2 - t1, "finish": t3 - t2, "update": t4 - t3,
                            "waited": timed.waited - waited0, "buckets": reducer.intervals})
            prints.append([digest(param) for param in params])
    finally:
        reducer.close()
    return {"rank": r, "records": records, "prints": prints, "accuracy": accuracy(params, test_x, test_y),
            "params": [param.copy() for param in params] if o.get("keep_params") else None,
            "buckets": buckets, "overlap": o["overlap"], "transport": type(timed.inner).__name__}


def launchable(state):
    """How many buckets DDP's rule has started by now: in index order, each once all its gradients are final."""
    n = 0
    while n < len(state.buckets) and all(j in state.final for j in state.buckets[n]):
        n += 1
    return n


def launch_in_order(state, i):
    """DDP's rule for when a bucket's AllReduce starts (backward has just made gradient i final): a bucket goes out
    once all its gradients are final, and only after every bucket before it, so that every rank starts the same
    AllReduces in the same order whatever order its gradients came in."""
    while len(state.launched) < launchable(state):
        state.launch(len(state.launched))


def wait_for_all(state):
    """Before the optimizer step: every bucket's AllReduce must have finished (its sums are in the gradients)."""
    for b in range(len(state.buckets)):
        state.wait(b)


class Reducer:
    """Sums gradients over the ranks, bucket by bucket, in the same order on every rank. Each bucket's gradients are
    copied into the registered data region, reduced there in place by `algorithm`, and copied back (as DDP copies
    into its bucket buffers). Without overlap, every bucket is reduced after backward. With it, backward calls
    on_gradient(state, i) as each gradient becomes final, state.launch(b) hands bucket b to a communication
    thread, and before_update(state) waits (state.wait(b)) for what the update needs: the hooks a learner writes
    (lesson 10), DDP's by default. `self` is the state the hooks see: buckets, final (the indices of the gradients
    final so far), launched (the buckets launched, in order)."""

    def __init__(self, comm, params, buckets, algorithm, threaded, on_gradient=launch_in_order,
                 before_update=wait_for_all):
        from rdmalab.allreduce.algorithms import REGISTRY
        self.comm, self.params, self.buckets = comm, params, buckets
        self.run = algorithm if callable(algorithm) else REGISTRY[algorithm].run
        self.on_gradient, self.before_update = on_gradient, before_update
        self.start_step()
        self.finished, self.failed, self.closing = threading.Condition(), None, False
        self.jobs, self.thread = None, None
        if threaded:
            self.jobs = queue.Queue()
            self.thread = threading.Thread(target=self._serve, daemon=True, name="allreduce")
            self.thread.start()

    def start_step(self):
        self.grads, self.final, self.launched, self.intervals = [None] * len(self.params), set(), [], []
        self.done = set()

    def ready(self, i, grad):
        """Gradient i is final (called from backward)."""
        self.grads[i] = grad
        self.final.add(i)
        self.on_gradient(self, i)

    def launch(self, b):
        if b in self.launched:
            raise RuntimeError(f"bucket {b} launched twice in one step: its gradients would be summed twice")
        self.launched.append(b)
        self.jobs.put(b)

    def wait(self, b):
        if b not in self.launched:
            raise RuntimeError(f"waiting for bucket {b}, which was never launched: it would wait forever")
        with self.finished:
            while b not in self.done and self.failed is None:
                self.finished.wait(1.0)
        if self.failed is not None:
            raise self.failed

    def reduce_all(self, grads):
        self.grads = grads
        for b in range(len(self.buckets)):
            self._reduce(b)

    def finish(self):
        """Overlapped: the learner's before_update, then a guard (the lesson's checker has tried it already)."""
        if self.thread is None:
            return
        self.before_update(self)
        missing = [b for b in range(len(self.buckets)) if b not in self.done]
        if missing:
            raise RuntimeError(f"the update would read buckets {missing} before their AllReduce finished")

    def _serve(self):
        from rdmalab.proc import waiting
        with waiting.sleeping():   # (a spinning wait would take the CPU and the GIL from backward beside it)
            self._serve_jobs()

    def _serve_jobs(self):
        while True:
            b = self.jobs.get()
            if b is None:
                return
            try:
                if self.failed is None and not self.closing:   # (after a failure the ranks are out of step)
                    self._reduce(b)
            except BaseException as e:   # (told to the step's thread, which raises it in wait())
                self.failed = e
            with self.finished:
                self.done.add(b)
                self.finished.notify_all()

    def _reduce(self, b):
        start, cpu = time.perf_counter(), time.thread_time()
        members, source = self.buckets[b], self.grads
        count = sum(source[i].size for i in members)
        work = self.comm.buffer(count, "float32")
        at = 0
        for i in members:
            work[at:at + source[i].size] = source[i].reshape(-1)
            at += source[i].size
        self.run(self.comm, work)
        at = 0
        for i in members:
            source[i].reshape(-1)[:] = work[at:at + source[i].size]
            at += source[i].size
        self.intervals.append((b, start, time.perf_counter(), time.thread_time() - cpu))   # (the CPU it took)

    def close(self):
        """Stop the communication thread: buckets still queued are dropped; one under way ends with the transport's
        own timeout (a peer that stopped answering), after which the thread ends too."""
        if self.thread is not None:
            self.closing = True
            self.jobs.put(None)
            from rdmalab.allreduce.transports import peer_timeout
            self.thread.join(timeout=peer_timeout() + 5)


def compute_while_landing(comm, options):
    """Rank 0 computes (forward and backward of the model on a batch, again and again) while rank 1 streams
    gradients into rank 0's memory; returns rank 0's steps per second alone and while they land.

    Over RDMA the stream is WRITEs into rank 0's stage: rank 0 runs nothing to receive them, and reads the
    flags (its transport's bookkeeping) only after its timed window. Over TCP the bytes reach rank 0's
    memory only when rank 0 reads its socket: a receiving thread in rank 0's process does, during the window,
    or the sender's socket buffers fill and the stream stops. Each rank is pinned to a CPU of its own where
    two are usable, so the receiving thread competes with rank 0's compute for rank 0's CPU, as it would on a
    training host whose CPU feeds the accelerator. options: seconds (the timed window), nbytes (one message),
    batch, width, depth. Ranks beyond 2 only take part in the barriers."""
    o = {"seconds": 1.0, "nbytes": 1 << 20, "batch": 64, "width": WIDTH, "depth": DEPTH, **options}
    r = comm.rank
    pinned = _pin(r)
    t, barrier = comm.t, comm.barrier
    params = init(layer_sizes(o["width"], o["depth"]))
    train_x, train_y, _, _ = digits()
    x, y = train_x[:o["batch"]], train_y[:o["batch"]]
    threading_tcp = not hasattr(t, "flags")                  # TCP: bytes land only when rank 0 reads them

    def compute(seconds):
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            loss_and_grads(params, x, y, 1.0 / len(y))
            steps += 1
        return steps / (time.perf_counter() - start)

    def drain():
        """Take rank 1's messages until its last, which carries how many came before it (negative)."""
        stage, taken = t.buffer("stage"), 0
        while True:
            t.wait(1)
            taken += 1
            told = int(stage[:8].view(np.int64)[0])
            if told < 0 and taken >= -told + 1:
                return taken

    out = {"rank": r, "cpu": pinned[0] if pinned else None}   # (the CPU it ran on, where it had one of its own)
    try:
        barrier()
        if r == 0:
            out["alone"] = compute(o["seconds"])
        barrier()
        if r == 0:
            failed = []

            def receive():
                try:
                    out["taken"] = drain()
                except BaseException as e:
                    failed.append(e)

            receiver = threading.Thread(target=receive, daemon=True) if threading_tcp else None
            if receiver:
                receiver.start()
                if pinned:
                    _pin_threads(pinned)                       # (the receiver too, on rank 0's CPU)
            time.sleep(0.05)                                   # the stream is under way
            out["landing"] = compute(o["seconds"])
            if receiver:
                from rdmalab.allreduce.transports import peer_timeout
                receiver.join(timeout=o["seconds"] + peer_timeout())
                if failed or receiver.is_alive():
                    raise RuntimeError(f"rank 0's TCP receiver {'failed: ' + repr(failed[0]) if failed else 'hung'}")
            else:
                out["taken"] = drain()
        elif r == 1:
            src = t.buffer("data")[:o["nbytes"]].view(np.int64)   # (an RDMA WRITE reads registered memory)
            sent, until = 0, time.perf_counter() + o["seconds"] + 0.15
            while time.perf_counter() < until:
                src[0] = sent + 1
                t.put(0, src, "stage", 0)
                sent += 1
                if sent % 8 == 0:
                    t.flush()                                  # (bounds what TCP's sender thread holds)
            src[0] = -sent
            t.put(0, src, "stage", 0)
            t.flush()
            out["sent_bytes"] = (sent + 1) * src.nbytes
        barrier()
    finally:
        if pinned is not None:
            _pin_threads((None, pinned[1]))
    return out


def _pin(rank):
    """Pin this rank, every thread of it (the transport's sender threads too), to a CPU of its own (rank 0 to the
    first usable CPU, rank 1 to the second) where two are usable; returns (the CPU, the affinity before) or None."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    before = os.sched_getaffinity(0)
    cpus = sorted(before)
    if len(cpus) < 2 or rank > 1:
        return None
    _pin_threads((cpus[rank], before))
    return cpus[rank], before


def _pin_threads(pinned):
    """Every thread of this process on CPU pinned[0] (None: back to the affinity pinned[1])."""
    cpus = pinned[1] if pinned[0] is None else {pinned[0]}
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:   # (a thread that ended meanwhile)
            pass


class MpiComm:
    """What train() needs of a Communicator, over MPI_Allreduce (mpi4py): the step timed the same way with a
    production MPI summing the gradients (run under mpiexec: python -m rdmalab.allreduce.training OPTIONS)."""

    def __init__(self):
        from mpi4py import MPI
        self.mpi, self.world = MPI, MPI.COMM_WORLD
        self.rank, self.size, self.alive = self.world.rank, self.world.size, None
        self.t = self                                      # (train() times its waits: MPI's are inside Allreduce)
        self.data = np.zeros(0, np.uint8)

    def buffer(self, count, dtype="float32"):
        if count * np.dtype(dtype).itemsize > self.data.nbytes:   # (the largest bucket so far)
            self.data = np.zeros(count * np.dtype(dtype).itemsize, np.uint8)
        return self.data[:count * np.dtype(dtype).itemsize].view(dtype)

    def allreduce(self, comm, x):
        self.world.Allreduce(self.mpi.IN_PLACE, x, op=self.mpi.SUM)


def main(argv=None):
    """Under mpiexec: train with MPI_Allreduce summing the gradients; rank 0 prints every rank's result as JSON."""
    import json
    import sys
    options = json.loads((argv or sys.argv[1:] or ["{}"])[0])
    comm = MpiComm()
    result = train(comm, {**options, "algorithm": comm.allreduce}, communicator=comm)
    gathered = comm.world.gather(result, root=0)
    if comm.rank == 0:
        print(json.dumps(gathered))


if __name__ == "__main__":
    main()
