"""RDMA against TCP, measured the way RDMA engineers measure: perftest's tests and statistics.

    from rdmalab import bench
    r = bench.run("write_lat", sizes=[8], iters=1000)     # a Results table: print it, r.to_json()
    bench.compare(sizes=[8, 65536])                       # RDMA and TCP side by side, with ratios

Three processes take part: this one only orchestrates; an *initiator* and a *target* process run
the data path (one-sided RDMA needs a second process whose memory changes while it runs no code).
They swap connection details through this process, as perftest swaps them over TCP. For each
size the initiator times every iteration (perftest's tposted/tcompleted) and counts what it spent
around its data loop; this process reads the target's counters from /proc before and after, while
the target sits blocked (passive tests) or serves (ping-pongs). See rdmalab/perfstats.py for the
statistics and rdmalab/procstat.py for the counters.

Tests (perftest's names, plus the TCP baseline from rdmalab.sockets):
    write_lat  RDMA WRITE ping-pong, half round trip      read_lat  RDMA READ, full round trip
    send_lat   SEND/RECV ping-pong, half round trip       write_bw  RDMA WRITE stream, target passive
    tcp_lat    TCP ping-pong, half round trip             tcp_bw    TCP stream
"""
import json
import select
import sys
import time

from . import children, perfstats


class Test:
    def __init__(self, name, title, kind, transport, rtt_factor=2, passive_target=False):
        self.name, self.title, self.kind, self.transport = name, title, kind, transport
        self.rtt_factor, self.passive_target = rtt_factor, passive_target


TESTS = {t.name: t for t in [
    Test("write_lat", "RDMA_Write Latency", "lat", "rdma"),
    Test("read_lat", "RDMA_Read Latency", "lat", "rdma", rtt_factor=1, passive_target=True),
    Test("send_lat", "Send Latency", "lat", "rdma"),
    Test("write_bw", "RDMA_Write BW", "bw", "rdma", passive_target=True),
    Test("tcp_lat", "TCP Latency", "lat", "tcp"),
    Test("tcp_bw", "TCP BW", "bw", "tcp"),
]}
ALL_SIZES = [2 ** k for k in range(1, 24)]          # perftest -a: 2 B .. 8 MiB
MAX_SIZE = 64 << 20                                 # largest single size (--size)
DEFAULT_SIZE = {"lat": 2, "bw": 65536}              # perftest's defaults
DEFAULT_ITERS = {"lat": 1000, "bw": 5000}
BYTES_PER_SIZE = 1 << 30                            # a sweep moves at most 1 GiB per size
TX_DEPTH, CQ_MOD = 128, 100                         # perftest's bandwidth defaults
EVENT_TESTS = ("read_lat", "send_lat", "write_bw")    # what can sleep on completion events
REPLY_TIMEOUT = 120.0
CONTENDED = 0.10         # a side that waited for a CPU this share of its run was not measured alone


class BenchError(RuntimeError):
    """A benchmark could not run or its peer failed; the message says which and why."""


def iterations_for(test, size, iters=None):
    """`iters` if given; else perftest's default, capped so that one size moves at most BYTES_PER_SIZE."""
    if iters:
        return iters
    return max(8, min(DEFAULT_ITERS[TESTS[test].kind], BYTES_PER_SIZE // max(size, 1)))


# ---------------------------------------------------------------- orchestration (this process)

class _Child:
    """One side, a `python -m rdmalab.bench <role>` process speaking JSON lines on stdin/stdout."""

    def __init__(self, role, provider):
        self.role = role
        self.proc = children.spawn("rdmalab.bench", role, **({"RDMALAB_PROVIDER": provider} if provider else {}))

    def send(self, **message):
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._died()

    def reply(self, timeout=REPLY_TIMEOUT, watch=()):
        """The next answer. If a `watch`ed process (the peer) dies meanwhile, that is the error."""
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                break
            for other in watch:
                if other.proc.poll() is not None:
                    raise BenchError(f"the {other.role} process died (exit {other.proc.returncode}) "
                                     f"while the {self.role} was working")
            if time.monotonic() > deadline:
                raise BenchError(f"the {self.role} gave no answer within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            self._died()
        answer = json.loads(line)
        if "error" in answer:
            raise BenchError(f"the {self.role} failed: {answer['error']}")
        return answer

    def _died(self):
        self.proc.wait(timeout=10)
        err = self.proc.stderr.read().strip().splitlines()
        raise BenchError(f"the {self.role} process died (exit {self.proc.returncode}): "
                         f"{err[-1] if err else 'no message'}")

    def close(self):
        children.stop(self.proc)


def run(test, sizes=None, iters=None, provider=None, host="127.0.0.1", warmup=None, progress=None, events=False):
    """Run one test over `sizes` (default: perftest's size for it; ALL_SIZES for a sweep).

    `progress(row, done, total)` is called as each size completes. `events` (perftest's -e): the
    RDMA sides sleep on completion events instead of polling their CQs. Returns a Results table.
    """
    from . import procstat
    if test not in TESTS:
        raise BenchError(f"unknown test {test!r}: choose one of {', '.join(TESTS)}")
    t = TESTS[test]
    sizes = list(sizes or [DEFAULT_SIZE[t.kind]])
    bad = [s for s in sizes if not isinstance(s, int) or s < 1 or s > MAX_SIZE]
    if bad:
        raise BenchError(f"sizes must be whole numbers of bytes from 1 to {MAX_SIZE} (64 MiB); got {bad}")
    if events and test not in EVENT_TESTS:
        raise BenchError(f"--events applies to {', '.join(EVENT_TESTS)}: {test} "
                         + ("waits on memory, as perftest's does: no completion tells it the peer wrote"
                            if test == "write_lat" else "uses TCP, which always sleeps in the kernel"))
    if iters is not None and (not isinstance(iters, int) or iters < 8):
        raise BenchError(f"iterations must be a whole number of at least 8 (perftest drops the top 2 samples); got {iters!r}")
    target, initiator = _Child("target", provider), _Child("initiator", provider)
    rows, info = [], {}
    try:
        for child in (target, initiator):
            child.send(op="open", test=test, max_size=max(sizes), host=host, events=events)
        t_end, i_end = target.reply(), initiator.reply()
        info = {"provider": i_end.pop("provider"), "device": i_end.pop("device", None)}
        target.send(op="connect", peer=i_end)
        initiator.send(op="connect", peer=t_end)
        target.reply(), initiator.reply()
        for n, size in enumerate(sizes):
            count = iterations_for(test, size, iters)
            warm = warmup if warmup is not None else min(100, count // 10)
            target.send(op="serve", size=size, iters=count, warmup=warm)
            target.reply()
            before = procstat.snapshot(target.proc.pid)
            initiator.send(op="run", size=size, iters=count, warmup=warm)
            result = initiator.reply(watch=[target])
            target_spent = procstat.since(before)   # the target sat blocked throughout: exact
            if not t.passive_target:                 # it served: it counted its measured part itself
                target.send(op="report")
                target_spent = target.reply()["spent"]
            if t.kind == "lat":
                stats = perfstats.latency(result["tposted"], t.rtt_factor)
            else:
                stats = perfstats.bandwidth(size, result["tposted"], result["tcompleted"], result["cq_mod"])
            row = {"size": size, **stats, "initiator": result["spent"], "target": target_spent,
                   "bytes_copied_by_cpu": _cpu_copies(t, info["provider"], size, count, result["spent"], target_spent)}
            rows.append(row)
            if progress:
                progress(row, n + 1, len(sizes))
    finally:
        initiator.close()
        target.close()
    return Results(test, info["provider"], info["device"], rows, events)


def waited_for_cpu(row):
    """The largest share of its measured run that either side spent runnable but waiting for a CPU."""
    return max(row[side].get("waited_for_cpu_s", 0.0) / max(row[side].get("wall_s", 0.0), 1e-9)
               for side in ("initiator", "target"))


def machine_note(results, cpus=None):
    """What a reader must know when this machine could not run both sides of a test at once, or ''.

    Two things say so: the CPUs this process may use (affinity, cgroup quota), and how long each side
    waited for a CPU while measured (a CPU-bound load beside the lab, or too few CPUs)."""
    from .cpus import usable_cpus
    cpus = usable_cpus() if cpus is None else cpus
    notes = []
    two_sided = [r for r in results if not TESTS[r.test].passive_target and r.rows]
    if cpus < 2 and two_sided:
        notes.append(f"This process may use {cpus:g} CPU, so the two sides of a ping-pong take turns on it: every "
                     f"message waits for the scheduler to switch from one to the other. A real NIC needs no CPU "
                     f"turn; soft0's initiator copies the data itself, so on one CPU it pays what TCP pays (a "
                     f"switch) plus a Python copy. Compare the ratio on two free CPUs (the lab's quiet figures).")
    worst = max((waited_for_cpu(row) for r in results for row in r.rows), default=0.0)
    if worst >= CONTENDED and cpus >= 2:   # on one CPU each side waits for the other: said above
        notes.append(f"A side waited for a CPU {worst:.0%} of its run: other work was using the CPUs, so these "
                     f"figures include waiting for the scheduler (busy-polling suffers most: a poller that "
                     f"has used its share runs after processes that slept). Close other work and run again.")
    return " ".join(notes)


def _cpu_copies(test, provider, size, count, initiator, target):
    """Bytes some CPU copied: TCP copies into and out of the kernel (its read/write byte counts);
    the emulated NIC's initiator copies the payload standing in for DMA; a real NIC's DMA copies none."""
    if test.transport == "tcp":
        return initiator["bytes_written"] + initiator["bytes_read"] + target["bytes_written"] + target["bytes_read"]
    return size * count if provider == "soft" else 0


def compare(sizes=(8, 65536, 1 << 20), iters=None, provider=None, progress=None):
    """RDMA and TCP side by side in one run: write_lat vs tcp_lat, write_bw vs tcp_bw."""
    pairs = [("write_lat", "tcp_lat"), ("write_bw", "tcp_bw")]
    results = {}
    for rdma, tcp in pairs:
        for name in (rdma, tcp):
            results[name] = run(name, sizes=list(sizes), iters=iters, provider=provider, progress=progress)
    return Comparison(results, pairs)


# ---------------------------------------------------------------- results

LAT_COLUMNS = [("#bytes", "size", "{:<7d}"), ("#iterations", "iterations", "{:<11d}"),
               ("t_min[usec]", "t_min", "{:<11.2f}"), ("t_max[usec]", "t_max", "{:<11.2f}"),
               ("t_typical[usec]", "t_typical", "{:<15.2f}"), ("t_avg[usec]", "t_avg", "{:<11.2f}"),
               ("t_stdev[usec]", "t_stdev", "{:<13.2f}"), ("99% percentile[usec]", "p99", "{:<20.2f}"),
               ("99.9% percentile[usec]", "p99_9", "{:<22.2f}")]
BW_COLUMNS = [("#bytes", "size", "{:<10d}"), ("#iterations", "iterations", "{:<11d}"),
              ("BW peak[MiB/sec]", "bw_peak_mib", "{:<16.2f}"), ("BW average[MiB/sec]", "bw_avg_mib", "{:<19.2f}"),
              ("BW average[Gb/sec]", "bw_avg_gbps", "{:<18.2f}"), ("MsgRate[Mpps]", "msg_rate_mpps", "{:<13.6f}")]
COST_COLUMNS = [("cpu[ms]", lambda s: f"{s['cpu_s'] * 1e3:.2f}"), ("user[ms]", lambda s: f"{s['user_s'] * 1e3:.2f}"),
                ("sys[ms]", lambda s: f"{s['system_s'] * 1e3:.2f}"),
                ("syscalls r/w", lambda s: f"{s['read_syscalls']}/{s['write_syscalls']}"),
                ("ctx sw vol/invol", lambda s: f"{s['voluntary_switches']}/{s['involuntary_switches']}")]
LINE = "-" * 87


class Results:
    """One test over a range of sizes: perftest's text (print it), an HTML table, JSON."""

    def __init__(self, test, provider, device, rows, events=False):
        self.test, self.provider, self.device, self.rows, self.events = test, provider, device, rows, events
        self.kind = TESTS[test].kind

    def note(self):
        return machine_note([self])

    @property
    def columns(self):
        return LAT_COLUMNS if self.kind == "lat" else BW_COLUMNS

    def label(self):
        t = TESTS[self.test]
        where = "TCP over loopback" if t.transport == "tcp" else (
            f"{self.device} (emulated NIC: CPU copies, no wire)" if self.provider == "soft" else f"{self.device} (pyverbs)")
        return f"{t.title} Test{' (CQ events)' if self.events else ''}, {where}"

    def to_dict(self):
        return {"test": self.test, "provider": self.provider, "device": self.device,
                "transport": TESTS[self.test].transport, "events": self.events, "rows": self.rows,
                "note": self.note()}

    def to_json(self):
        return json.dumps(self.to_dict(), indent=1)

    def text(self, with_note=True):
        lines = [LINE, f"                    {self.label()}", LINE,
                 " " + " ".join(f"{h:<{len(f.format(0)) if 'd' in f else len(h)}}" for h, _, f in self.columns)]
        for r in self.rows:
            lines.append(" " + " ".join(f.format(r[k]) for _, k, f in self.columns))
        lines += [LINE, " CPU and kernel cost of the measured iterations:",
                  " #bytes     side       " + "  ".join(f"{h:>16}" for h, _ in COST_COLUMNS) + "  bytes copied by CPU"]
        for r in self.rows:
            for side in ("initiator", "target"):
                cells = "  ".join(f"{fn(r[side]):>16}" for _, fn in COST_COLUMNS)
                copied = r["bytes_copied_by_cpu"] if side == "initiator" else ""
                lines.append(f" {r['size']:<10d} {side:<10} {cells}  {copied}")
        lines.append(LINE)
        note = self.note() if with_note else ""
        if note:
            lines += _wrapped(" ! ", note) + [LINE]
        return "\n".join(lines)

    __str__ = text

    def __repr__(self):
        return self.text()

    def _repr_html_(self):
        head = "".join(f"<th>{h}</th>" for h, _, _ in self.columns) + "<th>initiator cpu[ms]</th><th>target cpu[ms]</th>" \
            "<th>syscalls init/target</th>"
        body = ""
        for r in self.rows:
            cells = "".join(f"<td>{f.format(r[k]).strip()}</td>" for _, k, f in self.columns)
            i, t = r["initiator"], r["target"]
            cells += (f"<td>{i['cpu_s'] * 1e3:.2f}</td><td>{t['cpu_s'] * 1e3:.3f}</td>"
                      f"<td>{i['read_syscalls'] + i['write_syscalls']} / {t['read_syscalls'] + t['write_syscalls']}</td>")
            body += f"<tr>{cells}</tr>"
        note = self.note()
        note = f"<p><b>Read with care:</b> {note}</p>" if note else ""
        return f"<div><b>{self.label()}</b><table><tr>{head}</tr>{body}</table>{note}</div>"


class Comparison:
    """RDMA and TCP results from one run, with their ratios per size."""

    def __init__(self, results, pairs):
        self.results, self.pairs = results, pairs

    def ratios(self):
        """Per size: RDMA latency / TCP latency (median), RDMA bandwidth / TCP bandwidth (average),
        target CPU as a share of the initiator's for each transport."""
        out = []
        for rdma, tcp in self.pairs:
            for a, b in zip(self.results[rdma].rows, self.results[tcp].rows):
                key = "t_typical" if TESTS[rdma].kind == "lat" else "bw_avg_mib"
                out.append({"rdma": rdma, "tcp": tcp, "size": a["size"], "rdma_over_tcp": a[key] / b[key],
                            "rdma_target_cpu_share": a["target"]["cpu_s"] / max(a["initiator"]["cpu_s"], 1e-9),
                            "tcp_target_cpu_share": b["target"]["cpu_s"] / max(b["initiator"]["cpu_s"], 1e-9)})
        return out

    def note(self):
        return machine_note(self.results.values())

    def to_dict(self):
        return {"results": {k: r.to_dict() for k, r in self.results.items()}, "ratios": self.ratios(),
                "note": self.note()}

    def to_json(self):
        return json.dumps(self.to_dict(), indent=1)

    def text(self):
        parts = [self.results[name].text(with_note=False) for pair in self.pairs for name in pair]
        parts.append(" Ratios (RDMA / TCP; latency: t_typical, bandwidth: BW average; CPU share: target / initiator)")
        parts.append(f" {'test':<20} {'#bytes':>10} {'RDMA/TCP':>10} {'RDMA target CPU':>16} {'TCP target CPU':>15}")
        for r in self.ratios():
            parts.append(f" {r['rdma'] + '/' + r['tcp']:<20} {r['size']:>10} {r['rdma_over_tcp']:>10.3f} "
                         f"{r['rdma_target_cpu_share']:>15.1%} {r['tcp_target_cpu_share']:>15.1%}")
        note = self.note()
        if note:
            parts += _wrapped(" ! ", note)
        return "\n".join(parts)

    __str__ = __repr__ = text

    def _repr_html_(self):
        return "".join(self.results[name]._repr_html_() for pair in self.pairs for name in pair) + \
            "<pre>" + "\n".join(self.text().splitlines()[-len(self.ratios()) - 2:]) + "</pre>"


def _wrapped(prefix, text, width=87):
    import textwrap
    return textwrap.wrap(text, width, initial_indent=prefix, subsequent_indent=" " * len(prefix))


# ---------------------------------------------------------------- the two sides (child processes)

def _serve(role):
    """Command loop of an initiator or target process."""
    from .bench_sides import make_side
    side = spent = None
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg.pop("op")
        try:
            if op == "close":
                break
            if op == "open":
                side = make_side(role, **msg)
                answer = side.endpoint()
            elif op == "connect":
                side.connect(msg["peer"])
                answer = {"ok": True}
            elif op == "serve":
                side.prepare(msg["size"], msg["iters"] + msg["warmup"])
                _answer({"ready": True})
                spent = side.serve(msg["size"], msg["iters"], msg["warmup"])
                continue
            elif op == "report":
                answer = {"spent": spent}
            elif op == "run":
                answer = side.run(**msg)
            else:
                answer = {"error": f"unknown operation {op!r}"}
        except Exception as error:  # report, then stop: the orchestrator raises BenchError with it
            _answer({"error": f"{type(error).__name__}: {error}"})
            break
        _answer(answer)
    if side is not None:
        side.close()


def _answer(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
