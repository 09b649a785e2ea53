"""perftest's statistics, computed as perftest computes them (linux-rdma/perftest, perftest_parameters.c).

Latency (print_report_lat): one timestamp per iteration, taken as it is posted; the samples are the
differences between consecutive timestamps (iters - 1 of them), sorted, and the top
LAT_MEASURE_TAIL (2) dropped: n = iters - 3 remain.
  t_min = sorted[0]; t_max = sorted[n] (the largest kept one after the tail's cut, as perftest indexes);
  t_typical = the median of the n kept; t_avg = their mean;
  t_stdev as perftest has it: each deviation is truncated to a whole microsecond before squaring, so
  deviations under 1 us count as 0 (perftest's own quirk; `t_stdev_exact` is the textbook figure);
  99% = sorted[ceil(n * 0.99)], 99.9% = sorted[ceil(n * 0.999)].
Write and send latency are ping-pongs: every figure is divided by 2 (half the round trip). Read
and atomic latency are one full round trip each.

Bandwidth (print_report_bw): tposted[i] when WR i was posted, tcompleted[j] when the completion
of a signaled WR j (every cq_mod-th, and the last) was polled.
  BW average = size * iters / (tcompleted[last] - tposted[0]);
  BW peak = size / min over i <= j of (tcompleted[j] - tposted[i]) / (j - i + 1), j signaled;
  MsgRate = iters / (tcompleted[last] - tposted[0]), in millions per second (Mpps).
MiB/s is 2**20 bytes per second; Gb/s is 10**9 bits per second (perftest's --report_gbits).
Timestamps here are integer nanoseconds (time.perf_counter_ns) where perftest counts CPU cycles.
"""
import math

import numpy as np

LAT_MEASURE_TAIL = 2
MIB = 0x100000
GBIT = 125_000_000  # bytes per second in one Gb/s


def latency(tposted_ns, rtt_factor=2):
    """perftest's latency figures, in microseconds, from per-iteration post timestamps (ns)."""
    t = np.asarray(tposted_ns, dtype=np.int64)
    if len(t) < LAT_MEASURE_TAIL + 2:
        raise ValueError(f"need at least {LAT_MEASURE_TAIL + 2} iterations for perftest's latency report, "
                         f"got {len(t)}")
    delta = np.sort(np.diff(t))
    n = len(delta) - LAT_MEASURE_TAIL
    per_us = 1000.0 * rtt_factor
    if (n - 1) % 2:   # perftest's get_median, in whole clock units like its cycles
        median = (int(delta[n // 2]) + int(delta[n // 2 - 1])) // 2
    else:
        median = int(delta[n // 2])
    kept = delta[:n] / per_us
    average = float(kept.sum() / n)
    truncated = np.trunc(average - kept)        # C's (int) conversion in perftest's loop
    stdev = math.sqrt(float(np.sum(truncated * truncated)) / n)
    return {"iterations": len(t), "t_min": float(delta[0] / per_us), "t_max": float(delta[n] / per_us),
            "t_typical": median / per_us, "t_avg": average, "t_stdev": stdev,
            "t_stdev_exact": float(kept.std()),
            "p99": float(delta[math.ceil(n * 0.99)] / per_us), "p99_9": float(delta[math.ceil(n * 0.999)] / per_us)}


def bandwidth(size, tposted_ns, tcompleted_ns, cq_mod):
    """perftest's bandwidth figures. `tcompleted_ns` has an entry per WR; only the signaled ones
    (index cq_mod-1, 2*cq_mod-1, ... and the last) are read."""
    tp = np.asarray(tposted_ns, dtype=np.int64)
    tc = np.asarray(tcompleted_ns, dtype=np.int64)
    iters = len(tp)
    if iters < 1 or len(tc) != iters:
        raise ValueError("need one post and one completion timestamp per WR")
    signaled = np.arange(cq_mod - 1, iters, cq_mod)
    if iters % cq_mod:
        signaled = np.append(signaled, iters - 1)
    i = np.arange(iters)
    best = None
    for j in signaled:   # per-message time of every window [i, j] that ends at a completion
        window = (tc[j] - tp[: j + 1]) // (j - i[: j + 1] + 1)
        low = int(window.min())
        best = low if best is None else min(best, low)
    total_s = (int(tc[-1]) - int(tp[0])) / 1e9
    rate = size * iters / total_s
    peak = size / (best / 1e9) if best and best > 0 else float("inf")
    return {"iterations": iters, "bw_peak_mib": peak / MIB, "bw_avg_mib": rate / MIB,
            "bw_peak_gbps": peak / GBIT, "bw_avg_gbps": rate / GBIT, "msg_rate_mpps": iters / total_s / 1e6}
