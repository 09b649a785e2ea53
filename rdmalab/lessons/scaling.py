"""The scaling lesson's plumbing: the learner's 4-rank times (from the AllReduce lesson, or measured
here), tables of the model's predictions, the cluster charts and the explorer widget."""
from rdmalab.allreduce import model
from rdmalab.lessons import evidence
from rdmalab.lessons.series import number
from rdmalab.proc.cpus import usable_cpus


def four_rank_times(quick, sizes=(1 << 20,), largest=1 << 20):
    """(where they come from, {bytes: seconds}) of the ring over RDMA on 4 ranks: the AllReduce lesson's
    measurements up to `largest` bytes (the sizes the lesson fits) when it ran with 4 ranks, else
    measured now at `sizes` (a 4-rank cluster, ~15 s)."""
    e = evidence.recall("allreduce")
    if e.get("ranks") == 4 and e.get("sizes") and e.get("ring_rdma_s"):
        kept = {n: t for n, t in zip(e["sizes"], e["ring_rdma_s"]) if n <= largest and t}
        if kept:
            return f"your lesson {number('allreduce')} measurements", kept
    from rdmalab.allreduce.cluster import Cluster
    print(f"lesson {number('allreduce')} has not recorded 4-rank times (run it first, without QUICK): "
          "measuring them now")
    with Cluster(ranks=4, transport="rdma", max_bytes=max(sizes)) as cluster:
        times, _ = model.measure(cluster, list(sizes), rounds=3 if quick else 5)
    return "measured just now", times


def fit_two_ranks(sizes, quick, attempts=3):
    """The scaling lesson's fit: the 2-rank ring's times (medians of rounds) fitted on the smallest and the largest
    size, judged on the others. A busy machine can make a small size slower than a large one, and then no
    fit has a positive beta: this measures again with twice the rounds, and at the last attempt fits the
    fastest round of each size (the least disturbed one). Returns (costs, held-out rows, {n: seconds})."""
    from rdmalab.allreduce.cluster import Cluster
    gamma, rounds = 1 / model.reduction_rate(), 3 if quick else 5
    with Cluster(ranks=2, transport="rdma", max_bytes=max(sizes)) as cluster:
        for attempt in range(1, attempts + 1):
            medians, every = model.measure(cluster, sizes, rounds=rounds)
            times = medians if attempt < attempts else {n: min(ts) for n, ts in every.items()}
            samples = [(2, n, t) for n, t in times.items()]
            try:
                fitted, held = model.held_out(samples, [(2, sizes[0]), (2, sizes[-1])], gamma=gamma, label="2 ranks")
                return fitted, held, times
            except ValueError as error:
                if attempt == attempts:
                    raise ValueError(f"{error}. This machine was too busy for {attempts} attempts: close what else "
                                     f"runs and run this cell again") from None
                print(f"attempt {attempt}: {error}; the machine is busy, measuring again with {rounds * 2} rounds")
                rounds *= 2


def show_held_out(rows):
    """The held-out rows of model.held_out as a table; returns the largest error."""
    print(f"{'ranks':>5} {'bytes':>10} {'measured':>10} {'predicted':>10} {'error':>7}   (ms; sizes the fit did not see)")
    for r in rows:
        print(f"{r['p']:>5} {r['n']:>10} {r['measured_s'] * 1e3:>10.3f} {r['predicted_s'] * 1e3:>10.3f} {r['error']:>+7.0%}")
    return max(abs(r["error"]) for r in rows)


def compare(predicted, measured, source):
    """Predicted against measured 4-rank times, and what the machine's CPUs mean for them."""
    print(f"4 ranks, ring over RDMA ({source}):")
    print(f"{'bytes':>10} {'measured':>10} {'predicted':>10} {'error':>7}   (ms)")
    for n in sorted(measured):
        if n in predicted:
            print(f"{n:>10} {measured[n] * 1e3:>10.3f} {predicted[n] * 1e3:>10.3f} {predicted[n] / measured[n] - 1:>+7.0%}")
    cpus = usable_cpus()
    if cpus < 4:
        turns = 4 / cpus
        print(f"\nThis machine gives you {cpus:g} CPUs for 4 ranks: at every step of the ring the ranks take turns,\n"
              f"a cost that a fit on 2 ranks (one CPU each) does not contain. On soft0 all of a rank's work is CPU\n"
              f"work (its NIC is a copy by its CPU), so every term takes {turns:g} times as long (model.on_shared_cpus):")
        for n in sorted(measured):
            if n in predicted:
                print(f"{n:>10} {measured[n] * 1e3:>10.3f} {predicted[n] * turns * 1e3:>10.3f} "
                      f"{predicted[n] * turns / measured[n] - 1:>+7.0%}   (predicted x {turns:g})")


def plot_cluster(gpus=(8, 32, 128, 512, 2048, 8192, 16384), algorithm="ring"):
    """Two charts: gradient AllReduce time against GPUs for each network, and time against size."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for name, costs in model.NETWORKS.items():
        for label, grad in model.MODELS.items():
            axes[0].plot(gpus, [model.predict(algorithm, p, grad, costs) for p in gpus], marker="o",
                         label=f"{label}, {name}")
    axes[0].set_title("Ring AllReduce of the gradients")
    axes[0].set_xlabel("GPUs"); axes[0].set_ylabel("AllReduce time [s]"); axes[0].legend(fontsize=6)
    sizes = [2 ** k for k in range(10, 36, 2)]
    for name, costs in model.NETWORKS.items():
        axes[1].plot(sizes, [model.predict(algorithm, 1024, n, costs) for n in sizes], label=name)
    axes[1].set_title("Latency-bound, then bandwidth-bound")
    axes[1].set_xlabel("bytes reduced (1024 GPUs)"); axes[1].set_ylabel("time [s]"); axes[1].legend(fontsize=7)
    for ax in axes:
        ax.set_xscale("log", base=2); ax.set_yscale("log"); ax.grid(True, which="both", alpha=0.3)
    fig.text(0.01, -0.02, "Models with published figures (rdmalab.allreduce.model.SOURCES), not measurements.",
             fontsize=8, color="grey")
    fig.tight_layout()
    return fig


def explain(params_billion=7, gpus=1024, network=None, tokens_per_gpu=4096, algorithm="ring"):
    """(text, share of the step spent in the AllReduce) for one cluster (no overlap with compute)."""
    network = network or list(model.NETWORKS)[0]
    grad, costs = params_billion * 1e9 * 2, model.NETWORKS[network]
    t = model.predict(algorithm, gpus, grad, costs)
    compute = model.compute_seconds(params_billion * 1e9, tokens_per_gpu)
    a, b, g = model.terms(algorithm, gpus, grad)
    text = (f"AllReduce ({algorithm}) of {grad / 1e9:.0f} GB on {gpus} GPUs over {network}: {t:.2f} s "
            f"(latency {a * costs.alpha * 1e3:.1f} ms, wire {b * costs.beta:.2f} s, reduction {g * costs.gamma:.2f} s)\n"
            f"compute per step {compute:.2f} s -> communication is {t / (t + compute):.0%} of the step")
    return text, t / (t + compute)


def explorer():
    """Sliders for model size, GPUs, network, tokens per GPU and algorithm; shows explain()'s text."""
    import ipywidgets as w
    controls = {
        "params_billion": w.FloatLogSlider(value=7, base=10, min=-1, max=3, description="params (B)"),
        "gpus": w.SelectionSlider(options=[2 ** k for k in range(3, 15)], value=1024, description="GPUs"),
        "network": w.Dropdown(options=list(model.NETWORKS), description="network", layout=w.Layout(width="420px")),
        "tokens_per_gpu": w.IntSlider(value=4096, min=512, max=32768, step=512, description="tokens/GPU"),
        "algorithm": w.Dropdown(options=["ring", "tree", "hd", "sharp"], description="algorithm"),
    }
    shown = w.HTML()

    def update(_=None):
        shown.value = f"<pre>{explain(**{k: c.value for k, c in controls.items()})[0]}</pre>"

    for control in controls.values():
        control.observe(update, "value")
    update()
    return w.VBox([*controls.values(), shown])


def algorithms_table(network="InfiniBand NDR 400 Gb/s (RDMA)", sizes=(1 << 20, 14e9), gpus=(8, 512, 16384)):
    """Ring, tree and in-network reduction (SHARP) on one network: time and the busbw nccl-tests would print."""
    costs = model.NETWORKS[network]
    print(f"{network}: time (busbw as nccl-tests reports it: n / t x 2(p-1)/p)")
    print(f"{'MB':>8} {'GPUs':>6} " + "".join(f"{a:>22}" for a in ("ring", "tree", "sharp")))
    for n in sizes:
        for p in gpus:
            cells = []
            for a in ("ring", "tree", "sharp"):
                t = model.predict(a, p, n, costs)
                cells.append(f"{t * 1e3:>10.3f} ms {n / t * 2 * (p - 1) / p / 1e9:>6.1f} GB/s")
            print(f"{n / 1e6:>8.0f} {p:>6} " + "".join(f"{c:>22}" for c in cells))
