"""Charts of rdmalab.bench results: latency and bandwidth against size, and what each side spent.

Every line is labelled with the transport and provider that produced it (an emulated-NIC figure is
never mistaken for hardware); published hardware figures appear as dashed reference lines, each
with its source. Functions draw on a matplotlib Axes (a new figure when none is given) and return it.
"""
import matplotlib.pyplot as plt

# Published figures, for scale. Sources as given in the lab's reference notes (FACTS.md).
PUBLISHED_LATENCY_US = [
    (0.93, "mlx5 ib_write_lat inline 0.93 us [perftest #131]"),
]
PUBLISHED_BANDWIDTH_GBPS = [
    (96.6, "EDR ib_write_bw 96.6 Gb/s [NVIDIA forum]"),
]


def _axes(ax, title):
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    ax.set_title(title, fontsize=11)
    ax.tick_params(labelsize=10)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def _references(ax, published):
    """Dashed horizontal lines for published figures, each annotated with its source."""
    for value, label in published:
        ax.axhline(value, linestyle="--", linewidth=1, color="grey", alpha=0.7)
        ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), fontsize=9, color="grey", va="bottom")


def _legend_below(ax):
    """The legend under the axes, off the data."""
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def _short_label(r):
    """A legend entry that fits a small panel: the test and the device (the full label is in the tables)."""
    if r.test.startswith("tcp"):
        where = "TCP loopback"
    elif r.provider == "soft":
        where = f"{r.device}: emulated NIC" + (", udp link" if r.link == "udp" else "")
    else:
        where = f"{r.device}: " + ("Soft-RoCE" if str(r.device).startswith("rxe") else "hardware")
    return f"{r.test} ({where})"


def _mark_noisy(ax, r, key, factor=1.5):
    """An x over each point whose repeats differed by more than `factor` (rows carry "spread" when repeated)."""
    noisy = [row for row in r.rows if row.get("spread", 1) > factor]
    if noisy:
        labelled = any(h.get_label().startswith("noisy") for h in ax.collections)
        ax.scatter([row["size"] for row in noisy], [row[key] for row in noisy], marker="x", s=60, color="black",
                   zorder=5, label="_" if labelled else f"noisy (repeats differ > {factor}x)")


def _size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size [bytes]", fontsize=10)


def latency(results, ax=None, published=True):
    """t_typical (median) against size, log-log, with the min..99% range shaded."""
    ax = _axes(ax, "Latency: ping-pong, half round trip")
    for r in results:
        sizes = [row["size"] for row in r.rows]
        line, = ax.plot(sizes, [row["t_typical"] for row in r.rows], marker="o", label=_short_label(r))
        ax.fill_between(sizes, [row["t_min"] for row in r.rows], [row["p99"] for row in r.rows],
                        color=line.get_color(), alpha=0.15)
        _mark_noisy(ax, r, "t_typical")
    if published:
        _references(ax, PUBLISHED_LATENCY_US)
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("t_typical [usec]", fontsize=10)
    _legend_below(ax)
    return ax


def bandwidth(results, ax=None, published=True):
    """BW average against size, in Gb/s (perftest --report_gbits)."""
    ax = _axes(ax, "Bandwidth (BW average)")
    for r in results:
        ax.plot([row["size"] for row in r.rows], [row["bw_avg_gbps"] for row in r.rows], marker="o", label=_short_label(r))
        _mark_noisy(ax, r, "bw_avg_gbps")
    if published:
        _references(ax, PUBLISHED_BANDWIDTH_GBPS)
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("bandwidth [Gb/s]", fontsize=10)
    _legend_below(ax)
    return ax


def cpu_per_kib(row, side):
    """A side's CPU time per KiB delivered in a bandwidth row, in nanoseconds."""
    return row[side]["cpu_s"] * 1e9 / (row["size"] * row["iterations"] / 1024)


def receiver_cpu(results, ax=None):
    """The headline: CPU each side spent per KiB while data streamed (the largest size of each bandwidth
    test), the receiving side beside the sending one. The one-sided target's bar is zero on every device."""
    ax = _axes(ax, "CPU per KiB delivered, streaming")
    labels, sent, received = [], [], []
    for r in results:
        row = r.rows[-1]
        labels.append(("RDMA WRITE" if r.test == "write_bw" else "TCP") + f"\n{_size_label(row['size'])}")
        sent.append(cpu_per_kib(row, "initiator"))
        received.append(cpu_per_kib(row, "target"))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], sent, 0.4, label="sender", color="#8c959f")
    bars = ax.bar([i + 0.2 for i in x], received, 0.4, label="receiver / target", color="#0969da")
    for bar, value in zip(bars, received):
        ax.annotate(f"{value:.3g} ns", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                    va="bottom", fontsize=10, fontweight="bold")
    ax.set_xticks(list(x), labels, fontsize=10)
    ax.set_ylim(0, max(sent + received + [1]) * 1.3)
    ax.set_ylabel("CPU time per KiB [ns]", fontsize=10)
    ax.legend(fontsize=9, loc="upper left")
    return ax


def _size_label(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def costs(results, ax=None, size=None):
    """CPU time and read/write syscalls of each side, per transport, at one size (default: the largest
    all results share): where RDMA's advantage comes from."""
    ax = _axes(ax, "What each side spent")
    common = set.intersection(*[{row["size"] for row in r.rows} for r in results]) if results else set()
    size = size or (max(common) if common else None)
    labels, init_cpu, target_cpu, calls = [], [], [], []
    for r in results:
        row = next((row for row in r.rows if row["size"] == size), None)
        if row is None:
            continue
        labels.append(f"{r.test}\n({r.provider})")
        init_cpu.append(row["initiator"]["cpu_s"] * 1e3 / row["iterations"] * 1e3)
        target_cpu.append(row["target"]["cpu_s"] * 1e3 / row["iterations"] * 1e3)
        calls.append(sum(row[side]["read_syscalls"] + row[side]["write_syscalls"] for side in ("initiator", "target"))
                     / row["iterations"])
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], init_cpu, width=0.4, label="initiator CPU")
    ax.bar([i + 0.2 for i in x], target_cpu, width=0.4, label="target CPU")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel(f"CPU per message [usec] ({size} B)")
    for i, n in enumerate(calls):
        ax.annotate(f"{n:.1f} syscalls/msg", (i, max(init_cpu[i], target_cpu[i])), ha="center", va="bottom", fontsize=8)
    ax.legend(fontsize=8)
    return ax


def png(fig, dpi=90):
    """A figure as PNG bytes (for an ipywidgets.Image)."""
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def png_base64(fig, dpi=90):
    """A figure as base64 PNG text, for an <img> in HTML output; the figure is closed."""
    import base64
    try:
        return base64.b64encode(png(fig, dpi)).decode()
    finally:
        plt.close(fig)


def registration_cost(sizes, mr_us, copy_us, device, ax=None):
    """Lesson 02's chart, log-log: registering a buffer that exists (MR(pd, size, access, address=...)),
    and copying the same bytes once."""
    ax = _axes(ax, "Registering a buffer, against copying it once")
    ax.loglog(sizes, mr_us, "o-", label=f"MR(..., address=buf): register it, on {device}")
    ax.loglog(sizes, copy_us, "s-", label="copy the same bytes once (numpy)")
    ax.set_xlabel("buffer size [bytes]")
    ax.set_ylabel("time [usec]")
    ax.legend(fontsize=8)
    return ax
