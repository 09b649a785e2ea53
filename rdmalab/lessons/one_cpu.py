"""Remote memory on one CPU (lesson 04): what still holds when the target has no CPU of its own.

    result = one_cpu.measure(iters=1000)    # pinned to one CPU: read_lat, tcp_rr, write_lat, tcp_lat at 8 B
    result                                   # a chart and a table; result.data for the figures

Many learners run on one CPU (a small VM, Binder, a laptop busy with something else). There, two
programs that talk take turns: every message of a ping-pong or a request/response waits for the
scheduler to switch from one to the other, on any device, a hardware NIC included. So a ping-pong on one
CPU measures the scheduler, not the transport. An RDMA READ is different: nothing on the target has to
run, so it needs no turn. The fair comparison is a READ against a TCP request/response (8 bytes ask, the
server answers from its memory): the same work, one without and one with the remote CPU. Both are full
round trips, as perftest reports read_lat; the ping-pongs are half round trips, as it reports write_lat.
"""
import html

from rdmalab import bench
from rdmalab.proc.cpus import pinned_to_one_cpu

REMOTE_READ = ("read_lat", "tcp_rr")     # full round trips: the fair comparison on one CPU
PING_PONG = ("write_lat", "tcp_lat")     # half round trips: scheduler-bound on one CPU, on any device
LABELS = {"read_lat": "RDMA READ", "tcp_rr": "TCP request/response", "write_lat": "RDMA WRITE ping-pong",
          "tcp_lat": "TCP ping-pong"}


def measure(iters=1000, rounds=3, size=8):
    """The four tests at `size` bytes, pinned to one CPU, `rounds` rounds in alternation (medians)."""
    with pinned_to_one_cpu() as cpu:
        measured = bench.alternating(REMOTE_READ + PING_PONG, size, iters, rounds)
    return OneCpu({"cpu": cpu, "size": size, "iters": iters, "rounds": rounds, "tests": measured,
                   "read_over_request": measured["read_lat"]["t_typical"] / measured["tcp_rr"]["t_typical"]})


class OneCpu:
    def __init__(self, data):
        self.data = data

    def _row(self, test):
        m = self.data["tests"][test]
        s = m["switches_per_message"]
        return LABELS[test], m["t_typical"], s["initiator"], s["target"]

    def lines(self):
        d = self.data
        out = [f"Pinned to CPU {d['cpu']}, {d['size']} B, median of {d['rounds']} rounds of {d['iters']}:"]
        for test in REMOTE_READ + PING_PONG:
            label, t, i, tg = self._row(test)
            out.append(f"  {label:22} {t:8.2f} us   context switches per message: initiator {i:.2f}, target {tg:.2f}")
        out.append(f"RDMA READ / TCP request-response = {d['read_over_request']:.2f}: the READ needs no turn of the "
                   f"target's CPU; the request waits for the server to be scheduled.")
        return out

    def __str__(self):
        return "\n".join(self.lines())

    __repr__ = __str__

    def figure(self):
        """Two panels: the fair comparison (remote reads, full round trips), and the ping-pongs, marked as
        what they measure on one CPU."""
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=False)
        for ax, pair, title in ((axes[0], REMOTE_READ, "Read 8 B of remote memory\n(full round trip)"),
                                (axes[1], PING_PONG, "Ping-pong 8 B (half round trip)\nscheduler-bound on any device")):
            times = [self.data["tests"][t]["t_typical"] for t in pair]
            bars = ax.bar([LABELS[t].replace(" ", "\n", 1) for t in pair], times, color=["#1a7f37", "#cf222e"],
                          hatch=None if pair == REMOTE_READ else "//", edgecolor="white")
            for bar, test in zip(bars, pair):
                s = self.data["tests"][test]["switches_per_message"]["target"]
                ax.annotate(f"{bar.get_height():.1f} us\ntarget switches/msg {s:.1f}",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=10)
            ax.set_ylim(0, max(times) * 1.45)
            ax.set_ylabel("t_typical [us]", fontsize=10)
            ax.set_title(title, fontsize=11)
            ax.tick_params(labelsize=10)
        fig.suptitle(f"One CPU (CPU {self.data['cpu']}): remote memory without the remote CPU", fontsize=11)
        fig.tight_layout()
        return fig

    def _repr_html_(self):
        from rdmalab.lessons.plots import png_base64
        rows = "".join(f"<tr><td style='text-align:left'>{html.escape(label)}</td><td>{t:.2f}</td><td>{i:.2f}</td>"
                       f"<td>{tg:.2f}</td></tr>" for label, t, i, tg in map(self._row, REMOTE_READ + PING_PONG))
        return (f"<img src='data:image/png;base64,{png_base64(self.figure())}' style='max-width:100%'/>"
                f"<table><tr><th style='text-align:left'>test (one CPU, {self.data['size']} B)</th>"
                f"<th>t_typical [us]</th><th>initiator switches / msg</th><th>target switches / msg</th></tr>"
                f"{rows}</table>")
