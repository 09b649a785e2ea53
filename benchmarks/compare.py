"""RDMA (the active provider: soft0 here) against TCP and memcpy, measured side by side in one run,
on a quiet machine, pinned to one CPU, and beside a CPU-bound load: where learners really are.

    python benchmarks/compare.py [--quick] [--mode all|quiet|one-core|loaded|freeze] [--out results.json]

Prints a summary and writes JSON with every figure and the targets (issues 4, 12 and 25):
  quiet     write_lat 8 B <= 0.2 x tcp_lat 8 B; read_lat <= 0.3 x tcp_lat; write_bw 16 MiB >= 0.8 x
            numpy's copy; during write_bw the target's CPU <= 1% of the initiator's and no read/write
            syscall on either side; during tcp_bw the receiver spends >= 30% of the sender's CPU.
            (send_lat / write_lat is reported, not targeted: on soft0 it is Python's cost of a receive.)
  one-core  the same process tree pinned to one CPU (as `taskset -c 0`): read_lat 8 B <= 0.5 x tcp_rr 8 B
            (remote memory without the remote CPU, against a request the server must be scheduled to
            answer; both full round trips); write_bw >= 0.8 x numpy's copy; the target's CPU during
            write_bw <= 1% of the initiator's. The ping-pongs (write_lat, tcp_lat) are reported with
            the context switches each side made per message: on one CPU a ping-pong waits for the
            scheduler on any device, so they carry no target;
  loaded    beside one CPU-bound process per usable CPU: write_lat <= tcp_lat;
  freeze    the target process stopped (SIGSTOP): an RDMA WRITE, READ and two atomics complete against
            it, a TCP sender to it stalls once the kernel's buffers are full (the bytes it got in).
Latency rounds alternate RDMA and TCP, and bandwidth rounds write_bw, numpy's copy and tcp_bw, so
that all see the same machine; each ratio is taken from the medians of all rounds. Timing on a
shared machine is noisy: compare ratios, not absolute times.
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from report import emit  # noqa: E402

from rdmalab import bench  # noqa: E402
from rdmalab.proc.cpus import pinned_to_one_cpu, usable_cpus  # noqa: E402

BW_SIZE = 16 << 20
MODES = ("quiet", "one-core", "loaded", "freeze")


def numpy_copy_mib_s(size, copies):
    """Bandwidth of numpy copying `size` bytes between two preallocated arrays, `copies` times."""
    src, dst = np.ones(size, np.uint8), np.zeros(size, np.uint8)
    np.copyto(dst, src)   # touch every page first, as the benchmark's MRs are
    start = time.perf_counter_ns()
    for _ in range(copies):
        np.copyto(dst, src)
    return size * copies / ((time.perf_counter_ns() - start) / 1e9) / 2 ** 20


def latencies(tests, rounds, iters, switches=None):
    """Median t_typical at 8 B of each test over `rounds` rounds, the order rotating every round
    (bench.alternating). If `switches` is a dict, it gets each test's context switches per message."""
    said = lambda test, r, t: print(f"round {r}/{rounds} {test:9} 8 B  t_typical {t:.2f} us", file=sys.stderr)  # noqa: E731
    measured = bench.alternating(tests, 8, iters, rounds, progress=said)
    if switches is not None:
        switches.update({t: m["switches_per_message"] for t, m in measured.items()})
    return {t: m["t_typical"] for t, m in measured.items()}, {t: m["rounds"] for t, m in measured.items()}


def bandwidths(rounds, iters):
    """write_bw, numpy's copy and tcp_bw at 16 MiB, `rounds` times in turn; each figure is the median of
    its rounds, and the write_bw run reported in full is the median one. A copy of 16 MiB takes about
    a millisecond, so a single run is at the mercy of whatever else the machine does for that long."""
    write_runs, copies, tcp_runs = [], [], []
    for r in range(rounds):
        write_runs.append(bench.run("write_bw", sizes=[BW_SIZE], iters=iters))
        copies.append(numpy_copy_mib_s(BW_SIZE, iters))
        tcp_runs.append(bench.run("tcp_bw", sizes=[BW_SIZE], iters=iters))
        print(f"round {r + 1}/{rounds} write_bw 16 MiB {write_runs[-1].rows[0]['bw_avg_mib']:.0f} MiB/s, "
              f"numpy copy {copies[-1]:.0f} MiB/s, tcp_bw {tcp_runs[-1].rows[0]['bw_avg_mib']:.0f} MiB/s",
              file=sys.stderr)

    def median_run(runs):
        return sorted(runs, key=lambda run: run.rows[0]["bw_avg_mib"])[len(runs) // 2]
    write_bw, tcp_bw, copy_bw = median_run(write_runs), median_run(tcp_runs), statistics.median(copies)
    w, t = write_bw.rows[0], tcp_bw.rows[0]
    syscalls = {side: w[side]["read_syscalls"] + w[side]["write_syscalls"] for side in ("initiator", "target")}
    figures = {"write_bw_16MiB_mib_s": w["bw_avg_mib"], "numpy_copy_16MiB_mib_s": copy_bw,
               "bandwidth_rounds": {"write_bw": [run.rows[0]["bw_avg_mib"] for run in write_runs],
                                    "numpy_copy": copies,
                                    "tcp_bw": [run.rows[0]["bw_avg_mib"] for run in tcp_runs]},
               "write_bw_over_numpy_copy": w["bw_avg_mib"] / copy_bw, "tcp_bw_16MiB_mib_s": t["bw_avg_mib"],
               "write_bw_target_cpu_s": w["target"]["cpu_s"], "write_bw_initiator_cpu_s": w["initiator"]["cpu_s"],
               "write_bw_target_over_initiator_cpu": w["target"]["cpu_s"] / w["initiator"]["cpu_s"],
               "write_bw_data_path_syscalls": syscalls,
               "tcp_bw_receiver_over_sender_cpu": t["target"]["cpu_s"] / t["initiator"]["cpu_s"]}
    return figures, {"write_bw": write_bw.to_dict(), "tcp_bw": tcp_bw.to_dict()}


def quiet(rounds, lat_iters, bw_iters):
    med, lat = latencies(["write_lat", "tcp_lat", "send_lat", "read_lat"], rounds, lat_iters)
    figures = {f"{t}_8B_us": v for t, v in med.items()}
    figures.update(latency_rounds=lat, write_lat_over_tcp_lat=med["write_lat"] / med["tcp_lat"],
                   send_lat_over_write_lat=med["send_lat"] / med["write_lat"],
                   read_lat_over_tcp_lat=med["read_lat"] / med["tcp_lat"])
    bw, results = bandwidths(rounds, bw_iters)
    figures.update(bw)
    targets = {
        "write_lat <= 0.2 x tcp_lat": figures["write_lat_over_tcp_lat"] <= 0.2,
        "read_lat <= 0.3 x tcp_lat": figures["read_lat_over_tcp_lat"] <= 0.3,
        "write_bw >= 0.8 x numpy copy": figures["write_bw_over_numpy_copy"] >= 0.8,
        "write_bw target CPU <= 1% of initiator": figures["write_bw_target_over_initiator_cpu"] <= 0.01,
        "write_bw zero syscalls on both sides": figures["write_bw_data_path_syscalls"] == {"initiator": 0, "target": 0},
        "tcp_bw receiver CPU >= 30% of sender": figures["tcp_bw_receiver_over_sender_cpu"] >= 0.30,
    }
    return figures, targets, results


def one_core(rounds, lat_iters, bw_iters):
    """Everything pinned to this process's first CPU, as `taskset -c N` does: the sides inherit it."""
    switches = {}
    with pinned_to_one_cpu() as cpu:
        med, lat = latencies(["read_lat", "tcp_rr", "write_lat", "tcp_lat"], rounds, lat_iters, switches)
        bw, results = bandwidths(rounds, bw_iters)
    figures = {"cpu": cpu, "read_lat_8B_us": med["read_lat"], "tcp_rr_8B_us": med["tcp_rr"],
               "read_lat_over_tcp_rr": med["read_lat"] / med["tcp_rr"],
               "pingpong_scheduler_bound": {
                   "why": "both sides of a ping-pong are programs: on one CPU every message waits for a context "
                          "switch, on any device, a hardware NIC included",
                   "write_lat_8B_us": med["write_lat"], "tcp_lat_8B_us": med["tcp_lat"],
                   "write_lat_over_tcp_lat": med["write_lat"] / med["tcp_lat"]},
               "switches_per_message": switches, "latency_rounds": lat, **bw}
    targets = {
        "one core: read_lat <= 0.5 x tcp_rr": figures["read_lat_over_tcp_rr"] <= 0.5,
        "one core: write_bw >= 0.8 x numpy copy": figures["write_bw_over_numpy_copy"] >= 0.8,
        "one core: write_bw target CPU <= 1% of initiator": figures["write_bw_target_over_initiator_cpu"] <= 0.01,
    }
    return figures, targets, results


def loaded(rounds, lat_iters, bw_iters):
    """Beside one CPU-bound process per usable CPU (a compile, a training job, another learner)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(1, round(usable_cpus())))]
    try:
        time.sleep(0.5)
        med, lat = latencies(["write_lat", "tcp_lat"], rounds, lat_iters)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    figures = {"cpu_bound_processes": len(hogs), "write_lat_8B_us": med["write_lat"], "tcp_lat_8B_us": med["tcp_lat"],
               "latency_rounds": lat, "write_lat_over_tcp_lat": med["write_lat"] / med["tcp_lat"]}
    return figures, {"loaded: write_lat <= tcp_lat": figures["write_lat_over_tcp_lat"] <= 1.0}, {}


def freeze(rounds, lat_iters, bw_iters):
    """Lesson 05's freeze-the-target experiment, once: what still reaches a stopped process."""
    from rdmalab import verbs as v
    from rdmalab.lessons import freeze as experiment
    from rdmalab.lessons.checks.one_sided import stop_and_reach   # the lesson's reference solution
    from rdmalab.lessons.target import RemoteBuffer
    from rdmalab.verbs import rc
    e = v.enums
    with v.device.Context(name=v.choose_route().device) as ctx:
        pd, cq = v.pd.PD(ctx), v.cq.CQ(ctx, 64)
        qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(64, 4), sq_sig_all=0))
        local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        with RemoteBuffer() as target:
            mine = rc.endpoint(ctx, qp, local)
            rc.connect(ctx, qp, mine, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
            target.connect(mine)
            figures = experiment.run(stop_and_reach, experiment.poster(qp, local, target), cq, local, target).data
    figures = {k: value.hex() if isinstance(value, bytes) else value for k, value in figures.items()}   # (JSON)
    targets = {"freeze: every RDMA operation completes against the stopped target":
               figures["rdma_completed"] == figures["rdma_posted"] and figures["target_found_pattern"],
               "freeze: a TCP sender to the stopped target stalls": figures["tcp_stalled"]}
    return figures, targets, {}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations and rounds (about a minute)")
    parser.add_argument("--mode", choices=("all",) + MODES, default="all", help="which conditions to measure")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    rounds, lat_iters, bw_iters = (2, 2000, 32) if args.quick else (3, 10000, 64)
    started = time.time()
    from rdmalab import verbs
    report = {"benchmark": "compare", "quick": args.quick, "provider": verbs.PROVIDER, "python": platform.python_version(),
              "cpus": os.cpu_count(), "usable_cpus": usable_cpus(), "modes": {}, "targets": {}}
    for mode in MODES if args.mode == "all" else (args.mode,):
        print(f"== {mode}", file=sys.stderr)
        run = {"quiet": quiet, "one-core": one_core, "loaded": loaded, "freeze": freeze}[mode]
        figures, targets, results = run(rounds, lat_iters, bw_iters)
        report["modes"][mode] = {"figures": figures, "targets": targets, "results": results}
        report["targets"].update(targets)
    report["seconds"] = round(time.time() - started, 1)
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
