"""`rdmalab allreduce`'s report: the hand-built AllReduce on N ranks, as nccl-tests reports NCCL's.

    rdmalab allreduce --ranks 4 --size 1K,1M,64M --algo ring --transport rdma [--compare-mpi]

Columns as nccl-tests' all_reduce_perf: size (bytes), count (elements), type, redop, root (-1),
then out-of-place and in-place: time (us, the slowest rank's mean), algbw = size / time (GB/s,
10^9 B/s) and busbw = algbw * 2 (n - 1) / n, the bandwidth each link must carry; #wrong counts
elements outside the bound of rdmalab.allreduce.algorithms (0 expected). `# Avg bus bandwidth` averages busbw.

A request is validated once, by the entry point it came through: run() before any rank starts,
measure() before its first size; the ranks then run it as given (Cluster.run, ranks.timed_allreduce).
"""
import html
import json
import os
import subprocess
import sys

import numpy as np

from rdmalab.allreduce import mpi
from rdmalab.allreduce import ranks as engine   # what each engine runs
from rdmalab.allreduce.algorithms import validate
from rdmalab.allreduce.cluster import Cluster
from rdmalab.errors import RdmalabError, RequestError

NCCL_TYPE = {"float32": "float", "float64": "double", "int32": "int32", "int64": "int64"}


def run(ranks=2, sizes=(1 << 20,), algorithm="ring", transport="rdma", dtype="float32", iters=5,
        compare_mpi=False, provider=None, progress=None, starting=None, oversubscribe=False):
    """Start a cluster, measure, stop it: the CLI's report. `progress(row, done, total)` hears of each
    size measured, `starting(line)` of the cluster's start (its cost, how many ranks are ready)."""
    validate(algorithm, dtype, ranks)   # the only validation of this request, before any rank starts
    itemsize = np.dtype(dtype).itemsize
    if not sizes or min(sizes) < itemsize:
        raise RequestError(f"sizes {sizes}: each must hold at least one {dtype} element ({itemsize} bytes)")
    with Cluster(ranks=ranks, transport=transport, max_bytes=max(max(s // itemsize, 1) for s in sizes) * itemsize,
                 algorithms=(algorithm,), provider=provider, progress=starting, oversubscribe=oversubscribe) as cluster:
        report = _measure(cluster, sizes, algorithm, dtype, iters, progress)
    if compare_mpi:
        report.data["mpi"] = mpi_allreduce(ranks, [row["count"] for row in report.data["rows"]], dtype, iters)
    return report


def measure(cluster, sizes, algorithm="ring", dtype="float32", iters=5, progress=None):
    """nccl-tests' measurements on a running cluster: out of place, then in place, per size. `algorithm` is a
    name, or a function fn(comm, x) that sums x in place on every rank (a learner's, in lesson 09)."""
    validate(algorithm, dtype, cluster.ranks)
    return _measure(cluster, sizes, algorithm, dtype, iters, progress)


def _measure(cluster, sizes, algorithm, dtype, iters, progress):
    """measure() of a request validated already."""
    itemsize = np.dtype(dtype).itemsize
    counts = [max(size // itemsize, 1) for size in sizes]
    device = cluster.view.apply_sync(engine.device)[0] if cluster.transport == "rdma" else "tcp"
    rows = []
    for n, count in enumerate(counts):
        row = {"size": count * itemsize, "count": count, "type": dtype}
        for place, in_place in (("out", False), ("in", True)):
            # what Cluster.allreduce runs (one warm-up, then the check), without validating the request again
            per_rank = cluster.run(engine.timed_allreduce, count, dtype, algorithm, iters, 1, True, in_place)
            t = max(r["time"] for r in per_rank)
            row[place] = {**_figures(count * itemsize, t, cluster.ranks, sum(r["wrong"] for r in per_rank)),
                          **_steadiness(per_rank)}
        rows.append(row)
        if progress:
            progress(row, n + 1, len(counts))
    name = getattr(algorithm, "__name__", algorithm)   # a function's own name
    return Report({"ranks": cluster.ranks, "algorithm": name, "transport": cluster.transport, "device": device,
                   "dtype": dtype, "iters": iters, "rows": rows})


def _figures(size, seconds, ranks, wrong):
    algbw = size / seconds / 1e9
    return {"time_us": seconds * 1e6, "algbw": algbw, "busbw": algbw * 2 * (ranks - 1) / ranks if ranks > 1 else 0.0,
            "wrong": wrong}


def _steadiness(per_rank):
    """How steady one measurement was: "spread", its slowest round over its fastest (a round takes as long as its
    slowest rank), and "waited", the largest share of the timed rounds that a rank spent waiting for a CPU."""
    rounds = [max(times) for times in zip(*(r["rounds"] for r in per_rank))]
    total = sum(rounds)
    return {"spread": max(rounds) / min(rounds) if rounds and min(rounds) > 0 else 1.0,
            "waited": max(r["waited_for_cpu"] for r in per_rank) / total if total else 0.0}


def mpi_allreduce(ranks, counts, dtype, iters):
    """MPI_Allreduce (mpi4py over the MPICH wheel) at the same counts, timed the same way. iters: one number,
    or one per count."""
    iters = ",".join(map(str, iters)) if isinstance(iters, (list, tuple)) else str(iters)
    cmd = [mpi.launcher(), "-n", str(ranks), sys.executable, "-m", "rdmalab.allreduce.mpi",
           "--counts", ",".join(map(str, counts)), "--dtype", dtype, "--iters", iters]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if out.returncode != 0:
        raise RdmalabError(f"MPI_Allreduce failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    itemsize = np.dtype(dtype).itemsize
    data["rows"] = [{"size": r["count"] * itemsize, "count": r["count"],
                     **_figures(r["count"] * itemsize, r["time"], ranks, r["wrong"])} for r in data["rows"]]
    return data


NOISY, BUSY = 1.5, 0.1   # disturbed: rounds that differ by more than NOISY times, or BUSY of the time waiting for a CPU


class Report:
    def __init__(self, data):
        self.data = data

    def disturbed(self, size=None):
        """'' if the measurement at `size` (default: the largest) was steady; else what disturbed it, in words."""
        row = next(r for r in reversed(self.data["rows"]) if size is None or r["size"] == size)
        spread = max(row[p].get("spread", 1.0) for p in ("out", "in"))
        waited = max(row[p].get("waited", 0.0) for p in ("out", "in"))
        said = ([f"its rounds differed by up to {spread:.1f}x"] if spread > NOISY else []) + \
               ([f"a rank waited for a CPU {waited:.0%} of the time"] if waited > BUSY else [])
        return " and ".join(said)

    def time_us(self, size, placement="in"):
        """The time (us) an AllReduce of `size` bytes took, in place ("in") or out of place ("out")."""
        return next(row[placement]["time_us"] for row in self.data["rows"] if row["size"] == size)

    def to_json(self):
        return json.dumps(self.data, indent=1)

    def avg_busbw(self):
        values = [row[p]["busbw"] for row in self.data["rows"] for p in ("out", "in")]
        return sum(values) / len(values)

    def text(self):
        d = self.data
        lines = [f"# rdmalab allreduce: {d['ranks']} ranks, algorithm {d['algorithm']}, transport {d['transport']}"
                 + (f" on {d['device']}" if d["transport"] == "rdma" else " (loopback sockets)"),
                 "#",
                 f"# {'':>64}out-of-place{'':>23}in-place",
                 f"# {'size':>10} {'count':>12} {'type':>8} {'redop':>6} {'root':>6} "
                 f"{'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}",
                 f"# {'(B)':>10} {'(elements)':>12} {'':>8} {'':>6} {'':>6} "
                 f"{'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6} {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"]
        for row in d["rows"]:
            cells = "".join(f" {row[p]['time_us']:9.1f} {row[p]['algbw']:7.2f} {row[p]['busbw']:7.2f} {row[p]['wrong']:6d}"
                            for p in ("out", "in"))
            lines.append(f"  {row['size']:>10} {row['count']:>12} {NCCL_TYPE[row['type']]:>8} {'sum':>6} {-1:>6}{cells}")
        wrong = sum(row[p]["wrong"] for row in d["rows"] for p in ("out", "in"))
        lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
        lines.append(f"# Avg bus bandwidth    : {self.avg_busbw():.4f}")
        if "mpi" in d:
            lines += ["#", f"# MPI_Allreduce ({d['mpi']['library'].strip()}), same ranks and sizes, same timing:",
                      f"# {'size':>10} {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}   {'ours/MPI busbw (in-place)':>26}"]
            for row, theirs in zip(d["rows"], d["mpi"]["rows"]):
                ratio = row["in"]["busbw"] / theirs["busbw"] if theirs["busbw"] else float("nan")
                lines.append(f"  {theirs['size']:>10} {theirs['time_us']:9.1f} {theirs['algbw']:7.2f} "
                             f"{theirs['busbw']:7.2f} {theirs['wrong']:6d}   {ratio:26.2f}")
        return "\n".join(lines)

    __str__ = __repr__ = text

    def _repr_html_(self):
        """nccl-tests' columns as an HTML table that fits a notebook (print(report) gives nccl-tests' own text)."""
        d, esc = self.data, html.escape
        where = f"on {d['device']}" if d["transport"] == "rdma" else "(loopback sockets)"
        head = ("<tr><th colspan=3></th><th colspan=4>out-of-place</th><th colspan=4>in-place</th></tr>"
                "<tr><th>size (B)</th><th>count</th><th>type</th>"
                + "<th>time (us)</th><th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>#wrong</th>" * 2 + "</tr>")
        body = "".join(
            f"<tr><td>{row['size']:,}</td><td>{row['count']:,}</td><td>{NCCL_TYPE[row['type']]}</td>"
            + "".join(f"<td>{row[p]['time_us']:.1f}</td><td>{row[p]['algbw']:.2f}</td><td>{row[p]['busbw']:.2f}</td>"
                      f"<td>{row[p]['wrong']}</td>" for p in ("out", "in")) + "</tr>" for row in d["rows"])
        wrong = sum(row[p]["wrong"] for row in d["rows"] for p in ("out", "in"))
        return (f"<p><b>{d['ranks']} ranks, {esc(d['algorithm'])}, {esc(d['transport'])} {esc(where)}</b> "
                f"(nccl-tests' columns; <code>print()</code> it for their text)</p>"
                f"<table style='font-size:0.9em'>{head}{body}</table>"
                f"<p>Out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}; "
                f"avg bus bandwidth {self.avg_busbw():.4f} GB/s</p>")


class _Shown:
    """Text that shows as HTML in a notebook and as itself elsewhere."""

    def __init__(self, text, html_text):
        self.text, self.html_text = text, html_text

    def __repr__(self):
        return self.text

    def _repr_html_(self):
        return self.html_text


def busbw_table(ring, tcp, mpi, yours=None):
    """In-place busbw per size of the ring over RDMA, the ring over TCP and MPI_Allreduce, side by side; with
    `yours` (a report of a learner's ring over RDMA, under its function's name), that too."""
    columns = [("ring over RDMA", [r["in"]["busbw"] for r in ring.data["rows"]])]
    if yours is not None:
        columns.append((f"{yours.data['algorithm']} over RDMA", [r["in"]["busbw"] for r in yours.data["rows"]]))
    columns += [("ring over TCP", [r["in"]["busbw"] for r in tcp.data["rows"]]),
                ("MPI_Allreduce (shared memory)", [m["busbw"] for m in mpi["rows"]])]
    sizes = [r["size"] for r in ring.data["rows"]]
    width = [max(len(name), 6) for name, _ in columns]
    title = f"{'size':>10} " + " ".join(f"{name:>{w}}" for (name, _), w in zip(columns, width)) + "  (busbw, GB/s)"
    text = "\n".join([title] + [f"{s:>10} " + " ".join(f"{values[i]:>{w}.2f}" for (_, values), w in zip(columns, width))
                               for i, s in enumerate(sizes)])
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in columns)
    body = "".join(f"<tr><td>{s:,}</td>" + "".join(f"<td>{values[i]:.2f}</td>" for _, values in columns) + "</tr>"
                   for i, s in enumerate(sizes))
    return _Shown(text, f"<table><tr><th>size (B)</th>{head}</tr>{body}</table><p>in-place busbw, GB/s</p>")


def ranks_per_cpu_note(ranks, cpus=None):
    """What to make of AllReduce times when the ranks outnumber the CPUs ('' when they do not)."""
    from rdmalab.proc.cpus import usable_cpus
    cpus = usable_cpus() if cpus is None else cpus
    if ranks <= cpus:
        return _Shown("", "")
    text = (f"{ranks} ranks on {cpus:g} usable CPUs take turns: at each step a rank may wait for another to give up "
            f"its CPU, a wait of the scheduler's, not of the transport. At small sizes that wait is most of the time, "
            f"so which algorithm or transport wins there can change from run to run; the largest size shows the "
            f"transport. To see it at every size: fewer ranks (RANKS = {max(int(cpus), 2)}), or close other work.")
    return _Shown(text, f"<p style='border-left:4px solid #9a6700;padding-left:8px'>{html.escape(text)}</p>")
