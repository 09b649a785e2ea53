"""soft0's udp link (RoCEv2 over UDP between NIC processes) against TCP on loopback, in one run.

    python benchmarks/wire.py [--quick] [--out results.json]

The sides run on two hosts of this machine (127.0.16.1 and .2; a lossy pair on .3 and .4, whose
NICs start with RDMALAB_SOFT_LOSS=0.01 and a seed), each with its own NIC process. Targets (issue 15):
  wire write_bw 16 MiB >= 0.5 x tcp_bw 16 MiB (Python TCP stream on loopback);
  wire write_lat 8 B <= 3 x tcp_lat 8 B (both half round trips, t_typical);
  with 1% loss a 16 MiB write_bw completes at >= 0.25 x lossless (that it arrives intact is
  tests/wire/test_link.py's job: this only times it).
Timing on a shared machine is noisy: compare ratios from one run, not absolute times.
"""
import argparse
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from report import emit  # noqa: E402

from rdmalab import bench  # noqa: E402
from rdmalab.bench import BenchError  # noqa: E402
from rdmalab.proc.children import Helper  # noqa: E402

BW_SIZE = 16 << 20
LOSSLESS, LOSSY = ("127.0.16.1", "127.0.16.2"), ("127.0.16.3", "127.0.16.4")


def on_hosts(hosts, **faults):
    """Make bench.run put its target on hosts[0] and its initiator on hosts[1], on the udp link."""
    def side(role, provider):
        return Helper(f"the {role} process", "rdmalab.bench.child", role, timeout=bench.REPLY_TIMEOUT,
                      error=BenchError, RDMALAB_PROVIDER="soft", RDMALAB_SOFT_LINK="udp",
                      RDMALAB_SOFT_HOST=hosts[role == "initiator"], **faults)
    bench._side = side


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    bw_iters, lat_iters = (8, 200) if args.quick else (20, 1000)
    plain = bench._side
    tcp_bw = bench.run("tcp_bw", sizes=[BW_SIZE], iters=bw_iters).rows[0]
    tcp_lat = bench.run("tcp_lat", sizes=[8], iters=lat_iters).rows[0]
    on_hosts(LOSSLESS)
    wire_bw = bench.run("write_bw", sizes=[BW_SIZE], iters=bw_iters).rows[0]
    wire_lat = bench.run("write_lat", sizes=[8], iters=lat_iters).rows[0]
    on_hosts(LOSSY, RDMALAB_SOFT_LOSS="0.01", RDMALAB_SOFT_SEED="15")
    lossy_bw = bench.run("write_bw", sizes=[BW_SIZE], iters=bw_iters).rows[0]
    bench._side = plain
    mib = {name: row["bw_avg_mib"] for name, row in
           (("tcp_bw", tcp_bw), ("wire_write_bw", wire_bw), ("wire_write_bw_1pct_loss", lossy_bw))}
    lat = {"tcp_lat": tcp_lat["t_typical"], "wire_write_lat": wire_lat["t_typical"]}
    ratios = {"wire_bw / tcp_bw": mib["wire_write_bw"] / mib["tcp_bw"],
              "wire_lat / tcp_lat": lat["wire_write_lat"] / lat["tcp_lat"],
              "lossy_bw / lossless_bw": mib["wire_write_bw_1pct_loss"] / mib["wire_write_bw"]}
    report = {"machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
                         f"{platform.python_version()}",
              "bandwidth_MiB_s_16MiB": mib, "latency_us_8B_t_typical": lat, "ratios": ratios,
              "targets": {"wire write_bw >= 0.5 x tcp_bw": ratios["wire_bw / tcp_bw"] >= 0.5,
                          "wire write_lat <= 3 x tcp_lat": ratios["wire_lat / tcp_lat"] <= 3,
                          "1% loss write_bw >= 0.25 x lossless": ratios["lossy_bw / lossless_bw"] >= 0.25}}
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
