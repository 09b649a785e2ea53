"""The scaling lesson's plumbing: 2 ranks measured for the learner's own fit (checks/scaling_out.py), the fit
judged on sizes it did not see and on 4 ranks, then the model scaled to clusters.

The model assumes each rank has a processor of its own, as in a cluster. A laptop or a Binder session
has one or two CPUs, and 4 ranks spread over 2 of them wait for each other in ways the scheduler decides,
which no cost model predicts. So every measurement here runs its ranks on ONE CPU (one_cpu()): nothing runs
at the same time, and a run takes the sum of its ranks' work, which the model counts exactly (p turns,
model.on_shared_cpus). The learner's fit divides the turns out: its costs are one rank's, as if it had the CPU
to itself.

The cluster half mixes the learner's numbers (this machine's copy rate, lesson 01's copies per byte) with
published ones (link speeds, latencies) and assumptions (cores that copy, compute per step); inputs() says
which is which. Tables are HTML in a notebook and text elsewhere; charts say their point in their title.
"""
import contextlib
import html
import os
import textwrap
import time

import numpy as np

from rdmalab.allreduce import model
from rdmalab.lessons import evidence
from rdmalab.lessons.live import status_line
from rdmalab.lessons.nccl import Table
from rdmalab.lessons.series import number
from rdmalab.proc.cpus import usable_cpus
from rdmalab import verbs

MiB = 1 << 20
TOLERANCE = 0.25       # the error under which a prediction counts as holding
GRADIENTS = "13B parameters (bf16)"
NDR = "InfiniBand NDR 400 Gb/s (RDMA)"


# ------------------------------------------------------------------ shown in a notebook, printed elsewhere

class View:
    """Paragraphs and tables shown together: HTML in a notebook, text elsewhere (never a Python repr)."""

    def __init__(self, *parts):
        self.parts = [p for p in parts if p]

    def _repr_html_(self):
        return "".join(p._repr_html_() if isinstance(p, Table) else f"<p>{html.escape(p)}</p>" for p in self.parts)

    def __repr__(self):
        return "\n".join(str(p) for p in self.parts)


def _show(fig):
    """Show a figure now (in a notebook; above what the cell returns) and close it."""
    import matplotlib.pyplot as plt
    from IPython import get_ipython
    if get_ipython() is not None:
        from IPython.display import display
        display(fig)
        plt.close(fig)


def _time(seconds):
    if seconds < 0.9995e-3:   # (what would print as 1e+03 us is 1 ms)
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def _size(n):
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n >> 10} KiB"


# ------------------------------------------------------------------ this machine: 2 ranks, then 4, on one CPU

@contextlib.contextmanager
def one_cpu():
    """Pin this process to one CPU while the block runs (as `taskset -c` does); what it starts meanwhile
    (a cluster's ranks) stays there. Yields how many CPUs the ranks share: 1, or all usable CPUs where the
    system cannot pin (not Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        yield usable_cpus()
        return
    keep = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(keep)})
    try:
        yield 1
    finally:
        os.sched_setaffinity(0, keep)


@contextlib.contextmanager
def _ranks_on_one_cpu(ranks, sizes, say):
    """A cluster of `ranks` ranks started on one CPU; yields (cluster, CPUs they share)."""
    from rdmalab.allreduce.cluster import Cluster
    started = time.monotonic()
    say(f"starting {ranks} ranks on one CPU ...")
    with one_cpu() as cpus:
        cluster = Cluster(ranks=ranks, transport="rdma", max_bytes=max(sizes), progress=say)
    say(f"{ranks} ranks started in {time.monotonic() - started:.0f} s; measuring ...")
    with cluster as running:
        yield running, cpus


def _measure(cluster, sizes, rounds, iters, say, what):
    def progress(done, total):
        say(f"{what}: {done} of {total} runs ({rounds} rounds of {len(sizes)} sizes)")
    return model.measure(cluster, sizes, rounds=rounds, iters=iters, progress=progress)


class TwoRanks:
    """The 2-rank measurement: the ring's times {bytes: seconds} (medians of rounds), the CPUs the ranks
    shared, the turns each step of theirs took there (model.turns), the device they ran on, and every round's
    time {bytes: [seconds, ...]} (rounds; None if not kept): how far one size's repeats differ."""

    def __init__(self, times, cpus, device, rounds=None):
        self.times, self.cpus, self.device, self.rounds = times, cpus, device, rounds
        self.turns = model.turns(2, cpus)

    def spread(self, n):
        """How much the rounds of size n differ: the slowest over the fastest, less 1 (0 without rounds)."""
        ts = (self.rounds or {}).get(n) or [1.0]
        return max(ts) / min(ts) - 1

    def __repr__(self):
        shown = ", ".join(f"{_size(n)} {_time(t)}" for n, t in sorted(self.times.items()))
        return textwrap.fill(f"2 ranks on {self.device}, taking turns on {self.cpus:g} CPU{'s' if self.cpus != 1 else ''} "
                             f"({self.turns:g} turns a step): {shown}", 96, subsequent_indent="  ")   # fits a laptop


def two_ranks(sizes, quick, attempts=3):
    """2 ranks on one CPU: the ring's time at each size (the median of rounds), as a TwoRanks. A busy machine
    can make a small size slower than a large one, and then no fit has a positive beta: the times are checked
    with the model's own fit on the smallest and the largest size (gamma from numpy's add rate), and measured
    again with twice the rounds; at the last attempt the fastest round of each size (the least disturbed)."""
    gamma, rounds, iters = 1 / model.reduction_rate(), 3 if quick else 5, 3 if quick else 10
    say = status_line()
    with _ranks_on_one_cpu(2, sizes, say) as (cluster, cpus):
        for attempt in range(1, attempts + 1):
            medians, every = _measure(cluster, sizes, rounds, iters, say, "2 ranks")
            times = medians if attempt < attempts else {n: min(ts) for n, ts in every.items()}
            try:
                model.held_out([(2, n, t) for n, t in times.items()], [(2, sizes[0]), (2, sizes[-1])], gamma=gamma,
                               cpus=cpus)
                say(f"2 ranks on one CPU: {len(sizes)} sizes, {rounds} rounds each")
                return TwoRanks(times, cpus, verbs.choose_route().device, every)
            except ValueError as error:
                if attempt == attempts:
                    raise ValueError(f"{error}. This machine was too busy for {attempts} attempts: close what else "
                                     f"runs and run this cell again") from None
                print(textwrap.fill(f"attempt {attempt}: {error}; the machine is busy, measuring again with "
                                    f"{rounds * 2} rounds", 96, subsequent_indent="  "))   # fits a laptop's notebook
                rounds *= 2


def show_fit(costs, two, fit_on, add=None):
    """What a fit found, (alpha, beta, gamma): one rank's costs on two.device, and its error on the sizes of
    `two` it did not see (fitted on `fit_on`), each predicted for 2 ranks taking two.turns turns a step.
    With `add` ({n: seconds} of numpy's add, also fitted), every equation is shown, fitted or not: what the model
    makes of it and its miss, the residual of a fit of more equations than unknowns, beside how much each size's
    rounds differ, and what the residual says about the model (residuals())."""
    if add is not None:
        return residuals(costs, two, fit_on, add)
    alpha, beta, gamma = (float(c) for c in costs)
    fitted = model.Costs(alpha, beta, gamma, f"one rank of {two.device}")
    rows, errors = [], []
    for n in sorted(set(two.times) - set(fit_on)):
        guess = model.predict("ring", 2, n, fitted) * two.turns
        errors.append(guess / two.times[n] - 1)
        rows.append((_size(n), _time(two.times[n]), _time(guess), f"{errors[-1]:+.0%}"))
    worst = max((abs(e) for e in errors), default=0.0)
    if not (alpha > 0 and beta > 0 and gamma > 0):
        said = ("A cost came out zero or negative: the times do not follow the model (another program took the "
                "CPU during some rounds). Run the measurement cell again.")
    elif worst <= TOLERANCE:
        said = f"Largest error on sizes the fit did not see: {worst:.0%} (within 25%)."
    else:
        said = (f"Largest error on sizes the fit did not see: {worst:.0%}: another program took the CPU during some "
                f"rounds, or the sizes straddle the caches; run the measurement cell again.")
    speed = (lambda x: f"{1 / x / 1e9:.3g} GB/s") if beta > 0 and gamma > 0 else (lambda x: f"{x:.3g} s/B")
    return View(f"One rank's costs on {two.device} (fitted on 2 ranks taking {two.turns:g} turns a step): alpha "
                f"{_time(alpha) if alpha > 0 else f'{alpha:.3g} s'} per message, beta {speed(beta)} sent, "
                f"gamma {speed(gamma)} reduced.",
                Table(["size (2 ranks)", "measured", "predicted", "error"], rows), said)


def residuals(costs, two, fit_on, add):
    """show_fit with numpy's add times `add`: a row for each equation (each size of `two`, fitted or held out, and
    each add) with the model's time and its miss, the rounds' spread beside it, then what the fit's misses say: a
    model whose misses on its own equations are within the rounds' spread explains the times as well as the machine
    repeats them; larger misses mean the times do not lie on the model's line (a cost it has no term for)."""
    alpha, beta, gamma = (float(c) for c in costs)
    fitted = model.Costs(alpha, beta, gamma, f"one rank of {two.device}")
    rows, in_fit, unseen = [], [], []
    for n in sorted(two.times):
        guess = model.predict("ring", 2, n, fitted) * two.turns
        miss = guess / two.times[n] - 1
        (in_fit if n in fit_on else unseen).append(miss)
        rows.append((f"ring, {_size(n)}", "fitted" if n in fit_on else "not seen", _time(two.times[n]),
                     f"{two.spread(n):.0%}" if two.rounds else "", _time(guess), f"{miss:+.0%}"))
    for n, t in sorted(add.items()):
        in_fit.append(n * gamma / t - 1)
        rows.append((f"numpy add, {_size(n)}", "fitted", _time(t), "", _time(n * gamma), f"{in_fit[-1]:+.0%}"))
    worst = max(abs(e) for e in in_fit)
    noise = float(np.median([two.spread(n) for n in fit_on])) if two.rounds else 0.0   # (a typical size's)
    held = max((abs(e) for e in unseen), default=0.0)
    if not (alpha > 0 and beta > 0 and gamma > 0):
        said = ("A cost came out zero or negative: the times do not follow the model (another program took the "
                "CPU during some rounds). Run the measurement cell again.")
    elif worst <= max(noise, 0.02):
        said = (f"{len(in_fit)} equations, 3 costs: the fit misses its own equations by at most {worst:.0%}, no more "
                f"than your rounds of one size differ (typically {noise:.0%}). What the model leaves out is below this "
                f"machine's noise. On the size it did not see it misses by {held:.0%}.")
    else:
        said = (f"{len(in_fit)} equations, 3 costs: the fit misses one of its own by {worst:.0%}, more than your rounds "
                f"of one size differ (typically {noise:.0%}): these times do not lie on the model's line. Something "
                f"costs what the model has no term for: a cache that makes a size cheaper per byte, or another "
                f"program on the CPU for a whole size (run the measurement cell again). On the size it did not see "
                f"it misses by {held:.0%}.")
    speed = (lambda x: f"{1 / x / 1e9:.3g} GB/s") if beta > 0 and gamma > 0 else (lambda x: f"{x:.3g} s/B")
    return View(f"One rank's costs on {two.device} (fitted on 2 ranks taking {two.turns:g} turns a step): alpha "
                f"{_time(alpha) if alpha > 0 else f'{alpha:.3g} s'} per message, beta {speed(beta)} sent, "
                f"gamma {speed(gamma)} reduced.",
                Table(["equation", "", "measured", "rounds differ", "the model", "miss"], rows), said)


def four_ranks(sizes, quick):
    """({bytes: seconds}, CPUs shared) of the ring on 4 ranks on one CPU, medians of rounds."""
    say = status_line()
    with _ranks_on_one_cpu(4, sizes, say) as (cluster, cpus):
        times, _ = _measure(cluster, sizes, 3 if quick else 5, 3 if quick else 10, say, "4 ranks")
    say(f"4 ranks on one CPU: {len(sizes)} sizes measured")
    return times, cpus


def compare(predicted, measured, cpus=1, ranks=4):
    """The learner's prediction (a cluster: a CPU per rank) times the turns the ranks took here, against
    what they measured. Returns a View; its .worst is the largest error."""
    k = model.turns(ranks, cpus)
    rows, errors = [], []
    for n in sorted(measured):
        if n in predicted:
            error = predicted[n] * k / measured[n] - 1
            errors.append(error)
            rows.append((_size(n), _time(predicted[n]), _time(predicted[n] * k), _time(measured[n]), f"{error:+.0%}"))
    worst = max(abs(e) for e in errors)
    if worst <= TOLERANCE:
        said = (f"Within {worst:.0%}: fitted on 2 ranks, the model predicts 4. The rank count enters only through "
                f"2(p-1) messages, the (p-1)/p share of the bytes, and the turns ranks take on a shared CPU.")
    else:
        said = (f"Off by up to {worst:.0%}: more than the model's usual error here. Something else ran on this "
                f"CPU during some rounds (the model has no term for another program): run the cell again.")
    view = View(f"{ranks} ranks took turns on {cpus:g} CPU{'s' if cpus != 1 else ''}: each step took {k:g} times a "
                f"rank's step, so the measurement is compared with your prediction x {k:g}.",
                Table(["size", "your prediction (a CPU per rank)", f"x {k:g} turns", "measured here", "error"], rows),
                said)
    view.worst = worst
    return view


# ------------------------------------------------------------------ a training cluster: your numbers and published ones

def your_numbers():
    """This machine's figures that enter the cluster model: one core's copy rate (measured now, buffers past
    the caches) and TCP's CPU copies per byte (counted in lesson 01, else the kernel's two, assumed)."""
    counted = evidence.recall("socket-path").get("tcp_copies_per_byte")
    return {"copy_Bps": model.copy_rate(), "copies": counted or model.TCP_COPIES, "copies_counted": bool(counted)}


def networks(numbers, copy_cores=1):
    """The like-with-like networks (100 and 400 Gb/s, RoCE and TCP) with TCP's copies at your rate."""
    return model.like_with_like(copy_Bps=numbers["copy_Bps"], copy_cores=copy_cores, copies=numbers["copies"])


def inputs(numbers):
    """Every figure the cluster model uses, and where it comes from: yours, published, or assumed."""
    socket_path = number("socket-path")
    copies = (f"yours: counted in lesson {socket_path}" if numbers["copies_counted"]
              else f"assumed (lesson {socket_path} counts them: run it first)")
    return Table(["figure", "value", "from"], [
        ("TCP: CPU copies per byte", f"{numbers['copies']:.2g}", copies),
        ("TCP: one core's copy rate", f"{numbers['copy_Bps'] / 1e9:.3g} GB/s", "yours: measured just now (64 MiB)"),
        ("TCP: cores copying per connection", "1", "assumed; NCCL can use more (NCCL_SOCKET_NTHREADS)"),
        ("TCP: time per message", f"{model.TCP_ALPHA * 1e6:g} us", "assumed (two kernel stacks and a switch)"),
        ("RDMA: time per message", f"{model.RDMA_ALPHA * 1e6:g} us", "published (perftest ib_write_lat) + a switch"),
        ("link speeds", "100 and 400 Gb/s", "published (ConnectX-7 datasheet)"),
        ("a GPU's reduction", f"{model.GPU_REDUCE_BPS / 1e12:g} TB/s", "published (H100 memory bandwidth)"),
        ("compute per step", "6 FLOP x params x tokens at 40% of 400 TFLOP/s", "assumed"),
    ])


def tcp_and_rdma(nets, gbps=400, gpus=1024, gradients=GRADIENTS, time=None):
    """(TCP's, RDMA's) AllReduce time of `gradients`'s gradients on `gpus` GPUs at `gbps`, from the ring's time as
    the learner wrote it, time(p, n, alpha, beta, gamma) (else model.predict's)."""
    n = model.MODELS[gradients]
    ring = ((lambda c: time(gpus, n, c.alpha, c.beta, c.gamma)) if time is not None
            else (lambda c: model.predict("ring", gpus, n, c)))
    return tuple(ring(nets[f"{gbps} GbE {t}"]) for t in ("TCP", "RoCE (RDMA)"))


def tcp_over_rdma(guess, nets, gbps=400, gpus=1024, gradients=GRADIENTS, time=None):
    """A predict-first look: the model's TCP AllReduce time over RDMA's, and why; with the learner's `guess` beside
    it (None: the lesson shows the guess itself, through exercises.compare). time: as tcp_and_rdma's."""
    n = model.MODELS[gradients]
    tcp, rdma = tcp_and_rdma(nets, gbps, gpus, gradients, time)
    guessed = f" You guessed {guess:g} times." if guess is not None else ""
    return View(f"The model: TCP {_time(tcp)}, RDMA {_time(rdma)}: {tcp / rdma:.1f} times as long ({n / 1e9:.0f} GB "
                f"of gradients, {gpus:,} GPUs, {gbps} Gb/s).{guessed}",
                f"Why: at your copy rate TCP's CPU copies move {1 / nets[f'{gbps} GbE TCP'].beta / 1e9:.3g} GB/s "
                f"per host, against the wire's {gbps / 8:g} GB/s, so the copies, not the link, set its pace. "
                f"RDMA's NIC moves the bytes itself.")


def plot_cluster(nets, gradients=GRADIENTS, tokens_per_gpu=4096, gpus=(8, 32, 128, 512, 2048, 8192, 16384)):
    """One chart: the gradient AllReduce's time against GPUs for each network, beside the compute of a step.
    Networks whose lines would lie on each other (within 3%: TCP capped by its copies at both speeds) are
    drawn once, labelled together; the title says what the chart shows."""
    import matplotlib.pyplot as plt
    n = model.MODELS[gradients]
    compute = model.compute_seconds(n / 2, tokens_per_gpu)
    lines = []   # [times, [names]], slowest first
    for name, costs in nets.items():
        times = [model.predict("ring", p, n, costs) for p in gpus]
        same = next((line for line in lines if all(abs(a / b - 1) < 0.03 for a, b in zip(line[0], times))), None)
        if same:
            same[1].append(name)
        else:
            lines.append([times, [name]])
    lines.sort(key=lambda line: -line[0][-1])
    fig, ax = plt.subplots(figsize=(9, 4.4))
    top = lines[0][0][-1]
    label_y = []
    for times, names in lines:
        tcp = all("TCP" in x for x in names)
        ax.plot(gpus, times, marker="s" if tcp else "o", markersize=5 if tcp else 8, linestyle="--" if tcp else "-",
                linewidth=2 if tcp else 4, zorder=3 if tcp else 2, alpha=1 if tcp else 0.7,   # TCP drawn over RDMA
                color="tab:red" if tcp else ("tab:blue" if "400" in names[0] else "tab:cyan"))
        y = min([times[-1]] + [y - 0.07 * top for y in label_y])   # labels at least 7% of the axis apart
        label_y.append(y)
        ax.annotate("\n".join(names), (gpus[-1], y), xytext=(8, 0), textcoords="offset points", va="center",
                    fontsize=11)
    ax.axhline(compute, color="grey", linestyle=":", linewidth=2)
    ax.annotate(f"compute of one step: {compute:.1f} s", (gpus[0], compute), xytext=(0, 5), textcoords="offset points",
                fontsize=11, color="dimgrey")
    ax.set_xscale("log", base=2)
    ticks = [p for p in gpus if p != 8192]   # 8192 and 16384 would crowd each other
    ax.set_xticks(ticks, [f"{p:,}" for p in ticks])
    ax.set_xlabel("GPUs", fontsize=11)
    ax.set_ylabel("ring AllReduce of the gradients [s]", fontsize=11)
    ax.set_ylim(0, None)
    ax.tick_params(labelsize=10)
    ax.grid(True, alpha=0.3)
    slowest = lines[0][1]
    why = ("TCP's CPU copies make it the longest" if all("TCP" in x for x in slowest)
           else f"the slowest is {' and '.join(slowest)}")
    ax.set_title(f"{gradients.split(' (')[0]} ({n / 1e9:.0f} GB of gradients): the AllReduce hardly grows with GPUs;\n"
                 f"the per-byte cost sets it, and {why}", fontsize=12)
    fig.text(0.01, 0.01, "Model: your copy rate, published link speeds and latencies (the table above); "
             "not a measurement.", fontsize=9, color="dimgrey")
    fig.subplots_adjust(left=0.08, right=0.72, top=0.86, bottom=0.17)
    return fig


def explain(params_billion=13, gpus=1024, network="400 GbE RoCE (RDMA)", tokens_per_gpu=4096, algorithm="ring",
            nets=None):
    """(text, share of the step spent in the AllReduce) for one cluster (no overlap with compute)."""
    nets = nets or model.NETWORKS
    grad, costs = params_billion * 1e9 * 2, nets[network]
    t = model.predict(algorithm, gpus, grad, costs)
    compute = model.compute_seconds(params_billion * 1e9, tokens_per_gpu)
    a, b, g = model.terms(algorithm, gpus, grad)
    text = (f"AllReduce ({algorithm}) of {grad / 1e9:.0f} GB on {gpus:,} GPUs over {network}: {_time(t)} "
            f"(messages {_time(a * costs.alpha)}, bytes {_time(b * costs.beta)}, reduction {_time(g * costs.gamma)})\n"
            f"compute per step {_time(compute)}: communication is {t / (t + compute):.0%} of the step")
    if algorithm == "sharp" and "InfiniBand" not in network:
        text += "\n(SHARP reduces in InfiniBand or NVLink switches: over Ethernet this is hypothetical)"
    return text, t / (t + compute)


def explorer(numbers):
    """Sliders for model size, GPUs, network, tokens per GPU, algorithm and the cores that copy TCP's bytes."""
    import ipywidgets as w
    style = {"description_width": "140px"}
    wide = w.Layout(width="520px")
    controls = {
        "params_billion": w.SelectionSlider(options=[1, 3, 7, 13], value=13, description="parameters (billions)",
                                            style=style, layout=wide),
        "gpus": w.SelectionSlider(options=[2 ** k for k in range(3, 15)], value=1024, description="GPUs",
                                  style=style, layout=wide),
        "network": w.Dropdown(options=[*networks(numbers), NDR], value="400 GbE RoCE (RDMA)", description="network",
                              style=style, layout=wide),
        "tokens_per_gpu": w.IntSlider(value=4096, min=512, max=32768, step=512, description="tokens per GPU",
                                      style=style, layout=wide),
        "algorithm": w.Dropdown(options=["ring", "tree", "hd", "sharp"], description="algorithm", style=style,
                                layout=wide),
        "copy_cores": w.SelectionSlider(options=[1, 2, 4, 8], value=1, description="TCP: cores copying",
                                        style=style, layout=wide),
    }
    shown = w.HTML()

    def update(_=None):
        chosen = {k: c.value for k, c in controls.items()}
        nets = {**networks(numbers, chosen.pop("copy_cores")), NDR: model.NETWORKS[NDR]}
        shown.value = f"<pre style='font-size:13px'>{html.escape(explain(**chosen, nets=nets)[0])}</pre>"

    for control in controls.values():
        control.observe(update, "value")
    update()
    return w.VBox([*controls.values(), shown])


def algorithms_table(network=NDR, sizes=(1 << 20, model.MODELS[GRADIENTS]), gpus=(8, 512, 16384)):
    """Ring, tree and in-network reduction (SHARP) on one network: the time, and the busbw nccl-tests would
    print for it (algbw x 2(p-1)/p, whatever the algorithm)."""
    costs, rows = model.NETWORKS[network], []
    for n in sizes:
        for p in gpus:
            cells = []
            for a in ("ring", "tree", "sharp"):
                t = model.predict(a, p, n, costs)
                cells.append(f"{_time(t)}, {n / t * 2 * (p - 1) / p / 1e9:.3g} GB/s")
            rows.append((_size(n) if n < 1e9 else f"{n / 1e9:.0f} GB", f"{p:,}", *cells))
    return Table(["message", "GPUs", "ring: time, busbw", "double binary tree", "SHARP (in-network)"], rows,
                 f"{network}; busbw as nccl-tests prints it. Model, not measurement.")


def gpudirect_paths():
    """Boxes and arrows: a gradient's path from GPU memory to the wire, with GPUDirect RDMA (the NIC reads
    GPU memory over PCIe) and through a host bounce buffer (GPU -> host memory -> NIC: PCIe twice)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 3.8))
    boxes = {"GPU memory": (0.9, 3), "PCIe switch": (3.5, 3), "NIC": (6.1, 3), "wire": (8.5, 3),
             "host memory\n(bounce buffer)": (3.5, 0.7)}
    for name, (x, y) in boxes.items():
        ax.add_patch(plt.Rectangle((x - 0.85, y - 0.45), 1.7, 0.9, fill=False, linewidth=1.5))
        ax.text(x, y, name, ha="center", va="center", fontsize=11)

    def arrow(start, end, colour):
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color=colour, linewidth=2))

    green, red = "tab:green", "tab:red"
    arrow((1.75, 3.15), (2.65, 3.15), green)
    arrow((4.35, 3.15), (5.25, 3.15), green)
    arrow((6.95, 3.0), (7.65, 3.0), "black")
    arrow((1.2, 2.55), (2.65, 0.9), red)           # copy 1: GPU memory down to the bounce buffer
    arrow((4.35, 0.9), (5.8, 2.55), red)           # copy 2: the NIC reads the bounce buffer
    ax.text(1.55, 1.45, "copy 1", color=red, fontsize=11, ha="right")
    ax.text(5.35, 1.45, "copy 2 (the NIC reads)", color=red, fontsize=11, ha="left")
    ax.text(0, 4.35, "green: GPUDirect RDMA, the NIC reads GPU memory: PCIe once per byte", color=green, fontsize=11)
    ax.text(0, 3.9, "red: host bounce buffer: PCIe twice per byte, and a copy to start per message", color=red,
            fontsize=11)
    ax.text(0, -0.25, "NVIDIA GPUDirect RDMA documentation (docs.nvidia.com/cuda/gpudirect-rdma)", color="dimgrey",
            fontsize=9)
    ax.set_xlim(-0.1, 9.5)
    ax.set_ylim(-0.45, 4.6)
    ax.axis("off")
    fig.subplots_adjust(left=0.02, right=0.98, top=0.98, bottom=0.02)
    return fig


def gpudirect(gpus=4096, gradients=GRADIENTS):
    """The diagram, then the table: what GPUDirect RDMA saves."""
    _show(gpudirect_paths())
    return gpudirect_table(gpus, gradients)


def gpudirect_table(gpus=4096, gradients=GRADIENTS):
    """The same NDR link seen from GPU memory, with and without GPUDirect RDMA."""
    ndr, n, rows = model.NETWORKS[NDR], model.MODELS[gradients], []
    for direct in (True, False):
        costs = model.gpu_path(ndr, gpudirect=direct)
        rows.append(("GPUDirect RDMA" if direct else "host bounce buffer", f"{1 / costs.beta / 1e9:.3g} GB/s",
                     _time(model.predict("ring", gpus, n, costs))))
    return Table(["path", "bandwidth per GPU", f"ring AllReduce, {n / 1e9:.0f} GB, {gpus:,} GPUs"], rows,
                 "NDR 400 Gb/s; PCIe Gen5 x16 about 64 GB/s per direction. Model, not measurement.")


def slowest_link_table(gpus=1024, gradients=GRADIENTS, network="400 GbE RoCE (RDMA)"):
    """A ring at its slowest link's pace: the gradient AllReduce when one link gives only a share of itself."""
    costs, n = model.NETWORKS[network], model.MODELS[gradients]
    rows = [(why, f"{share:.0%}", _time(model.predict("ring", gpus, n, model.slowest_link(costs, share))))
            for share, why in [(1, "every link free"), (1 / 2, "one link shared with another job's flow"),
                               (1 / 4, "incast: 4 flows into one port"),
                               (0.3, "one link paused 70% of the time (PFC storm)")]]
    rows.append(("naive: every rank sends to rank 0 (incast of p-1)", "1 port for all",
                 _time(model.predict("naive", gpus, n, costs))))
    return Table(["situation", "slowest link runs at", f"AllReduce, {n / 1e9:.0f} GB, {gpus:,} GPUs"], rows,
                 f"{network}. Model, not measurement.")
