"""The RDMA-against-sockets dashboard: choose sizes, iterations and tests, press Run, watch it grow.

    from rdmalab.lessons.dashboard import Dashboard
    Dashboard()                      # in a notebook: the controls, a progress bar, the charts

Everything the buttons do is callable without a browser (tests and papermill use it):
    d = Dashboard(tests=("write_lat", "tcp_lat"), sizes=(8, 4096), iters=200)
    d.run()          # runs, updates the progress bar after every size and the chart as it goes
    d.results        # {test: rdmalab.bench.Results}
"""
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
                 provider=None):
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
        self.provider, self.results = provider, {}
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
        self.progress.max, self.progress.value, self.progress.bar_style = len(tests) * len(sizes), 0, "info"
        self.run_button.disabled = True
        try:
            for test in tests:
                self.progress.description = test
                partial = bench.Results(test, None, None, [])
                self.results[test] = partial

                def grew(row, done, total, partial=partial):
                    partial.rows.append(row)
                    self.progress.value += 1
                    if time.monotonic() >= self._next_redraw:
                        self.redraw()

                finished = bench.run(test, sizes=sizes, iters=self.iterations.value, provider=self.provider,
                                     progress=grew)
                self.results[test] = finished
                self.redraw()
            self.progress.bar_style, self.progress.description = "success", "done"
            self.status.value = self._summary()
        except bench.BenchError as error:
            self.progress.bar_style, self.status.value = "danger", f"<b>Failed:</b> {error}"
        finally:
            self.run_button.disabled = False
        return self.results

    def figure(self):
        """The charts of what has run so far: latency, bandwidth, and what each side spent."""
        lat = [r for t, r in self.results.items() if t in LATENCY_TESTS and r.rows]
        bw = [r for t, r in self.results.items() if t in BANDWIDTH_TESTS and r.rows]
        panels = [p for p, used in (("lat", lat), ("bw", bw), ("cost", lat + bw)) if used]
        fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(5.2 * max(len(panels), 1), 3.8), squeeze=False)
        for ax, panel in zip(axes[0], panels):
            if panel == "lat":
                plots.latency(lat, ax)
            elif panel == "bw":
                plots.bandwidth(bw, ax)
            else:
                plots.costs(lat + bw, ax)
        fig.tight_layout()
        return fig

    def redraw(self):
        started = time.monotonic()
        fig = self.figure()
        self.chart.value = plots.png(fig)
        plt.close(fig)
        spent = time.monotonic() - started
        self._next_redraw = time.monotonic() + spent * (1 / self.redraw_share - 1)

    def _summary(self):
        parts = []
        for rdma, tcp, key, what in (("write_lat", "tcp_lat", "t_typical", "latency"),
                                     ("write_bw", "tcp_bw", "bw_avg_mib", "bandwidth")):
            if rdma in self.results and tcp in self.results:
                a, b = self.results[rdma].rows[-1], self.results[tcp].rows[-1]
                parts.append(f"{what} at {_pretty(a['size'])}: RDMA/TCP = {a[key] / b[key]:.2f}")
        note = bench.caveats(self.results.values())
        if note:
            parts.append(f"<b>Read with care:</b> {note}")
        return "<br>".join(parts)


def record_one_sided(spent, writes, results):
    """Keep the one-sided lesson's figures for the AllReduce lesson's closing view (rdmalab.lessons.evidence,
    key "one-sided"): what the target spent
    while `writes` WRITEs landed (`spent`, procstat.since), and the dashboard's last rows."""
    from rdmalab.lessons import evidence
    lat, tcp, bw, tbw = (results[t].rows[-1] for t in ("write_lat", "tcp_lat", "write_bw", "tcp_bw"))
    share = lambda row: float(row["target"]["cpu_s"] / max(row["initiator"]["cpu_s"], 1e-9))   # noqa: E731
    return evidence.record("one-sided", writes=writes,
                           rdma_target_syscalls=spent["read_syscalls"] + spent["write_syscalls"],
                           rdma_target_switches=spent["voluntary_switches"] + spent["involuntary_switches"],
                           rdma_target_cpu_ms=spent["cpu_s"] * 1e3, write_lat_us=float(lat["t_typical"]),
                           tcp_lat_us=float(tcp["t_typical"]), lat_size=int(lat["size"]), bw_size=int(bw["size"]),
                           rdma_target_cpu_share=share(bw), tcp_receiver_cpu_share=share(tbw))


def _pretty(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"
