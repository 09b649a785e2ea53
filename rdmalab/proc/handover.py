"""How far apart the host keeps this machine's first two CPUs: the ring's step without rdmalab.

Two processes, each pinned to a CPU, do what a 2-rank ring's step does with a 1 MiB AllReduce (copy
512 KiB into the other's stage, raise a flag, wait for the other's, add its own stage); the figure is the
median copy. The copy writes memory the other CPU has just read, so it pays for handing every cache line
over between the two CPUs: about 35-40 us on this project's 2-vCPU EPYC VMs while the host keeps the two
vCPUs near each other, 220-290 us while it has put them far apart, for minutes at a time (a cache line's
round trip between them then 514 ns, not 105-139: measured 2026-12-06). In that regime every ring's figure
is the host's, not the transport's: benchmarks/allreduce.py and lesson 09 measure it and say so.

    us = handover.handover_us()        # None with fewer than 2 usable CPUs
    handover.far_apart(us)             # True above FAR_US
"""
import os
import time

HANDOVER_BYTES = 512 << 10   # a 1 MiB AllReduce's chunk on 2 ranks
FAR_US = 120                 # a hand-over slower than this: the host has the two CPUs far apart
NEAR_US = 40                 # about what it takes while they are near (for the sentences that quote it)


def in_children(target, argsets, timeout=120):
    """target(*args, results) in a spawned process for each args of `argsets`, all at once; the largest
    value they put in `results`. A child that has not ended `timeout` seconds on is terminated: none is left."""
    import multiprocessing
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    children = [spawn.Process(target=target, args=(*args, results), daemon=True) for args in argsets]
    for child in children:
        child.start()
    try:
        return max(results.get(timeout=timeout) for _ in children)
    finally:
        for child in children:
            child.join(10)
            if child.is_alive():
                child.terminate()
                child.join()


def _child(me, cpu, names, steps, results):
    from multiprocessing import shared_memory
    import numpy as np
    os.sched_setaffinity(0, {cpu})
    segs = [shared_memory.SharedMemory(name=name) for name in names]
    try:
        x, stages, flag = (np.ndarray(HANDOVER_BYTES // 4, np.float32, buffer=segs[me].buf),
                           [np.ndarray(HANDOVER_BYTES // 4, np.float32, buffer=s.buf) for s in segs[2:4]],
                           np.ndarray(16, np.int64, buffer=segs[4].buf))
        peer, times = 1 - me, []
        for step in range(1, steps + 1):
            t = time.perf_counter()
            np.copyto(stages[peer], x)            # into memory the other CPU read at the last step
            times.append(time.perf_counter() - t)
            flag[8 * me] = step
            while flag[8 * peer] < step:
                pass
            np.add(x, stages[me], out=x)
            x *= 0.5
        results.put(float(np.median(times)))
        del x, stages, flag
    finally:
        for s in segs:
            s.close()


def handover_us(steps=200):
    """The median copy of HANDOVER_BYTES into memory the other CPU has just read, in us, on this process's
    first two CPUs; None with fewer than 2."""
    from multiprocessing import shared_memory
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    segs = [shared_memory.SharedMemory(create=True, size=HANDOVER_BYTES) for _ in range(4)] + \
        [shared_memory.SharedMemory(create=True, size=128)]
    try:   # (new segments are zero: every flag starts at 0)
        names = [s.name for s in segs]
        return round(in_children(_child, [(me, cpus[me], names, steps) for me in (0, 1)], 60) * 1e6, 1)
    finally:
        for s in segs:
            s.close()
            s.unlink()


def far_apart(us):
    """Whether a hand-over of `us` says the host had the two CPUs far apart (False for None: one CPU)."""
    return us is not None and us > FAR_US
