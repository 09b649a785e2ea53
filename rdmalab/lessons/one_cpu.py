"""Remote memory on one CPU (lesson 06, the target's CPU): what still holds when the target has no CPU of its own.

    with one_cpu.pinned(target.pid) as cpu, target.serving() as server:   # the lesson's plumbing
        read_us = time_reads(qp, cq, make_read, n)      # the learner's loop: an RDMA READ of 8 bytes
        tcp_us = one_cpu.time_requests(server, n)       # the same 8 bytes asked of the target's program over TCP
        ... each timed per round trip, the target's counters read around each ...
    result = one_cpu.OneCpu.from_loops(cpu, n, {"read_lat": (us, spent), "tcp_rr": (us, spent)})
    result                                   # a chart and a table; result.data for the figures

Many learners run on one CPU (a small VM, Binder, a laptop busy with something else). There, two
programs that talk take turns: every message of a ping-pong or a request/response waits for the
scheduler to switch from one to the other, on any device, a hardware NIC included. So a ping-pong on one
CPU measures the scheduler, not the transport. An RDMA READ is different: nothing on the target has to
run, so it needs no turn. The fair comparison is a READ against a TCP request/response (8 bytes ask, the
server answers from its memory): the same work, one without and one with the remote CPU. Both are full
round trips, as perftest reports read_lat, and both timed alike: one clock around a loop of n.
"""
import contextlib
import html
import os
import time

from rdmalab import sockets

REMOTE_READ = ("read_lat", "tcp_rr")     # full round trips: the fair comparison on one CPU
LABELS = {"read_lat": "RDMA READ", "tcp_rr": "TCP request/response"}


def time_requests(sock, n, offset=0):
    """The TCP side of the comparison, timed as the learner's READ loop is: n times ask the target's program
    (target.serving()) for the 8 bytes at `offset` of its memory and wait for them; microseconds per request."""
    request, answer = offset.to_bytes(sockets.REQUEST_BYTES, "little"), memoryview(bytearray(8))
    start = time.perf_counter()
    for _ in range(n):
        sockets.send_all(sock, request)
        sockets.recv_exactly(sock, answer)
    return (time.perf_counter() - start) / n * 1e6


@contextlib.contextmanager
def pinned(pid):
    """This thread and every thread of process `pid` on this thread's first CPU (as `taskset -c N` would pin
    both programs); each given back its own CPUs after. Yields the CPU's number."""
    tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    kept = {0: os.sched_getaffinity(0), **{t: os.sched_getaffinity(t) for t in tasks}}
    cpu = min(kept[0])
    try:
        for t in kept:
            os.sched_setaffinity(t, {cpu})
        yield cpu
    finally:
        for t, cpus in kept.items():
            try:
                os.sched_setaffinity(t, cpus)
            except ProcessLookupError:
                pass


class OneCpu:
    """The two round trips on one CPU: data["tests"][test] = {"t_typical": us per round trip,
    "switches_per_message": {"target": context switches of the target per round trip}}."""

    def __init__(self, data):
        self.data = data

    @classmethod
    def from_loops(cls, cpu, iterations, loops, size=8):
        """`loops`: {"read_lat": (us per round trip, procstat.since of the target around it), "tcp_rr": ...}."""
        tests = {test: {"t_typical": us, "switches_per_message": {
            "target": (spent["voluntary_switches"] + spent["involuntary_switches"]) / iterations}}
                 for test, (us, spent) in loops.items()}
        return cls({"cpu": cpu, "size": size, "iters": iterations, "tests": tests,
                    "read_over_request": tests["read_lat"]["t_typical"] / tests["tcp_rr"]["t_typical"]})

    def target_switches(self, test):
        return self.data["tests"][test]["switches_per_message"]["target"]

    def _row(self, test):
        m = self.data["tests"][test]
        return LABELS[test], m["t_typical"], m["switches_per_message"]["target"]

    def lines(self):
        d = self.data
        out = [f"Pinned to CPU {d['cpu']}, {d['size']} B, {d['iters']} round trips each:"]
        for test in REMOTE_READ:
            label, t, tg = self._row(test)
            out.append(f"  {label:22} {t:8.2f} us   the target's context switches per round trip: {tg:.2f}")
        out.append(f"RDMA READ / TCP request-response = {d['read_over_request']:.2f}: the READ needs no turn of the "
                   f"target's CPU; each request waits for the server to be scheduled.")
        return out

    def __str__(self):
        return "\n".join(self.lines())

    __repr__ = __str__

    def figure(self):
        """The two round trips as bars, each with the target's context switches per round trip."""
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        times = [self.data["tests"][t]["t_typical"] for t in REMOTE_READ]
        bars = ax.bar([LABELS[t].replace(" ", "\n", 1) for t in REMOTE_READ], times, color=["#1a7f37", "#cf222e"])
        for bar, test in zip(bars, REMOTE_READ):
            ax.annotate(f"{bar.get_height():.1f} us\ntarget switches/msg {self.target_switches(test):.1f}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=10)
        ax.set_ylim(0, max(times) * 1.45)
        ax.set_ylabel("us per round trip", fontsize=10)
        ax.set_title(f"Read 8 B of remote memory on one CPU (CPU {self.data['cpu']})", fontsize=11)
        ax.tick_params(labelsize=10)
        fig.tight_layout()
        return fig

    def _repr_html_(self):
        from rdmalab.lessons.plots import png_base64
        rows = "".join(f"<tr><td style='text-align:left'>{html.escape(label)}</td><td>{t:.2f}</td><td>{tg:.2f}</td></tr>"
                       for label, t, tg in map(self._row, REMOTE_READ))
        return (f"<img src='data:image/png;base64,{png_base64(self.figure())}' style='max-width:100%'/>"
                f"<table><tr><th style='text-align:left'>one CPU, {self.data['size']} B</th>"
                f"<th>us per round trip</th><th>target switches / round trip</th></tr>{rows}</table>")
