"""The AllReduce lessons (naive-allreduce, allreduce) measure the transport, not the scheduler: a CPU for each rank,
the sentences that say what a run showed (or that it was disturbed, and so shows nothing), and ranks that share CPUs
as an experiment of its own.

    RANKS = ranks_and_cpus.one_cpu_each(most=4)       # as many ranks as CPUs, 2 to 4; says how many and why
    ranks_and_cpus.naive_against_ring(naive, ring)    # naive-allreduce: per size, then what this run says
    ranks_and_cpus.takeaway(ring, tcp, mpi, yours)    # allreduce: the transports' table, in one sentence
    shared = ranks_and_cpus.share_cpus(sizes, iters)  # allreduce: 4 ranks on fewer CPUs, each transport again
    ranks_and_cpus.sharing(fair, shared)              # what sharing did to each, and the sentence

A run is disturbed when its rounds differ by more than allreduce.report.NOISY times, or a rank waited for a CPU
more than BUSY of the time (Report.disturbed): then a sentence says so instead of concluding. The transports'
takeaway also asks how far apart the host keeps the first two CPUs (rdmalab.proc.handover): a VM's host may put
its vCPUs far apart for minutes, and every ring's figure is then the host's.
"""
import textwrap

from rdmalab.allreduce import report
from rdmalab.lessons.answer import _size as size_text
from rdmalab.proc import handover
from rdmalab.proc.cpus import pinned_to, usable_cpus

SHARED_RANKS, SHARED_CPUS = 4, 2   # the experiment: 4 ranks on at most 2 CPUs


def _say(text):
    print(textwrap.fill(text, 96))   # fits a laptop's notebook


def one_cpu_each(most=4, cpus=None):
    """As many ranks as this process has CPUs, at least 2 (an AllReduce needs two) and at most `most`; says why."""
    cpus = usable_cpus() if cpus is None else cpus
    ranks = min(max(2, int(cpus)), most)
    if ranks <= cpus:
        _say(f"{ranks} ranks, one CPU each ({cpus:g} usable here): a rank waits for its neighbour's bytes, never for "
             f"a CPU, so the times below are the transport's. Ranks that share CPUs are an experiment of their own, "
             f"at the end.")
    else:
        _say(f"{ranks} ranks on {cpus:g} usable CPU: an AllReduce needs two, so they take turns on it, and every time "
             f"below includes their turns (the scheduler's time, not the transport's).")
    return ranks


def _disturbed(size, reports):
    """What disturbed these runs ({what ran: report}) at `size`, in words ('' if none was)."""
    said = {name: r.disturbed(size) for name, r in reports.items() if r is not None}
    return "; ".join(f"{name}: {what}" for name, what in said.items() if what)


def _largest(r):
    return r.data["rows"][-1]


def naive_against_ring(naive, ring):
    """Both algorithms' times per size, then what this run says about them at the largest size."""
    for n, r in zip(naive.data["rows"], ring.data["rows"]):
        print(f"{size_text(r['size']):>8}: naive {n['in']['time_us']:8.0f} us, ring {r['in']['time_us']:8.0f} us")
    size, p = _largest(ring)["size"], ring.data["ranks"]
    disturbed = _disturbed(size, {"the naive AllReduce": naive, "the ring": ring})
    if disturbed:
        return _say(f"At {size_text(size)} this run was disturbed ({disturbed}): it cannot say which algorithm is "
                    f"faster. Run the cell again when the machine is quieter.")
    t_naive, t_ring = _largest(naive)["in"]["time_us"], _largest(ring)["in"]["time_us"]
    same = " (with 2 ranks, the same bytes)" if p == 2 else ""
    _say(f"At {size_text(size)}, on {p} ranks, the naive AllReduce took {t_naive / t_ring:.2f}x the ring's time. "
         f"Counting bytes through the busiest link, (p - 1) n each way through rank 0 against 2 (p - 1)/p n, it "
         f"should take p/2 = {p / 2:g}x{same}.")


def takeaway(ring, tcp, mpi, yours=None, handover_us=None):
    """The busbw table's sentence, at its largest size: what this run says, or that it was disturbed.
    `handover_us`: how long the host's first two CPUs take to hand 512 KiB over (measured now if not given)."""
    size = _largest(ring)["size"]
    disturbed = _disturbed(size, {"the RDMA ring": ring, "the TCP ring": tcp, "your ring": yours})
    handover_us = handover.handover_us() if handover_us is None else handover_us
    if handover.far_apart(handover_us):
        disturbed = "; ".join(filter(None, [disturbed, (
            f"the host had put this machine's two CPUs far apart: they handed 512 KiB over in {handover_us:.0f} us "
            f"just now, about {handover.NEAR_US} us when near, and every ring pays that at every step")]))
    if disturbed:
        return _say(f"At {size_text(size)} this run was disturbed ({disturbed}): these figures cannot rank the "
                    f"transports. Run the measurements again when the machine is quieter.")
    rdma, over_tcp, shm = _largest(ring)["in"]["busbw"], _largest(tcp)["in"]["busbw"], mpi["rows"][-1]["busbw"]
    text = (f"At {size_text(size)} the same ring moved {rdma:.2f} GB/s of busbw over RDMA and {over_tcp:.2f} over "
            f"TCP ({rdma / over_tcp:.1f}x), on the same CPUs; MPICH, through shared memory, {shm:.2f}.")
    if yours is not None:
        mine = _largest(yours)["in"]["busbw"]
        text += (f" Your ring moved {mine:.2f}, {mine / rdma:.0%} of the library's, which sends each chunk in 1 MiB "
                 f"pieces so that a neighbour adds one while the next is on its way.")
    _say(text)


def share_cpus(sizes, iters, ranks=SHARED_RANKS, progress=None):
    """The experiment: `ranks` ranks on at most SHARED_CPUS of this process's CPUs (fewer CPUs than ranks), the
    ring over RDMA, the ring over TCP, and MPICH, at `sizes`. Returns {"ranks", "cpus", "rdma", "tcp", "mpi"}."""
    from rdmalab.allreduce.cluster import Cluster
    say = progress or (lambda line: None)
    cpus = max(1, min(int(usable_cpus()), SHARED_CPUS))
    out = {"ranks": ranks, "cpus": cpus}
    with pinned_to(cpus):   # the ranks, started meanwhile, inherit it
        for transport in ("rdma", "tcp"):
            with Cluster(ranks=ranks, transport=transport, max_bytes=max(sizes), progress=say) as cluster:
                out[transport] = report.measure(cluster, sizes, "ring", iters=iters, progress=lambda row, n, of: say(
                    f"{ranks} ranks on {cpus} CPU{'s' if cpus > 1 else ''}, ring over {transport}: {n} of {of} sizes"))
        say(f"{ranks} ranks on {cpus} CPU{'s' if cpus > 1 else ''}: MPI_Allreduce")
        out["mpi"] = report.mpi_allreduce(ranks, [s // 4 for s in sizes], "float32", iters)
    say("done")
    return out


def sharing(fair, shared):
    """What sharing CPUs did to each transport, at the largest size both runs measured: a table, then its sentence.
    `fair` is {"rdma", "tcp", "mpi"} from the one-CPU-each run, `shared` what share_cpus returned."""
    size = _largest(shared["rdma"])["size"]
    rows = []
    for name, key in (("the RDMA ring", "rdma"), ("the TCP ring", "tcp"), ("MPICH (shared memory)", "mpi")):
        mine, theirs = fair[key], shared[key]
        if key == "mpi":
            before = next(r["busbw"] for r in mine["rows"] if r["size"] == size)
            after, waited = theirs["rows"][-1]["busbw"], None
        else:
            before = next(r["in"]["busbw"] for r in mine.data["rows"] if r["size"] == size)
            after, waited = _largest(theirs)["in"]["busbw"], _largest(theirs)["in"]["waited"]
        rows.append((name, before, after, waited))
    ranks, cpus, fair_ranks = shared["ranks"], shared["cpus"], fair["rdma"].data["ranks"]
    shared_cpus = f"{ranks} ranks, {cpus} CPU{'s' if cpus > 1 else ''}"
    print(f"{f'busbw at {size_text(size)} (GB/s)':<24}{f'{fair_ranks} ranks, own CPUs':>20}{shared_cpus:>18}"
          f"   waited for a CPU")
    for name, before, after, waited in rows:
        print(f"{name:<24}{before:20.2f}{after:18.2f}   {'-' if waited is None else f'{waited:.0%}'}")
    disturbed = _disturbed(size, {"the RDMA ring": fair["rdma"], "the TCP ring": fair["tcp"]})
    if disturbed:
        return _say(f"Your one-CPU-each run was itself disturbed at {size_text(size)} ({disturbed}): these ratios mix "
                    f"that with the sharing, and say nothing reliable. Run both again when the machine is quieter.")
    kept = sorted((after / before, name) for name, before, after, _ in rows)
    waited = max(w for *_, w in rows if w is not None)
    _say(f"Sharing {cpus} CPU{'s' if cpus > 1 else ''} among {ranks} ranks, a rank waited for a CPU up to {waited:.0%} "
         f"of the time, and busbw (which allows for the number of ranks) kept {kept[-1][0]:.0%} of its own-CPU "
         f"figure for {kept[-1][1]} and {kept[0][0]:.0%} for {kept[0][1]}: times the scheduler set as much as the "
         f"transport. That is why the lesson gives each rank a CPU.")
