"""RDMA against TCP, measured the way RDMA engineers measure: perftest's tests and statistics.

    from rdmalab import bench
    r = bench.run("write_lat", sizes=[8], iters=1000)     # a Results table: print it, r.to_json()
    bench.compare(sizes=[8, 65536])                       # RDMA and TCP side by side, with ratios

Three processes take part: this one only orchestrates; an *initiator* and a *target* process run
the data path (one-sided RDMA needs a second process whose memory changes while it runs no code).
They swap connection details through this process, as perftest swaps them over TCP. For each
size the initiator times every iteration (perftest's tposted/tcompleted) and counts what it spent
around its data loop; this process reads the target's counters from /proc before and after, while
the target sits blocked (passive tests) or serves (ping-pongs). See rdmalab/bench/stats.py for the
statistics and rdmalab/proc/procstat.py for the counters.

Tests (perftest's names, plus the TCP baseline from rdmalab.sockets):
    write_lat  RDMA WRITE ping-pong, half round trip      read_lat  RDMA READ, full round trip
    send_lat   SEND/RECV ping-pong, half round trip       write_bw  RDMA WRITE stream, target passive
    tcp_lat    TCP ping-pong, half round trip             tcp_bw    TCP stream
    tcp_rr     TCP request/response (8 B asks, the server answers from its memory), full round trip:
               read_lat's work, done through the server's CPU

The rule of the package: rdmalab.bench imports rdmalab.verbs, rdmalab.proc, rdmalab.sockets and
rdmalab.errors only, never rdmalab.allreduce or rdmalab.lessons (docs/architecture.md).
"""
from rdmalab.bench import stats
from rdmalab.bench.catalogue import (  # noqa: F401
    ALL_SIZES,
    CQ_MOD,
    DEFAULT_ITERS,
    DEFAULT_SIZE,
    EVENT_TESTS,
    MAX_SIZE,
    TESTS,
    TX_DEPTH,
    BenchError,
    iterations_for,
)
from rdmalab.bench.results import (Comparison, Results, caveats, copies_by_design, device_kind,  # noqa: F401
                                   waited_for_cpu)
from rdmalab.proc import procstat
from rdmalab.proc.children import Helper

REPLY_TIMEOUT = 120.0
MAX_ITERS = 100_000_000  # iterations per size: their timestamps (a list of ints) must fit in memory


def _side(role, provider):
    """One side, a `python -m rdmalab.bench.child <role>` helper process."""
    return Helper(f"the {role} process", "rdmalab.bench.child", role, timeout=REPLY_TIMEOUT, error=BenchError,
                  **({"RDMALAB_PROVIDER": provider} if provider else {}))


def run(test, sizes=None, iters=None, provider=None, host="127.0.0.1", warmup=None, progress=None, events=False):
    """Run one test over `sizes` (default: perftest's size for it; ALL_SIZES for a sweep).

    `progress(row, done, total)` is called as each size completes. `events` (perftest's -e): the
    RDMA sides sleep on completion events instead of polling their CQs. Returns a Results table.
    """
    if test not in TESTS:
        raise BenchError(f"unknown test {test!r}: choose one of {', '.join(TESTS)}")
    t = TESTS[test]
    sizes = list(sizes or [DEFAULT_SIZE[t.kind]])
    bad = [s for s in sizes if not isinstance(s, int) or s < 1 or s > MAX_SIZE]
    if bad:
        raise BenchError(f"sizes must be whole numbers of bytes from 1 to {MAX_SIZE} (64 MiB); got {bad}")
    if events and test not in EVENT_TESTS:
        raise BenchError(f"--events applies to {', '.join(EVENT_TESTS)}: {test} "
                         + ("waits on memory, as perftest's does: no completion tells it the peer wrote"
                            if test == "write_lat" else "uses TCP, which always sleeps in the kernel"))
    if iters is not None and (not isinstance(iters, int) or not 8 <= iters <= MAX_ITERS):
        raise BenchError(f"iterations must be a whole number from 8 (perftest drops the top 2 samples) to "
                         f"{MAX_ITERS:,} (each is timed and kept in memory); got {iters!r}")
    target, initiator = _side("target", provider), _side("initiator", provider)
    rows, info = [], {}
    try:
        for child in (target, initiator):
            child.send(op="open", test=test, max_size=max(sizes), host=host, events=events)
        t_end, i_end = target.reply(), initiator.reply()
        info = {"provider": i_end.pop("provider"), "device": i_end.pop("device", None), "link": i_end.pop("link", None)}
        target.send(op="connect", peer=i_end)
        initiator.send(op="connect", peer=t_end)
        target.reply(), initiator.reply()
        for n, size in enumerate(sizes):
            count = iterations_for(test, size, iters)
            warm = warmup if warmup is not None else min(100, count // 10)
            target.send(op="serve", size=size, iters=count, warmup=warm)
            target.reply()
            before = procstat.snapshot(target.proc.pid)
            initiator.send(op="run", size=size, iters=count, warmup=warm)
            result = initiator.reply(watch=[target])
            target_spent = procstat.since(before)   # the target sat blocked throughout: exact
            if not t.passive_target:                 # it served: it counted its measured part itself
                target.send(op="report")
                target_spent = target.reply()["spent"]
            if t.kind == "lat":
                figures = stats.latency(result["tposted"], t.rtt_factor)
            else:
                figures = stats.bandwidth(size, result["tposted"], result["tcompleted"], result["cq_mod"])
            row = {"size": size, **figures, "initiator": result["spent"], "target": target_spent,
                   "bytes_copied_by_cpu": _cpu_copies(t, info, size, count, result["spent"], target_spent)}
            rows.append(row)
            if progress:
                progress(row, n + 1, len(sizes))
    finally:
        initiator.close()
        target.close()
    return Results(test, info["provider"], info["device"], rows, events, info["link"])


def _cpu_copies(test, info, size, count, initiator, target):
    """Bytes some CPU copied, where something counts them: TCP's into and out of the kernel (its read/write
    byte counts); soft0's on its shared-memory link, where the program's own CPU copies for the NIC and
    soft0 counts it (emulated.copied_bytes; a passive target sits blocked and copies nothing). None where
    nothing counts: soft0's udp link (its NIC processes copy), rxe's kernels (in the initiator's post_send, its
    system time, and in the target host's softirq) and a hardware NIC (its DMA: no CPU copies at all).
    results.copies_by_design says what each device's design copies, a constant shown as such."""
    if test.transport == "tcp":
        return initiator["bytes_written"] + initiator["bytes_read"] + target["bytes_written"] + target["bytes_read"]
    counted = initiator.get("copied_bytes")
    return None if counted is None else counted + (target.get("copied_bytes") or 0)


def alternating(tests, size=8, iters=1000, rounds=3, progress=None):
    """Latency tests measured side by side: `rounds` rounds, each running every test once at `size`, the
    order rotating every round so that all see the same machine. Returns {test: {"t_typical": the median
    over the rounds, "rounds": each round's, "switches_per_message": {side: median context switches
    (voluntary + involuntary) per message}}}. `progress(test, round, t_typical)` after each run."""
    import statistics
    tests = list(tests)
    seen = {t: {"rounds": [], "initiator": [], "target": []} for t in tests}
    for r in range(rounds):
        for test in tests[r % len(tests):] + tests[:r % len(tests)]:
            row = run(test, sizes=[size], iters=iters).rows[0]
            seen[test]["rounds"].append(row["t_typical"])
            for side in ("initiator", "target"):
                spent = row[side]
                seen[test][side].append((spent["voluntary_switches"] + spent["involuntary_switches"]) / row["iterations"])
            if progress:
                progress(test, r + 1, row["t_typical"])
    return {t: {"t_typical": statistics.median(s["rounds"]), "rounds": s["rounds"],
                "switches_per_message": {side: statistics.median(s[side]) for side in ("initiator", "target")}}
            for t, s in seen.items()}


def compare(sizes=(8, 65536, 1 << 20), iters=None, provider=None, progress=None):
    """RDMA and TCP side by side in one run: write_lat vs tcp_lat, write_bw vs tcp_bw."""
    pairs = [("write_lat", "tcp_lat"), ("write_bw", "tcp_bw")]
    results = {}
    for rdma, tcp in pairs:
        for name in (rdma, tcp):
            results[name] = run(name, sizes=list(sizes), iters=iters, provider=provider, progress=progress)
    return Comparison(results, pairs)
