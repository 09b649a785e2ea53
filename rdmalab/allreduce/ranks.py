"""What runs inside each rank (an ipyparallel engine) of rdmalab.allreduce.cluster.Cluster.

The cluster hands these functions to its engines by reference (ipyparallel pickles a module-level
function by its module and name), so each engine imports this module: it must stay importable on its
own and hold nothing of the host side.

    set_env(env)                             the environment the cluster chose (provider, threads)
    setup(rank, size, transport, regions, host)   open this rank's transport; its endpoints for each peer
    connect(theirs, pids)                    connect to every peer; this rank's Communicator is ready
    run(fn, *args)                           fn(comm, *args) with this rank's Communicator
    close()                                  release the transport (safe to call twice)
    device()                                 what this rank's RDMA transport runs on, for the report

Through run(): timed_allreduce (nccl-tests' timing, then a check against numpy) and check_cases (many
requests in one round trip). Requests reach the ranks validated by the entry point that took them
(Cluster.allreduce, Cluster.check, rdmalab.allreduce.report), so the ranks do not validate them again.

Test vectors are made in chunks of VALUE_CHUNK elements with their own seeds, so a rank can remake any
other rank's values, chunk by chunk, to compute the expected sum; count_wrong applies the bound of
rdmalab.allreduce.algorithms' docstring.
"""
import os
import socket
import time

import numpy as np

from rdmalab import verbs
from rdmalab.allreduce.algorithms import Communicator
from rdmalab.allreduce.transports import RdmaTransport, TcpTransport
from rdmalab.proc import procstat

VALUE_CHUNK = 1 << 16   # test values are made in chunks with their own seeds, so any chunk can be remade

_state = {}   # this rank's transport and Communicator, between calls


def set_env(env):
    os.environ.update(env)


def setup(rank, size, transport, regions, host):
    t = (RdmaTransport(rank, size, regions) if transport == "rdma"
         else TcpTransport(rank, size, regions, host=host))
    _state["transport"] = t
    return {"to": t.endpoints(), "pid": os.getpid(), "host": socket.gethostname()}


def connect(theirs, pids):
    t = _state["transport"]
    t.connect(theirs)
    here = socket.gethostname()
    alive = lambda peer: pids[peer][0] != here or procstat.pid_alive(pids[peer][1])   # noqa: E731
    _state["comm"] = Communicator(t, alive)
    return True


def run(fn, *args):
    return fn(_state["comm"], *args)


def close():
    t = _state.pop("transport", None)
    _state.pop("comm", None)
    if t is not None:
        t.close()
    return True


def device():
    return f"{verbs.choose_route().device} ({verbs.PROVIDER})"


def timed_allreduce(comm, count, dtype, algorithm, iters, warmup, check, in_place):
    """On one rank, as nccl-tests does: warm up, barrier, `iters` AllReduces back to back (their mean
    is the time), then one more on known values to count wrong elements against numpy. Also each
    round's time and how long this rank waited for a CPU meanwhile, which say whether the run was
    disturbed. `algorithm` is a name, or a function fn(comm, x) (Communicator.allreduce_validated); the
    request was validated by the caller that took it."""
    dtype = np.dtype(dtype)
    x = comm.buffer(count, dtype)
    src = None if in_place else np.empty(count, dtype)   # out of place: the input lives outside the region
    _fill(x if in_place else src, comm.rank, 0)

    def once():
        comm.allreduce_validated(x if in_place else src, algorithm, out=None if in_place else x)   # validated already

    for _ in range(warmup):
        once()
    elapsed, rounds, waited = None, [], 0.0
    if iters:
        comm.barrier()
        waited = procstat.waited_for_cpu()
        stamps = [time.perf_counter()]
        for _ in range(iters):
            once()
            stamps.append(time.perf_counter())
        elapsed = (stamps[-1] - stamps[0]) / iters
        rounds = np.diff(stamps).tolist()
        waited = procstat.waited_for_cpu() - waited
    wrong = 0
    if check:
        _fill(x if in_place else src, comm.rank, 1)
        once()
        wide = np.float64 if dtype.kind == "f" else dtype
        for lo in range(0, count, VALUE_CHUNK):   # chunk by chunk: the check needs little memory
            hi = min(lo + VALUE_CHUNK, count)
            terms = [_chunk(r, 1, lo // VALUE_CHUNK, dtype)[:hi - lo] for r in range(comm.size)]
            wrong += count_wrong(x[lo:hi], sum(t.astype(wide) for t in terms),
                                 sum(np.abs(t.astype(wide)) for t in terms), comm.size)
    return {"rank": comm.rank, "time": elapsed, "wrong": int(wrong), "rounds": rounds, "waited_for_cpu": waited}


def check_cases(comm, cases):
    """On one rank: each case once, returning the wrong-element counts."""
    return [timed_allreduce(comm, count, dtype, algorithm, 0, 0, True, in_place)["wrong"]
            for count, dtype, algorithm, in_place in cases]


def _chunk(rank, i, c, dtype):
    """Chunk c of rank's i-th test vector: integers in [-1000, 1000) or standard normal floats."""
    rng = np.random.default_rng((rank, i, c))
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, VALUE_CHUNK, dtype=dtype)
    return rng.standard_normal(VALUE_CHUNK, dtype=dtype)


def _fill(x, rank, i):
    """Write rank's i-th test vector into x, in place."""
    for lo in range(0, x.size, VALUE_CHUNK):
        x[lo:lo + VALUE_CHUNK] = _chunk(rank, i, lo // VALUE_CHUNK, x.dtype)[:x.size - lo]


def count_wrong(result, expected, abs_sum, ranks):
    """How many elements lie outside the bound of rdmalab.allreduce.algorithms' docstring (wrong_elements)."""
    return int(np.count_nonzero(wrong_elements(result, expected, abs_sum, ranks)))


def wrong_elements(result, expected, abs_sum, ranks):
    """True where an element lies outside the bound of rdmalab.allreduce.algorithms' docstring: 2 p eps sum|x_i|
    for floats (expected and abs_sum in float64; a NaN is always outside), exact equality for integers."""
    if np.issubdtype(result.dtype, np.integer):
        return result != expected.astype(result.dtype)
    eps = np.finfo(result.dtype).eps
    bound = 2 * ranks * eps * abs_sum + np.finfo(result.dtype).tiny
    return ~(np.abs(result.astype(np.float64) - expected.astype(np.float64)) <= bound)
