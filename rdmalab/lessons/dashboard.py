"""The RDMA-against-sockets dashboard: choose sizes, iterations and tests, press Run, watch it grow.

    from rdmalab.lessons.dashboard import Dashboard
    Dashboard()                      # in a notebook: the controls, a progress bar, the charts

Everything the buttons do is callable without a browser (tests and papermill use it):
    d = Dashboard(tests=("write_lat", "tcp_lat"), sizes=(8, 4096), iters=200, repeats=3)
    display(d); d.run()   # shown first, so the progress bar moves; the chart grows as sizes complete
    d.results             # {test: rdmalab.bench.Results}: per size, the median of the repeats
    answer.record_target_cpu(d.results, one_cpu)   # the target's CPU lesson keeps its figures (rdmalab.lessons.answer)

The headline panel is the one whose answer is the same on every device: the CPU the receiving side spent
per KiB while data streamed into it (an RDMA WRITE's target: none; a TCP receiver: every byte). The
latency panel is a ping-pong, in which RDMA's side busy-polls its CQ as perftest's does (TCP's blocks in
read()): there the target's CPU is busy by design, and says nothing about RDMA. With repeats, each point is the median of its runs and a point
whose runs differ by more than 1.5x is marked noisy.
"""
import os
import time

import ipywidgets as w
import matplotlib.pyplot as plt

from rdmalab import bench
from rdmalab.lessons import plots

LATENCY_TESTS = ("write_lat", "read_lat", "send_lat", "tcp_lat")
BANDWIDTH_TESTS = ("write_bw", "tcp_bw")


class Dashboard(w.VBox):
    # While a run is under way the chart is redrawn as sizes complete, but drawing may take at most
    # this share of the time: a chart costs 0.3 s here and 10 s under CPU emulation, a size far less.
    redraw_share = 0.25

    def __init__(self, tests=("write_lat", "tcp_lat", "write_bw", "tcp_bw"), sizes=(2, 1 << 20), iters=1000,
                 provider=None, repeats=1):
        low, high = min(sizes), max(sizes)
        exponents = [k for k in range(1, 24)]
        self.size_range = w.SelectionRangeSlider(
            options=[(_pretty(2 ** k), 2 ** k) for k in exponents],
            index=(exponents.index(max(1, low.bit_length() - 1)), exponents.index(min(23, high.bit_length() - 1))),
            description="sizes", layout=w.Layout(width="420px"), continuous_update=False)
        self.iterations = w.BoundedIntText(value=iters, min=8, max=1_000_000, step=100, description="iterations")
        self.test_boxes = {t: w.Checkbox(value=t in tests, description=t, indent=False, layout=w.Layout(width="95px"))
                           for t in LATENCY_TESTS + BANDWIDTH_TESTS}
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="idle", bar_style="info")
        self.chart = w.Image(format="png", layout=w.Layout(max_width="100%"))
        self.status = w.HTML()
        self.provider, self.results, self.repeats = provider, {}, repeats
        self.run_button.on_click(lambda _: self.run())
        super().__init__([
            w.HBox([self.size_range, self.iterations]),
            w.HBox([w.Label("tests"), *self.test_boxes.values()]),
            w.HBox([self.run_button, self.progress]),
            self.status, self.chart])

    @property
    def sizes(self):
        low, high = self.size_range.value
        return [2 ** k for k in range(low.bit_length() - 1, high.bit_length())]

    @property
    def tests(self):
        return [t for t, box in self.test_boxes.items() if box.value]

    def run(self):
        """Run every chosen test over the chosen sizes; the progress bar moves as each size completes, the
        chart is redrawn as often as `redraw_share` allows and after every test."""
        tests, sizes = self.tests, self.sizes
        if not tests:
            self.status.value = "<b>Choose at least one test.</b>"
            return self.results
        self.results, self._next_redraw = {}, 0.0
        self.progress.max, self.progress.value, self.progress.bar_style = len(tests) * len(sizes) * self.repeats, 0, "info"
        self.run_button.disabled = True
        try:
            for test in tests:
                runs = []
                for repeat in range(self.repeats):
                    self.progress.description = test if self.repeats == 1 else f"{test} {repeat + 1}/{self.repeats}"
                    partial = bench.Results(test, None, None, [])
                    if not runs:          # the first run is drawn as it grows; later ones join the medians
                        self.results[test] = partial

                    def grew(row, done, total, partial=partial):
                        partial.rows.append(row)
                        self.progress.value += 1
                        if time.monotonic() >= self._next_redraw:
                            self.redraw()

                    runs.append(bench.run(test, sizes=sizes, iters=self.iterations.value, provider=self.provider,
                                          progress=grew))
                    self.results[test] = medians(runs)
                self.redraw()
            self.progress.bar_style, self.progress.description = "success", "done"
            self.status.value = self._summary()
        except bench.BenchError as error:
            self.progress.bar_style, self.status.value = "danger", f"<b>Failed:</b> {error}"
        finally:
            self.run_button.disabled = False
        return self.results

    def figure(self):
        """The charts of what has run so far: the receiving side's CPU while data streams in (the headline),
        latency, bandwidth."""
        lat = [r for t, r in self.results.items() if t in LATENCY_TESTS and r.rows]
        bw = [r for t, r in self.results.items() if t in BANDWIDTH_TESTS and r.rows]
        panels = [p for p, used in (("receiver", bw), ("lat", lat), ("bw", bw)) if used]
        fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.3 * max(len(panels), 1), 3.9), squeeze=False)
        for ax, panel in zip(axes[0], panels):
            if panel == "receiver":
                plots.receiver_cpu(bw, ax)
            elif panel == "lat":
                plots.latency(lat, ax)
            else:
                plots.bandwidth(bw, ax)
        fig.tight_layout()
        return fig

    def redraw(self):
        started = time.monotonic()
        fig = self.figure()
        self.chart.value = plots.png(fig, dpi=80)   # about 1000 px wide: 10 px text where JupyterLab shows it
        plt.close(fig)
        spent = time.monotonic() - started
        self._next_redraw = time.monotonic() + spent * (1 / self.redraw_share - 1)

    def _summary(self):
        return "<br>".join(summary(self.results, self.repeats))


def medians(runs):
    """One Results from several runs of a test over the same sizes: per size, the run whose figure (t_typical,
    or BW average) is the median, with "spread": the largest figure over the smallest."""
    key = "t_typical" if runs[0].kind == "lat" else "bw_avg_mib"
    rows = []
    for same_size in zip(*(r.rows for r in runs)):
        ranked = sorted(same_size, key=lambda row: row[key])
        low = max(ranked[0][key], 1e-12)
        rows.append({**ranked[(len(ranked) - 1) // 2], "spread": ranked[-1][key] / low, "repeats": len(ranked)})
    first = runs[0]
    return bench.Results(first.test, first.provider, first.device, rows, first.events, first.link)


NOISY = 1.5   # a point whose repeats differ by more than this factor is marked noisy


def summary(results, repeats=1):
    """The dashboard's conclusion over every size, in sentences: where RDMA won and lost, what the receiving
    side spent while data streamed in, and what to do when the machine could not measure fairly."""
    out = []
    pairs = (("write_lat", "tcp_lat", "t_typical", "latency", "lower", lambda a, b: a < b),
             ("write_bw", "tcp_bw", "bw_avg_mib", "bandwidth", "higher", lambda a, b: a > b))
    for rdma, tcp, key, what, better, wins in pairs:
        if rdma in results and tcp in results:
            both = list(zip(results[rdma].rows, results[tcp].rows))
            won = [a["size"] for a, b in both if wins(a[key], b[key])]
            lost = [_pretty(a["size"]) for a, b in both if not wins(a[key], b[key])]
            first, last = both[0], both[-1]
            out.append(f"RDMA {what} {better} than TCP's at <b>{len(won)} of {len(both)}</b> sizes"
                       + (f" (not at {', '.join(lost[:6])}{'...' if len(lost) > 6 else ''})" if lost else "")
                       + f"; at {_pretty(first[0]['size'])} {first[0][key]:.3g} vs {first[1][key]:.3g}, at "
                       f"{_pretty(last[0]['size'])} {last[0][key]:.3g} vs {last[1][key]:.3g}"
                       + (" us" if key == "t_typical" else " MiB/s") + ".")
    if "write_bw" in results and "tcp_bw" in results:
        a, b = (plots.cpu_per_kib(results[t].rows[-1], "target") for t in ("write_bw", "tcp_bw"))
        out.append(f"<b>While {_pretty(results['write_bw'].rows[-1]['size'])} messages streamed in, the RDMA target "
                   f"spent {a:.3g} ns of CPU per KiB; the TCP receiver {b:.3g} ns</b>: on every device the "
                   f"one-sided target runs nothing.")
    if "write_lat" in results:
        out.append("In the latency tests RDMA's side busy-polls its CQ (perftest's ping-pong) and TCP's blocks in "
                   "read(): the RDMA target's CPU is busy by design there, and is no measure of RDMA.")
    noisy = sorted({row["size"] for r in results.values() for row in r.rows if row.get("spread", 1) > NOISY})
    if noisy:
        out.append(f"Noisy (repeats differ by more than {NOISY}x) at {', '.join(map(_pretty, noisy[:8]))}"
                   f"{'...' if len(noisy) > 8 else ''}: marked x in the charts.")
    note = bench.caveats(results.values())
    if note:
        out.append(f"<b>Read with care:</b> {note} {_what_to_do(repeats)}")
    return out


def _what_to_do(repeats):
    """What a learner can do about a machine short of CPUs, with this machine's numbers."""
    from rdmalab.proc.cpus import usable_cpus
    cpus, load = usable_cpus(), os.getloadavg()[0]
    advice = (f"Here: {cpus:g} usable CPUs, {load:.1f} processes wanting one on average over the last minute "
              f"(a ping-pong needs two free CPUs: its two sides, besides this notebook).")
    if load > cpus:
        advice += " Stop other running notebooks (Kernel > Shut Down All Kernels) and anything else busy, then press Run."
    if repeats < 3:
        advice += " Or raise the repeats to 3: each point becomes the median of three runs."
    return advice


def _pretty(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"
