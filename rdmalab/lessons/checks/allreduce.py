"""The AllReduce lesson (allreduce): its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference


@exercise("allreduce.ring-step", "One reduce-scatter step of the ring, on every rank",
          hints=["At step s, rank r sends chunk (r - s) mod p to rank r+1 (comm.t.put into its 'stage' at the "
                 "step's slot), waits for rank r-1 (comm.t.wait), and adds chunk (r - s - 1) mod p from the "
                 "stage into x."])
def _check_ring_step(step, cluster):
    from rdmalab.allreduce.algorithms import check_ring
    from rdmalab.allreduce.cluster import ClusterError
    try:
        wrong = cluster.run(check_ring, step, timeout=120)
    except ClusterError as error:
        if "NotImplementedError" in str(error):
            raise NotYet() from None
        raise Wrong(f"running it on the ranks failed: {error}") from None
    if any(any(w) for w in wrong):
        raise Wrong(f"the sums are wrong (wrong elements per rank and size: {wrong}).",
                    "Check which chunk you send and which you add: they differ by one, and both shift with the step.")


@reference("allreduce.ring-step")
def _ring_step():
    from rdmalab.allreduce.algorithms import reduce_scatter_step
    return reduce_scatter_step
