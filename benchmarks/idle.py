"""What the lab costs while the learner reads: CPU used by a notebook kernel that holds a connected QP
pair, and by an idle 4-rank cluster, over the same window.

    python benchmarks/idle.py [--quick] [--seconds S] [--out results.json]

Targets (issue 12): each uses less than 2% of one CPU. A lab that busy-polls while nothing happens
takes a core from every learner on a shared server.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402
from report import emit  # noqa: E402

from rdmalab.allreduce.cluster import Cluster  # noqa: E402

HOLD_A_PAIR = """
from rdmalab import verbs as v
from rdmalab.lessons import Pair
ctx = v.device.Context(name=v.choose_route().device)
pd = v.pd.PD(ctx)
pair = Pair(ctx, pd)
"""


def cpu_seconds(processes):
    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def share_of_a_cpu(processes, seconds):
    before = cpu_seconds(processes)
    time.sleep(seconds)
    return (cpu_seconds(processes) - before) / seconds


def idle_kernel(seconds):
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        reply = client.execute_interactive(HOLD_A_PAIR, timeout=120)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"the kernel could not connect a pair: {reply['content']}")
        kernel = psutil.Process(manager.provisioner.pid)
        time.sleep(1)   # let the execution's own work finish
        return share_of_a_cpu([kernel, *kernel.children(recursive=True)], seconds)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def idle_cluster(seconds, ranks=4):
    with Cluster(ranks=ranks) as cluster:
        cluster.allreduce(1024, iters=2)   # every rank has done real work, and gone back to waiting
        processes = psutil.Process().children(recursive=True)
        time.sleep(1)
        return share_of_a_cpu(processes, seconds), len(processes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 3 s window instead of 10 s")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    started = time.time()
    kernel = idle_kernel(seconds)
    cluster, processes = idle_cluster(seconds)
    figures = {"window_s": seconds, "kernel_with_a_connected_pair_cpu_share": kernel,
               "idle_4_rank_cluster_cpu_share": cluster, "cluster_processes": processes}
    print(f"over {seconds:.0f} s: kernel holding a QP pair {kernel:.2%} of a CPU; "
          f"idle 4-rank cluster ({processes} processes) {cluster:.2%}", file=sys.stderr)
    targets = {"a kernel holding a connected pair uses < 2% of a CPU": kernel < 0.02,
               "an idle 4-rank cluster uses < 2% of a CPU": cluster < 0.02}
    return emit({"benchmark": "idle", "quick": args.quick, "seconds": round(time.time() - started, 1),
                 "figures": figures, "targets": targets}, args.out)


if __name__ == "__main__":
    sys.exit(main())
