"""RDMA (the active provider: soft0 here) against TCP and memcpy, measured side by side in one run.

    python benchmarks/compare.py [--quick] [--out results.json]

Prints a summary and writes JSON with every figure and the targets of issue 4:
  - write_lat 8 B median <= 0.2 x tcp_lat 8 B median;
  - write_bw at 16 MiB >= 0.8 x numpy's copy bandwidth for the same size;
  - during write_bw: target CPU <= 1% of the initiator's, zero read/write syscalls on both sides;
  - during tcp_bw at the same size, the receiver spends >= 30% of the sender's CPU time.
Latency rounds alternate RDMA and TCP so that both see the same machine; the ratio is taken from
the medians of all rounds. Timing on a shared machine is noisy: compare ratios, not absolute times.
"""
import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from report import emit  # noqa: E402
from rdmalab import bench  # noqa: E402

BW_SIZE = 16 << 20


def numpy_copy_mib_s(size, copies):
    """Bandwidth of numpy copying `size` bytes between two preallocated arrays, `copies` times."""
    src, dst = np.ones(size, np.uint8), np.zeros(size, np.uint8)
    np.copyto(dst, src)   # touch every page first, as the benchmark's MRs are
    start = time.perf_counter_ns()
    for _ in range(copies):
        np.copyto(dst, src)
    return size * copies / ((time.perf_counter_ns() - start) / 1e9) / 2 ** 20


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations and rounds (under two minutes)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    rounds, lat_iters, bw_iters = (2, 2000, 32) if args.quick else (3, 10000, 64)
    started = time.time()

    lat = {"write_lat": [], "tcp_lat": []}
    for r in range(rounds):
        order = ("write_lat", "tcp_lat") if r % 2 == 0 else ("tcp_lat", "write_lat")
        for test in order:
            result = bench.run(test, sizes=[8], iters=lat_iters)
            lat[test].append(result.rows[0]["t_typical"])
            print(f"round {r + 1}/{rounds} {test:9} 8 B  t_typical {lat[test][-1]:.2f} us", file=sys.stderr)
    write_lat, tcp_lat = statistics.median(lat["write_lat"]), statistics.median(lat["tcp_lat"])

    write_bw = bench.run("write_bw", sizes=[BW_SIZE], iters=bw_iters)
    copy_bw = numpy_copy_mib_s(BW_SIZE, bw_iters)
    tcp_bw = bench.run("tcp_bw", sizes=[BW_SIZE], iters=bw_iters)
    w, t = write_bw.rows[0], tcp_bw.rows[0]
    print(f"write_bw 16 MiB {w['bw_avg_mib']:.0f} MiB/s, numpy copy {copy_bw:.0f} MiB/s, "
          f"tcp_bw {t['bw_avg_mib']:.0f} MiB/s", file=sys.stderr)

    syscalls = {side: w[side]["read_syscalls"] + w[side]["write_syscalls"] for side in ("initiator", "target")}
    figures = {
        "write_lat_8B_us": write_lat, "tcp_lat_8B_us": tcp_lat, "latency_rounds": lat,
        "write_lat_over_tcp_lat": write_lat / tcp_lat,
        "write_bw_16MiB_mib_s": w["bw_avg_mib"], "numpy_copy_16MiB_mib_s": copy_bw,
        "write_bw_over_numpy_copy": w["bw_avg_mib"] / copy_bw, "tcp_bw_16MiB_mib_s": t["bw_avg_mib"],
        "write_bw_target_cpu_s": w["target"]["cpu_s"], "write_bw_initiator_cpu_s": w["initiator"]["cpu_s"],
        "write_bw_target_over_initiator_cpu": w["target"]["cpu_s"] / w["initiator"]["cpu_s"],
        "write_bw_data_path_syscalls": syscalls,
        "tcp_bw_receiver_over_sender_cpu": t["target"]["cpu_s"] / t["initiator"]["cpu_s"],
    }
    targets = {
        "write_lat <= 0.2 x tcp_lat": figures["write_lat_over_tcp_lat"] <= 0.2,
        "write_bw >= 0.8 x numpy copy": figures["write_bw_over_numpy_copy"] >= 0.8,
        "write_bw target CPU <= 1% of initiator": figures["write_bw_target_over_initiator_cpu"] <= 0.01,
        "write_bw zero syscalls on both sides": syscalls == {"initiator": 0, "target": 0},
        "tcp_bw receiver CPU >= 30% of sender": figures["tcp_bw_receiver_over_sender_cpu"] >= 0.30,
    }
    report = {"benchmark": "compare", "quick": args.quick, "provider": write_bw.provider,
              "device": write_bw.device, "python": platform.python_version(), "cpus": os.cpu_count(),
              "seconds": round(time.time() - started, 1), "figures": figures, "targets": targets,
              "results": {"write_bw": write_bw.to_dict(), "tcp_bw": tcp_bw.to_dict()}}
    return emit(report, args.out)

if __name__ == "__main__":
    sys.exit(main())
