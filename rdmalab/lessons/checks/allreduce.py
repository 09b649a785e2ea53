"""The AllReduce lesson (allreduce): its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference


SLOW = 0.05   # seconds the checked ring's rank 1 is late to use each chunk it receives
PACE = 0.05   # seconds every rank waits before each put into a stage, in the first run


@exercise("allreduce.ring-step", "One reduce-scatter step of the ring, on every rank: where the chunk lands",
          hints=["Send chunk (r - s) mod p to the right, wait for the left, add chunk (r - s - 1) mod p. Then ask "
                 "where the chunk you send lands in your neighbour's stage, if it has not added the last one yet.",
                 "Your neighbour sends no credit (no message saying it is done with a slot): give every step its "
                 "own slot, slot = s * (largest chunk, in bytes), so a chunk never lands on one not yet added."])
def _check_ring_step(step, cluster):
    from rdmalab.allreduce.algorithms import check_ring
    from rdmalab.allreduce.cluster import ClusterError
    sizes = (1, 5, 1003, 65536)
    try:   # first at a pace where a neighbour always keeps up, then with rank 1 slow to use what it received
        wrong = cluster.run(check_ring, step, sizes, "int64", None, 0.0, PACE, timeout=120)
        late = cluster.run(check_ring, step, sizes, "int64", 1, SLOW, timeout=120)
    except ClusterError as error:
        if "NotImplementedError" in str(error):
            raise NotYet() from None
        raise Wrong(f"running it on the ranks failed: {error}") from None
    if any(any(w) for w in wrong):
        raise Wrong(f"the sums are wrong (wrong elements per rank and size: {wrong}).",
                    "Check which chunk you send and which you add: they differ by one, and both shift with the step.")
    if any(any(w) for w in late):
        raise Wrong("right while every rank keeps pace, wrong when rank 1 is a little slow to add what it received "
                    f"(wrong elements per rank and size: {late}), as a rank is when another process holds its "
                    "CPU: its left neighbour's next chunk landed where the last one still waited to be added.",
                    "Nothing tells a sender that its neighbour is done with a slot (no credit: that would cost a "
                    "round trip per step). Give every step its own slot: slot = s * (largest chunk, in bytes).")


@reference("allreduce.ring-step")
def _ring_step():
    from rdmalab.allreduce.algorithms import reduce_scatter_step
    return reduce_scatter_step
