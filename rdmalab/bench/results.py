"""What a benchmark run gives: perftest's columns (text, HTML, JSON), RDMA against TCP with ratios,
and a word of warning when the machine could not run both sides at once."""
import json
import os
import textwrap

from rdmalab.bench.catalogue import TESTS
from rdmalab.proc.cpus import usable_cpus

CONTENDED = 0.10         # a side that waited for a CPU this share of its run was not measured alone


def device_kind(provider, device):
    """What the device is, from the device: 'soft' (soft0, the emulated NIC: the soft provider), 'rxe' (Linux's
    Soft-RoCE, whose sysfs entry names the netdev it runs over: /sys/class/infiniband/DEV/parent; or a device
    named rxe*), 'hardware' for any other device, None for none (TCP)."""
    device = str(device or "")
    if provider == "soft" or device.startswith("soft"):
        return "soft"
    if device.startswith("rxe") or (device and os.path.exists(f"/sys/class/infiniband/{device}/parent")):
        return "rxe"
    return "hardware" if device and device != "tcp" else None


# An RDMA WRITE's CPU copies per payload byte as each kind of device is built: constants, shown labelled "by
# design", never in a column of measurements. Only soft0's shared-memory link also counts its copies (its
# measured figure is the results' bytes_copied_by_cpu); nothing counts rxe's or a NIC's. (copies per byte, who)
BY_DESIGN = {
    ("soft", "shm"): (1, "the initiator's CPU, standing in for the NIC's DMA engine"),
    ("soft", "udp"): (2, "the two NIC processes, into packets and out of them (the kernel moves the datagrams "
                         "besides)"),
    ("rxe", None): (2, "the kernels: the initiator's into packets, in its post_send system call (Linux 6.1's "
                       "rxe_post_send runs the requester in the caller's process context: its system time), the "
                       "target's into its memory in softirq, charged to whichever task it interrupts unless the "
                       "kernel accounts IRQ time; on one host (loopback) both in the initiator's system call"),
    ("hardware", None): (0, "none: the NICs' DMA engines"),
}


def copies_by_design(provider, device, link=None):
    """(copies per byte, who copies) of an RDMA WRITE's payload on this device, by its design (BY_DESIGN);
    None for TCP, whose copies are counted."""
    kind = device_kind(provider, device)
    return BY_DESIGN.get((kind, (link or "shm") if kind == "soft" else None))


def waited_for_cpu(row):
    """The largest share of its measured run that either side spent runnable but waiting for a CPU."""
    return max(row[side].get("waited_for_cpu_s", 0.0) / max(row[side].get("wall_s", 0.0), 1e-9)
               for side in ("initiator", "target"))


def caveats(results, cpus=None):
    """What a reader must know before trusting these figures, or ''.

    Whether this machine could run both sides of a test at once: the CPUs this process may use
    (affinity, cgroup quota), and how long each side waited for a CPU while measured (a CPU-bound load
    beside the lab, or too few CPUs). And where soft0, the emulated NIC, shows a cost a hardware NIC
    does not have."""
    cpus = usable_cpus() if cpus is None else cpus
    notes = []
    if any(r.test == "send_lat" and r.provider == "soft" and r.link != "udp" and r.rows for r in results):
        notes.append("On soft0 a SEND costs more than a WRITE: the receiving program polls a completion queue, "
                     "and the emulated NIC fills in the receive's completion, both in Python (about 2 us more "
                     "here), where a WRITE's receiver only reads its memory. On a hardware NIC the NIC does that "
                     "work, and SEND and WRITE latencies are within tens of percent of each other (compare "
                     "perftest's ib_send_lat and ib_write_lat).")
    two_sided = [r for r in results if not TESTS[r.test].passive_target and r.rows]
    if cpus < 2 and two_sided:
        soft = any(r.provider == "soft" for r in two_sided)
        notes.append(f"This process may use {cpus:g} CPU, so the two programs of a ping-pong or a request/response "
                     f"take turns on it: every message waits for a context switch, on any device, a hardware NIC "
                     f"included. That measures the scheduler, not the transport" +
                     ("; and soft0's initiator also copies the data itself" if soft else "") +
                     ". What one CPU cannot slow down is a one-sided operation: read_lat's target runs nothing. "
                     "Compare read_lat with tcp_rr here, and ping-pongs on two free CPUs.")
    worst = max((waited_for_cpu(row) for r in results for row in r.rows), default=0.0)
    if worst >= CONTENDED and cpus >= 2:   # on one CPU each side waits for the other: said above
        notes.append(f"A side waited for a CPU {worst:.0%} of its run: other work was using the CPUs, so these "
                     f"figures include waiting for the scheduler (busy-polling suffers most: a poller that "
                     f"has used its share runs after processes that slept). Close other work and run again.")
    return " ".join(notes)


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

    def __init__(self, test, provider, device, rows, events=False, link=None):
        """link: soft0's ('shm' or 'udp'); None on a real device."""
        self.test, self.provider, self.device, self.rows, self.events = test, provider, device, rows, events
        self.link = link if provider == "soft" else None
        self.kind = TESTS[test].kind

    def note(self):
        return caveats([self])

    @property
    def columns(self):
        return LAT_COLUMNS if self.kind == "lat" else BW_COLUMNS

    def label(self):
        t = TESTS[self.test]
        if t.transport == "tcp":
            where = "TCP over loopback"
        elif self.provider != "soft":
            where = f"{self.device} (pyverbs)"
        elif self.link == "udp":
            where = f"{self.device} (emulated NIC on its udp link: RoCEv2 packets between NIC processes)"
        else:
            where = f"{self.device} (emulated NIC: CPU copies, no wire)"
        return f"{t.title} Test{' (CQ events)' if self.events else ''}, {where}"

    def to_dict(self):
        return {"test": self.test, "provider": self.provider, "device": self.device,
                "transport": TESTS[self.test].transport, "link": self.link, "events": self.events, "rows": self.rows,
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
                if copied and TESTS[self.test].transport == "rdma":   # counted by soft0 itself
                    t = TESTS[self.test]   # a ping-pong's iteration carries a message each way
                    delivered = r["size"] * r["iterations"] * (t.rtt_factor if t.kind == "lat" else 1)
                    copied = f"{copied} ({copied / delivered:.2f} a byte delivered, counted by soft0)"
                elif copied is None:   # an RDMA device: nothing counts them; its design says how many
                    design = copies_by_design(self.provider, self.device, self.link)
                    copied = f"not counted (by design {design[0]} a byte)" if design else "not counted"
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
        # perftest's headers, broken at spaces and units so that twelve columns fit a laptop's notebook
        heads = [h for h, _, _ in self.columns] + ["initiator cpu[ms]", "target cpu[ms]", "syscalls init/target"]
        head = "".join(f"<th>{h.replace(' ', '<br>').replace('[', '<br>[')}</th>" for h in heads)
        body = ""
        for r in self.rows:
            cells = "".join(f"<td>{f.format(r[k]).strip()}</td>" for _, k, f in self.columns)
            i, t = r["initiator"], r["target"]
            cells += (f"<td>{i['cpu_s'] * 1e3:.2f}</td><td>{t['cpu_s'] * 1e3:.3f}</td>"
                      f"<td>{i['read_syscalls'] + i['write_syscalls']} / {t['read_syscalls'] + t['write_syscalls']}</td>")
            body += f"<tr>{cells}</tr>"
        note = self.note()
        note = f"<p><b>Read with care:</b> {note}</p>" if note else ""
        return f"<div><b>{self.label()}</b><table style='font-size:0.9em'><tr>{head}</tr>{body}</table>{note}</div>"


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
        return caveats(self.results.values())

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
    return textwrap.wrap(text, width, initial_indent=prefix, subsequent_indent=" " * len(prefix))
