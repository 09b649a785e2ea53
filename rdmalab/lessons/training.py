"""The training-step lesson's host side: run data-parallel training on a Cluster, check the replicas, draw the step.

    runs = {"rdma": training.run(cluster, {"algorithm": ring_fn, "steps": 60}), ...}
    training.timeline(runs)          # per rank: compute, communicate, idle, as a profiler draws a step
    training.table(runs)             # the step's parts per transport, and how much of the AllReduce overlap hid
    training.landing(rdma_cluster, tcp_cluster)   # rank 0's compute rate while gradients land in its memory
    pytorch = training.in_pytorch(cluster, my_hook, ring_fn)   # DDP on Gloo, then with your ring as its hook

What runs on the ranks is rdmalab.allreduce.training (and .ddp, PyTorch's); this module gathers, checks and draws.
"""
import json
import os
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np

from rdmalab.allreduce import mpi
from rdmalab.allreduce import ranks as engine
from rdmalab.allreduce import training as ranks_side
from rdmalab.errors import RdmalabError

COLOURS = {"compute": "#4c72b0", "communicate": "#dd8452", "idle": "#c44e52"}
SKIP = 5   # the first steps warm caches and connections: medians start after them


class Run:
    """One training run: every rank's records, checked to have kept bit-identical replicas."""

    def __init__(self, label, per_rank, options, device):
        self.label, self.per_rank, self.options = label, sorted(per_rank, key=lambda r: r["rank"]), options
        self.device = device   # what moved the bytes: "rxe0 (pyverbs)", "soft0 (soft)", "loopback TCP", ...
        self.overlap = self.per_rank[0]["overlap"]
        replicas_agree(self.per_rank)

    def records(self):
        return steady(self.per_rank)

    def median(self, key):
        return float(np.median([rec[key] for rec in self.records()]))

    def allreduce_s(self):
        """Median time of a step's AllReduces, all buckets (in the thread, when overlapped: stretched by backward,
        which shares the rank's CPU)."""
        return float(np.median([sum(end - start for _, start, end, _ in rec["buckets"]) for rec in self.records()]))

    def allreduce_cpu_s(self):
        """Median CPU time a step's AllReduces took of the thread that ran them (the NIC's work too, on soft0)."""
        return float(np.median([sum(cpu for *_, cpu in rec["buckets"]) for rec in self.records()]))

    def step_s(self):
        return float(np.median([rec["backward"] + rec["reduce"] + rec["finish"] + rec["update"]
                                for rec in self.records()]))

    def hidden(self, plain):
        """What overlap saved, as a share of the AllReduce the same step waited for without it (`plain`): (plain
        step - this step) / plain AllReduce. Negative when overlapping cost more than it hid (backward slowed by
        the AllReduce thread beside it)."""
        return (plain.step_s() - self.step_s()) / plain.exposed_s() if plain.exposed_s() else 0.0

    def exposed_s(self):
        """What of the AllReduce the step waited for: all of it without overlap, what was left after backward with."""
        return self.median("finish") if self.overlap else self.median("reduce")

    def accuracy(self):
        return self.per_rank[0]["accuracy"]


def warmup(per_rank):
    """How many first steps warm caches and connections (SKIP, or half the run if shorter): medians skip them."""
    return min(SKIP, len(per_rank[0]["records"]) // 2)


def steady(per_rank):
    """Every rank's step records but the warm-up's, as one list."""
    skip = warmup(per_rank)
    return [rec for r in per_rank for rec in r["records"][skip:]]


def your_ring(fn):
    """The learner's ring from lesson 09 if it passes that lesson's check, else the lab's reference ring (says which)."""
    from rdmalab.lessons import exercises
    ring = exercises.REGISTRY["allreduce.ring"].reference()
    got = exercises.check("allreduce.ring", fn)
    import textwrap
    if got.passed:
        print("Your ring passed lesson 09's check: it sums every gradient below.")
        return fn
    print(textwrap.fill(f"Your ring: {got.message.splitlines()[0]} Until it passes, the lab's reference ring sums "
                        "the gradients.", 96, subsequent_indent="  "))
    return ring


ring_from_06 = your_ring   # (its name before the lessons were renumbered)


def run(cluster, options, label=None, timeout=1800):
    """Train on every rank of `cluster` (rdmalab.allreduce.training.train) and check the replicas agree."""
    per_rank = cluster.run(ranks_side.train, dict(options), timeout=timeout)
    return Run(label or f"{cluster.transport}{' + overlap' if options.get('overlap') else ''}", per_rank, options,
               device_of(cluster))


def device_of(cluster):
    """What moves a cluster's bytes, as its ranks name it: "soft0 (soft)", "rxe0 (pyverbs)", or loopback TCP."""
    return cluster.view.apply_sync(engine.device)[0] if cluster.transport == "rdma" else "loopback TCP"


def mpi_run(ranks, options, timeout=1800):
    """The same training with MPI_Allreduce (MPICH, under its mpiexec) summing the gradients."""
    # (what crosses to mpiexec's ranks is JSON: functions stay here, and the ranks keep no parameters to send back)
    options = {k: v for k, v in options.items() if k not in ("algorithm", "on_gradient", "before_update",
                                                            "keep_params")}
    out = subprocess.run([mpi.launcher(), "-n", str(ranks), sys.executable, "-m", "rdmalab.allreduce.training",
                          json.dumps(options)], capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if out.returncode != 0:
        raise RdmalabError(f"training with MPI_Allreduce failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    per_rank = json.loads(out.stdout.strip().splitlines()[-1])
    return Run(f"mpi{' + overlap' if options.get('overlap') else ''}", per_rank, options, "MPICH, shared memory")


def replicas_agree(per_rank):
    """Every rank's parameters, after every step, bit-identical to rank 0's; else RdmalabError naming the first
    rank, step and layer where a replica drifted."""
    first = per_rank[0]
    for other in per_rank[1:]:
        for step, (ours, theirs) in enumerate(zip(first["prints"], other["prints"])):
            for index, (a, b) in enumerate(zip(ours, theirs)):
                if a != b:
                    kind = "weights" if index % 2 == 0 else "biases"
                    raise RdmalabError(f"replicas drifted: rank {other['rank']}'s layer {index // 2 + 1} {kind} "
                                       f"(parameter {index}) differ from rank {first['rank']}'s after step {step}. "
                                       "Every rank must apply the same update to the same parameters: the same "
                                       "summed gradients, all of them, every step.")
    return True


def one_process(options):
    """The same training in one process on the whole global batch (the reference data parallelism must match):
    its parameters after options["steps"] steps."""
    o = {"steps": 100, "batch": 128, "width": ranks_side.WIDTH, "depth": ranks_side.DEPTH, "lr": 0.1, "seed": 0,
         **options}
    train_x, train_y, _, _ = ranks_side.digits()
    params = ranks_side.init(ranks_side.layer_sizes(o["width"], o["depth"]), o["seed"])
    rng = np.random.default_rng(o["seed"] + 1)
    for _ in range(o["steps"]):
        rows = rng.choice(len(train_x), o["batch"], replace=False)
        _, grads = ranks_side.loss_and_grads(params, train_x[rows], train_y[rows], 1.0 / o["batch"])
        for param, grad in zip(params, grads):
            param -= o["lr"] * grad
    return params


def largest_difference(a, b):
    """The largest difference between two parameter lists, relative to the largest parameter."""
    scale = max(float(np.abs(p).max()) for p in a)
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b)) / scale


def table(runs):
    """One line per run, the step's median parts in ms: "fwd+bwd" the compute before the update, "AllReduce" its
    time (in the thread, when overlapped), "waited" what of it the step waited for (all of it without overlap),
    and for an overlapped run beside its plain one ("rdma + overlap" beside "rdma"), "saved": how much shorter
    the step got, as a share of the plain step's AllReduce (Run.hidden)."""
    lines = [f"{'run':<24}{'step':>8}{'fwd+bwd':>9}{'AllReduce':>11}{'waited':>8}{'saved':>7}{'accuracy':>10}",
             f"{'':<24}{'ms':>8}{'ms':>9}{'ms':>11}{'ms':>8}{'':>7}{'':>10}"]
    for name, r in runs.items():
        plain = runs.get(name.replace(" + overlap", "")) if r.overlap else None
        saved = f"{r.hidden(plain):7.0%}" if plain is not None and plain is not r else f"{'':7}"
        lines.append(f"{name:<24}{r.step_s() * 1e3:8.2f}{r.median('backward') * 1e3:9.2f}"
                     f"{r.allreduce_s() * 1e3:11.2f}{r.exposed_s() * 1e3:8.2f}{saved}{r.accuracy():10.1%}")
    if any(r.label.startswith("mpi") for r in runs.values()):
        lines += ["(MPI waits inside MPI_Allreduce, where its waits cannot be told from its work:",
                  " its timeline shows them as communicating)"]
    return "\n".join(lines)


def _bars(ax, lane, spans):
    for kind, start, length in spans:
        ax.broken_barh([(start * 1e3, length * 1e3)], (lane - 0.35, 0.7), color=COLOURS[kind])


def timeline(runs, steps=2):
    """Each run's steps drawn per rank, as a profiler's timeline: compute, communicate (inside the AllReduce,
    doing), idle (inside it, waiting for a neighbour; or the step waiting for overlapped buckets). Overlapped
    runs have a second lane per rank: its AllReduce thread, a bar per bucket."""
    lanes_of = [len(r.per_rank) * (2 if r.overlap else 1) for r in runs.values()]
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 0.8 + sum(0.7 + 0.35 * n for n in lanes_of)), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": [1 + n for n in lanes_of]})   # (one time scale)
    for ax, (name, r) in zip(axes[:, 0], runs.items()):
        first = warmup(r.per_rank)
        zero = min(rank["records"][first]["start"] for rank in r.per_rank)
        lanes, labels = 0, []
        for rank in r.per_rank:
            for rec in rank["records"][first:first + steps]:
                t = rec["start"] - zero
                spans = [("compute", t, rec["backward"])]
                t += rec["backward"]
                if not r.overlap:
                    doing = max(rec["reduce"] - rec["waited"], 0)
                    spans += [("communicate", t, doing), ("idle", t + doing, rec["waited"])]
                t += rec["reduce"]
                spans += [("idle", t, rec["finish"]), ("compute", t + rec["finish"], rec["update"])]
                _bars(ax, lanes, spans)
                if r.overlap:
                    _bars(ax, lanes + 1, [("communicate", s - zero, e - s) for _, s, e, _ in rec["buckets"]])
            labels.append(f"rank {rank['rank']}")
            lanes += 1
            if r.overlap:
                labels.append(f"rank {rank['rank']} AllReduce thread")
                lanes += 1
        ax.set_yticks(range(lanes), labels, fontsize=9)
        ax.invert_yaxis()
        ax.set_title(f"{name}, {r.device}: {steps} steps, {r.step_s() * 1e3:.1f} ms each (median)", fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms since the first rank started the step")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    fig.legend(handles, list(COLOURS), loc="upper right", fontsize=9, ncol=3)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def landing(rdma_cluster, tcp_cluster, seconds=1.0, nbytes=1 << 20):
    """Rank 0's compute rate alone and while rank 1 streams `nbytes` messages into its memory, over RDMA WRITEs
    and over TCP: {"rdma": {...}, "tcp": {...}}, each with alone and landing (steps/s), their ratio, and the
    bytes that landed per second."""
    out = {}
    for name, cluster in (("rdma", rdma_cluster), ("tcp", tcp_cluster)):
        zero, one = cluster.run(ranks_side.compute_while_landing, {"seconds": seconds, "nbytes": nbytes})[:2]
        out[name] = {"device": device_of(cluster), "alone": zero["alone"], "landing": zero["landing"], "ratio": zero["landing"] / zero["alone"],
                     "landed_MBps": one["sent_bytes"] / (seconds + 0.15) / 1e6, "cpu": zero["cpu"]}
    return out


def landing_chart(figures):
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = ["alone", "RDMA WRITEs landing", "TCP landing"]
    values = [figures["rdma"]["alone"], figures["rdma"]["landing"], figures["tcp"]["landing"]]
    ratios = ["1.00", f"{figures['rdma']['ratio']:.2f}", f"{figures['tcp']['ratio']:.2f}"]
    # (each stream's own "alone" is its baseline: its ratio is printed on its bar)
    ax.barh(names, values, color=["#999999", COLOURS["communicate"], COLOURS["idle"]])
    for y, (value, ratio) in enumerate(zip(values, ratios)):
        ax.text(value, y, f"  {ratio} x alone", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("rank 0's training steps (forward + backward) per second")
    ax.set_title(f"Rank 0 computes while rank 1's gradients land in its memory (RDMA: {figures['rdma']['device']})",
                 fontsize=10)
    ax.set_xlim(0, max(values) * 1.3)
    fig.tight_layout()
    return fig


class DdpRun:
    """One PyTorch DDP run (rdmalab.allreduce.ddp.train) on every rank, checked to have kept bit-identical replicas."""

    def __init__(self, label, per_rank):
        self.label, self.per_rank = label, sorted(per_rank, key=lambda r: r["rank"])
        replicas_agree(self.per_rank)

    def step_s(self):
        """Median step: forward, backward with the buckets' AllReduces inside, the update."""
        return float(np.median([rec["backward"] + rec["update"] for rec in steady(self.per_rank)]))

    def compute_s(self):
        """Median forward and backward without the AllReduce (DDP's no_sync), and the update: the step alone."""
        update = np.median([rec["update"] for r in self.per_rank for rec in r["records"]])
        return float(np.median([t for r in self.per_rank for t in r["compute_alone"]]) + update)

    def waited_s(self):
        """What the AllReduces added to the step: what of them backward did not hide."""
        return max(self.step_s() - self.compute_s(), 0.0)

    def accuracy(self):
        return self.per_rank[0]["accuracy"]


def in_pytorch(cluster, hook, ring, steps=100, model=None, timeout=1800):
    """Lesson 10's model in PyTorch's DistributedDataParallel on the ranks of `cluster`: first on Gloo (DDP's own
    hook), then with `hook` (a DDP communication hook; rdmalab.allreduce.ddp.ring_hook is the reference) running
    `ring`: {"gloo": DdpRun, "your ring": DdpRun}. model: width, depth, batch, bucket_cap (ddp.train's options)."""
    from rdmalab.allreduce import ddp
    hosts = getattr(cluster, "hosts", None) or ["127.0.0.1"]
    master = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]   # (rank 0 serves the process group's store)
    options = {**(model or {}), "steps": steps, "master": master}
    runs = {"gloo": DdpRun("gloo", cluster.run(ddp.train, {**options, "hook": None}, timeout=timeout))}
    runs["your ring"] = DdpRun("your ring", cluster.run(ddp.train, {**options, "hook": hook, "ring": ring},
                                                         timeout=timeout))
    return runs


def pytorch_table(runs):
    lines = [f"{'DDP with':<12}{'step':>8}{'compute':>9}{'waited':>8}{'accuracy':>10}",
             f"{'':<12}{'ms':>8}{'ms':>9}{'ms':>8}{'':>10}"]
    for name, r in runs.items():
        lines.append(f"{name:<12}{r.step_s() * 1e3:8.2f}{r.compute_s() * 1e3:9.2f}{r.waited_s() * 1e3:8.2f}"
                     f"{r.accuracy():10.1%}")
    return "\n".join(lines)


def pytorch_chart(runs, device):
    """One bar per run: the step's compute (forward, backward and the update, without the AllReduce) and what the
    AllReduces added to it."""
    fig, ax = plt.subplots(figsize=(7, 2.6))
    names = ["DDP on Gloo (loopback TCP)" if name == "gloo" else f"DDP, {name} ({device})" for name in runs]
    computes = [r.compute_s() * 1e3 for r in runs.values()]
    waits = [r.waited_s() * 1e3 for r in runs.values()]
    ax.barh(names, computes, color=COLOURS["compute"], label="compute")
    ax.barh(names, waits, left=computes, color=COLOURS["idle"], label="waiting for the AllReduce")
    for y, (c, w) in enumerate(zip(computes, waits)):
        ax.text(c + w, y, f"  {c + w:.1f} ms", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(c + w for c, w in zip(computes, waits)) * 1.25)
    ax.set_xlabel("one training step, ms (median)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("The same model and batches in PyTorch DDP: who sums the gradients", fontsize=10)
    fig.tight_layout()
    return fig
