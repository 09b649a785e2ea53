"""What the glass-box view (lessons.nic_view) costs a cell that posts: RDMA WRITEs of 64 B, one signaled
in 32 (lesson 07's loop), on soft0, with no view and with a view shown (its thread redrawing 4 times a
second), in turn, round after round: 10,000 of them (the issue's cell: on soft0 it takes a few tens of
milliseconds, often less than one redraw apart), then 100 times as many (seconds: the view redraws all
along, its steady cost). Also what one redraw takes.

    python benchmarks/nic_view.py [--rounds 5] [--writes 10000] [--out nic_view.json]

Target (issue 28): with a view shown, the cell takes at most 1.5x as long, both runs. With no view the
data path is unchanged: nothing of the view runs (benchmarks/ab.py compares write_lat and write_bw
with a commit before the view).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RDMALAB_PROVIDER", "soft")
from report import emit  # noqa: E402

from rdmalab import lessons  # noqa: E402
from rdmalab import verbs as v  # noqa: E402
from rdmalab.verbs import rc  # noqa: E402

e = v.enums


def post(pair, writes, batch=32):
    """`writes` WRITEs of 64 B from a into b, the last of each batch signaled and waited for. Seconds taken."""
    wrs = []
    for i in range(batch):
        w = v.wr.SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[v.wr.SGE(pair.a_mr.buf, 64, pair.a_mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED if i == batch - 1 else 0)
        w.set_wr_rdma(pair.b_mr.rkey, pair.b_mr.buf)
        wrs.append(w)
    started = time.perf_counter()
    for _ in range(writes // batch):
        for w in wrs:
            pair.a.post_send(w)
        rc.wait_for_completion(pair.cq_a)
    return time.perf_counter() - started


def shown(pair):
    """A view of the pair, shown as a notebook shows it (its widget is drawn nowhere here), refreshing."""
    import IPython.display
    view = lessons.nic_view(pair.a, pair.b)
    keep = IPython.display.display
    IPython.display.display = lambda bundle, raw: None
    try:
        view._ipython_display_()
    finally:
        IPython.display.display = keep
    return view


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writes", type=int, default=10_000)
    parser.add_argument("--out")
    args = parser.parse_args()
    ctx = v.device.Context(name=v.choose_route().device)
    pd = v.pd.PD(ctx)
    runs, targets = {}, {}
    with lessons.Pair(ctx, pd, max_send_wr=64, sq_sig_all=0) as pair:
        post(pair, 1024)   # warm up
        redraw = []
        view = lessons.nic_view(pair.a, pair.b)
        for _ in range(50):
            started = time.perf_counter()
            view.refresh()
            redraw.append(time.perf_counter() - started)
        for writes in (args.writes, args.writes * 100):
            times, redraws = {"no view": [], "view shown": []}, []
            for round_ in range(args.rounds):
                times["no view"].append(post(pair, writes))
                view = shown(pair)
                times["view shown"].append(post(pair, writes))
                view.close()
                redraws.append(view.refreshes)
                print(f"{writes} WRITEs, round {round_ + 1}/{args.rounds}: no view {times['no view'][-1] * 1e3:.0f} ms, "
                      f"view shown {times['view shown'][-1] * 1e3:.0f} ms ({view.refreshes} redraws)", file=sys.stderr)
            median = {k: statistics.median(t) for k, t in times.items()}
            ratio = median["view shown"] / median["no view"]
            runs[writes] = {"seconds": {k: {"median": m, "min": min(times[k]), "max": max(times[k])}
                                        for k, m in median.items()},
                            "redraws_per_round": redraws, "ratio_view_over_none": ratio}
            targets[f"{writes} WRITEs with a view shown take <= 1.5x as long (measured {ratio:.2f}x)"] = ratio <= 1.5
    pd.close()
    ctx.close()
    report = {"benchmark": "nic_view", "rounds": args.rounds, "cpus": len(os.sched_getaffinity(0)),
              "redraw_ms_median": statistics.median(redraw) * 1e3, "runs": runs, "targets": targets}
    return emit(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
