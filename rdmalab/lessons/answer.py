"""The series' answer, from the learner's own numbers: the AllReduce lesson's closing view.

    from rdmalab.lessons import answer
    answer.record_allreduce(ring, tcp, mpi)            # the AllReduce lesson keeps its figures (evidence "allreduce")
    answer.closing_view(device=ring.data["device"])    # a table, a chart, the lesson-00 choice judged

The view reads what the socket-path, one-sided and allreduce lessons recorded (rdmalab.lessons.evidence,
keyed by slug; the text names them by today's numbers, rdmalab.lessons.series): what the receiving
side spent through TCP against an RDMA WRITE's target, the latency ratio, the ring's busbw over both
transports. A lesson not run yet leaves its rows empty and says which lesson fills them; nothing fails.
It also says who copied the bytes on the device that produced them: soft0, Soft-RoCE or a hardware NIC.
"""
import html

from rdmalab.lessons import evidence
from rdmalab.lessons.quiz import ANSWER, CHOICES, WHY, load_answers
from rdmalab.lessons.series import number, title

LESSONS = {slug: title(slug) for slug in ("socket-path", "one-sided", "allreduce")}   # those that record
SOCKETS, ONE_SIDED, ALLREDUCE, SCALING, WELCOME = (number(s) for s in (
    "socket-path", "one-sided", "allreduce", "scaling-out", "welcome"))

# Who touches the payload of an RDMA WRITE, by device (the view marks the one these numbers came from).
WHO_COPIES = {
    "soft": "soft0 (emulated NIC): the initiator's CPU copies the bytes into the target's shared memory, standing "
            "in for the NIC's DMA engine. The target's counters stay flat as on hardware, but the initiator "
            "pays for the copy, so the ratios here set one CPU copy against TCP's two copies and its syscalls.",
    "rxe": "Soft-RoCE (rdma_rxe): the NIC is kernel code on both hosts. Each post_send is a system call (rxe's "
           "doorbell); the initiator's kernel copies the payload into packets, and the target's kernel copies "
           "it into the registered memory in softirq context (a tasklet in Linux 6.1; kworker threads in later "
           "kernels), not charged to the target process (softirq time lands on whatever task it interrupted, or "
           "on ksoftirqd): the target process's counters stay flat while its host's CPU works. Good for "
           "correctness, not speed.",
    "hardware": "A hardware NIC (mlx5, ...): the NIC's DMA engine reads the initiator's memory and writes the "
                "target's. No CPU touches the payload on either side; the initiator's CPU only writes a work "
                "request and rings a doorbell, and polls a completion.",
}


def kind_of(device=None, provider=None):
    """'soft', 'rxe' or 'hardware' for a device name (soft0, rxe0, mlx5_0) or provider; None if unknown."""
    device = device or ""
    if device.startswith("soft") or provider == "soft":
        return "soft"
    if device.startswith("rxe"):
        return "rxe"
    return "hardware" if device and device != "tcp" else None


def allreduce_figures(ring, tcp, mpi, provider):
    """Evidence "allreduce" from allreduce.measure's reports (ring over RDMA, ring over TCP) and mpi_allreduce's
    rows: in-place times in seconds (the slowest rank's, as measure reports them) and busbw in GB/s; and what
    disturbed the rings' runs at the largest size, in words ('' if nothing did: Report.disturbed)."""
    rows, trows = ring.data["rows"], tcp.data["rows"]
    if [r["size"] for r in rows] != [r["size"] for r in trows] or len(mpi["rows"]) != len(rows):
        raise ValueError("the RDMA, TCP and MPI runs must cover the same sizes")
    disturbed = "; ".join(f"over {name}, {r.disturbed()}" for name, r in (("RDMA", ring), ("TCP", tcp)) if r.disturbed())
    return {"ranks": ring.data["ranks"], "sizes": [r["size"] for r in rows],
            "ring_rdma_s": [r["in"]["time_us"] / 1e6 for r in rows],
            "ring_tcp_s": [r["in"]["time_us"] / 1e6 for r in trows],
            "mpi_s": [m["time_us"] / 1e6 for m in mpi["rows"]],
            "busbw_rdma": [r["in"]["busbw"] for r in rows], "busbw_tcp": [r["in"]["busbw"] for r in trows],
            "provider": provider, "disturbed": disturbed}


def record_allreduce(ring, tcp, mpi):
    """Keep the AllReduce lesson's figures (evidence "allreduce"), for the closing view and the scaling lesson."""
    from rdmalab import verbs
    return evidence.record("allreduce", **allreduce_figures(ring, tcp, mpi, verbs.PROVIDER))


def busbw(size, seconds, ranks):
    """nccl-tests' AllReduce bus bandwidth, GB/s: algbw = size / time, times 2(n-1)/n."""
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks


def _per(total, count):
    return None if total is None or not count else total / count


COPIER = {"soft": "the initiator's CPU (soft0 stands in for DMA)", "rxe": "both kernels, in softirq: not counted",
          "hardware": "none: the NICs' DMA"}


def rows(kept):
    """The table: (what, through TCP, by RDMA, lesson that measured it); None where not measured. The
    freeze-the-target experiment leads: its answer does not depend on how the device is built."""
    one, four, five = kept.get("socket-path", {}), kept.get("one-sided", {}), kept.get("allreduce", {})
    writes = four.get("writes")
    frozen = "frozen_rdma_posted" in four
    copies = four.get("rdma_copies_per_byte")
    kind = four.get("device_kind")
    out = [
        ("operations that completed against a stopped (SIGSTOP) target",
         f"stalled after {four['frozen_tcp_bytes'] / (1 << 20):.1f} MiB" if frozen and four.get("frozen_tcp_stalled")
         else None, f"{four['frozen_rdma_completed']} of {four['frozen_rdma_posted']}" if frozen else None, ONE_SIDED),
        ("one CPU: read 8 B of remote memory, us (full round trip)", four.get("one_cpu_request_us"),
         four.get("one_cpu_read_us"), ONE_SIDED),
        ("receiver's syscalls per message", one.get("tcp_syscalls_per_message"),
         _per(four.get("rdma_target_syscalls"), writes), f"{SOCKETS} / {ONE_SIDED}"),
        ("receiver's context switches per message", one.get("tcp_switches_per_message"),
         _per(four.get("rdma_target_switches"), writes), f"{SOCKETS} / {ONE_SIDED}"),
        ("CPU copies per byte delivered", one.get("tcp_copies_per_byte"),
         (f"{copies:g}: {COPIER[kind]}" if copies is not None and kind in COPIER else COPIER.get(kind)),
         f"{SOCKETS} / {ONE_SIDED}"),
        (f"receiver CPU / sender CPU, streaming {_size(four.get('bw_size'))}",
         four.get("tcp_receiver_cpu_share", one.get("tcp_receiver_cpu_share")),
         four.get("rdma_target_cpu_share"), f"{ONE_SIDED} (TCP: {SOCKETS} if {ONE_SIDED} is missing)"),
        (f"latency at {_size(four.get('lat_size'))}, us (half round trip)", four.get("tcp_lat_us"),
         four.get("write_lat_us"), ONE_SIDED),
    ]
    for size, t, r in zip(five.get("sizes", []), five.get("busbw_tcp", []), five.get("busbw_rdma", [])):
        out.append((f"ring AllReduce busbw at {_size(size)}, GB/s ({five['ranks']} ranks)", t, r, ALLREDUCE))
    return out


def missing(kept):
    """Lessons whose figures the view lacks, as (slug, number and title)."""
    return [(k, name) for k, name in LESSONS.items() if not kept.get(k)]


def verdict(kept, answers):
    """What the lesson-00 choice was, judged against the evidence: a list of (choice, is_answer, text)."""
    chosen = answers.get("welcome")
    notes = _numbers(kept)
    out = []
    for i, choice in enumerate(CHOICES):
        out.append((choice, i == ANSWER, WHY[i] + (" " + notes[i] if notes.get(i) else ""), i == chosen))
    return out


def _numbers(kept):
    """The learner's numbers that bear on each choice (indexes as quiz.CHOICES)."""
    one, four, five = kept.get("socket-path", {}), kept.get("one-sided", {}), kept.get("allreduce", {})
    notes = {}
    ratio = _ratio(five.get("busbw_rdma"), five.get("busbw_tcp"))
    if five.get("disturbed"):   # a disturbed run ranks nothing: say so rather than conclude
        notes[1] = (f"Your rings' run in {ALLREDUCE} was disturbed at {_size(five['sizes'][-1])} ({five['disturbed']}): "
                    f"it cannot say how RDMA and TCP compare. Run {ALLREDUCE}'s measurements again on a quiet machine.")
        ratio = None
    lat, tlat = four.get("write_lat_us"), four.get("tcp_lat_us")
    if lat and tlat:
        notes[0] = f"You measured RDMA WRITE {lat:.1f} us against TCP {tlat:.1f} us at {_size(four.get('lat_size'))}."
        if five.get("ring_rdma_s"):
            p, t = five["ranks"], five["ring_rdma_s"][-1]
            share = 2 * (p - 1) * lat * 1e-6 / t
            notes[0] += (f" Your ring's {2 * (p - 1)} latencies are {share:.1%} of its {t * 1e3:.2f} ms at "
                         f"{_size(five['sizes'][-1])}: the rest is bytes.")
    if ratio:
        notes[1] = (f"Your two rings ran on one host, where no network link limits either of them, and RDMA's "
                    f"busbw was {ratio:.1f}x TCP's at {_size(five['sizes'][-1])}: what differs is what a byte "
                    f"costs the CPUs.")
    bits = []
    if "frozen_rdma_posted" in four:
        bits.append(f"with the target process stopped, {four['frozen_rdma_completed']} of {four['frozen_rdma_posted']} "
                    f"RDMA operations on its memory completed while a TCP sender to it stalled after "
                    f"{four['frozen_tcp_bytes'] / (1 << 20):.1f} MiB ({ONE_SIDED})")
    if one.get("tcp_syscalls_per_message") is not None:
        bits.append(f"a TCP receiver made {one['tcp_syscalls_per_message']:.1f} syscalls and "
                    f"{one.get('tcp_switches_per_message', 0):.1f} context switches per message ({SOCKETS})")
    if four.get("writes"):
        bits.append(f"the target of {four['writes']} RDMA WRITEs made {four.get('rdma_target_syscalls', 0)} syscalls "
                    f"and used {four.get('rdma_target_cpu_ms', 0):.2f} ms of CPU ({ONE_SIDED})")
    if ratio and ratio >= 1:
        bits.append(f"the same ring moved {ratio:.1f}x the busbw over RDMA ({ALLREDUCE})")
    elif ratio:   # the evidence says otherwise this time: say so, and why it can on this machine
        bits.append(f"but in your run of {ALLREDUCE} the ring over RDMA moved only {ratio:.1f}x TCP's busbw at "
                    f"{_size(five['sizes'][-1])}: on one host both rings are CPU copies, and a rank that waits "
                    f"while another process holds its CPU loses milliseconds (lesson {SCALING} shows the spread). Run "
                    f"{ALLREDUCE}'s ring cells again on a quiet machine, or `rdmalab allreduce --ranks 2 --size 1M` "
                    f"for "
                    f"each transport")
    if bits:
        notes[2] = "Your evidence: " + "; ".join(bits) + "."
    if one.get("tcp_syscalls_per_message") is not None:
        notes[3] = (f"Your reliable TCP stream still cost its receiver {one['tcp_syscalls_per_message']:.1f} "
                    f"syscalls per message.")
    if four.get("writes"):
        notes[4] = (f"In {ONE_SIDED} the target made {four.get('rdma_target_syscalls', 0)} syscalls for "
                    f"{four['writes']} "
                    f"one-sided writes: no socket API can offer that.")
    return notes


def _ratio(a, b):
    return a[-1] / b[-1] if a and b and b[-1] else None


def _size(n):
    if n is None:
        return "?"
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _fmt(x):
    if x is None:
        return "&mdash;"
    return f"{x:.3g}" if isinstance(x, float) else html.escape(str(x))


def chart(kept, kind=None):
    """Two panels, one idea each: what the receiver did per message (TCP against an RDMA target), and the ring's
    busbw per size over both transports."""
    import matplotlib.pyplot as plt
    one, four, five = kept.get("socket-path", {}), kept.get("one-sided", {}), kept.get("allreduce", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1, 1.4]})
    labels = ["syscalls", "context switches"]
    tcp = [one.get("tcp_syscalls_per_message"), one.get("tcp_switches_per_message")]
    writes = four.get("writes")
    rdma = [_per(four.get("rdma_target_syscalls"), writes), _per(four.get("rdma_target_switches"), writes)]
    xs = range(len(labels))
    left.bar([x - 0.2 for x in xs], [v or 0 for v in tcp], 0.4, label=f"TCP receiver (lesson {SOCKETS})", color="#cf222e")
    left.bar([x + 0.2 for x in xs], [v or 0 for v in rdma], 0.4, label=f"RDMA WRITE target (lesson {ONE_SIDED})",
             color="#1a7f37")
    top = max([v for v in tcp + rdma if v] + [1])
    for x, t, r in zip(xs, tcp, rdma):
        for dx, v in ((-0.2, t), (0.2, r)):
            left.annotate("not run" if v is None else f"{v:.2g}", (x + dx, v or 0), ha="center", va="bottom", fontsize=10)
    left.set_ylim(0, top * 1.5)
    left.set_xticks(list(xs), labels, fontsize=10)
    left.set_ylabel("per message delivered", fontsize=10)
    left.set_title("What the receiving process did", fontsize=11)
    left.legend(fontsize=9, loc="upper right")
    if five.get("sizes"):
        right.plot(five["sizes"], five["busbw_rdma"], "o-", color="#1a7f37", label="ring over RDMA (yours)")
        right.plot(five["sizes"], five["busbw_tcp"], "o-", color="#cf222e", label="ring over TCP (yours)")
        right.plot(five["sizes"], [busbw(s, t, five["ranks"]) for s, t in zip(five["sizes"], five["mpi_s"])],
                   "s--", color="grey", label="MPICH, shared memory (one host)")
        right.set_xscale("log", base=2)
        right.set_xlabel("AllReduce size [bytes]", fontsize=10)
        right.legend(fontsize=9, loc="upper left")
    else:
        right.text(0.5, 0.5, f"run lesson {ALLREDUCE}'s measurements", ha="center", transform=right.transAxes)
    right.set_ylabel("busbw [GB/s]", fontsize=10)
    right.set_title(f"Ring AllReduce, {five.get('ranks', '?')} ranks" + (": a disturbed run, no conclusion"
                                                                         if five.get("disturbed") else ""), fontsize=11)
    fig.suptitle(f"Your measurements, on {DEVICE_LABEL.get(kind, 'this machine')}", fontsize=11)
    fig.tight_layout()
    return fig


# What the answer does not settle: systems that keep one part of RDMA's recipe and drop another.
CHALLENGES = [
    ("devmem TCP (Linux)", "payloads go from the NIC straight into device (GPU) memory while headers take the "
     "kernel's TCP path (Documentation/networking/devmem.rst): zero copy of the data without kernel bypass. "
     "If it matches RDMA on AllReduce, the property that mattered was never touching the payload, not skipping "
     "the kernel for the headers."),
    ("GPUDirect-TCPX (Google)", "the same idea in production: NIC-to-GPU placement with zero copies, receive "
     "path driven by a host daemon (github.com/google/tcpgpudmarxd). It keeps sockets and a CPU in control."),
    ("SRD (AWS EFA)", "reliable but out-of-order delivery over many paths (efadv_create_qp_ex(3)): it drops "
     "RC's in-order guarantee, which AllReduce never needed, and keeps one-sided placement."),
]


DEVICE_LABEL = {"soft": "soft0: emulated NIC, shared memory", "rxe": "Soft-RoCE (rxe)", "hardware": "a hardware NIC"}


class ClosingView:
    """The answer with the learner's numbers: shows as HTML (table, chart, verdict) or as text."""

    def __init__(self, kept, answers, kind):
        self.kept, self.answers, self.kind = kept, answers, kind
        self.rows, self.missing, self.verdict = rows(kept), missing(kept), verdict(kept, answers)

    def lines(self):
        out = [f"Which property of RDMA matters most for AllReduce? {CHOICES[ANSWER]}."]
        for lesson, name in self.missing:
            out.append(f"Lesson {number(lesson)} has not recorded its figures yet: run {name} to fill its rows.")
        out += [f"{what}: TCP {_text(t)}, RDMA {_text(r)} [{where}]" for what, t, r, where in self.rows]
        chosen = self.answers.get("welcome")
        if chosen is None or not 0 <= chosen < len(CHOICES):
            out.append(f"You have not answered lesson {WELCOME}'s question (its first cell saves your choice).")
        else:
            right = chosen == ANSWER
            out.append(f"In lesson {WELCOME} you chose: {CHOICES[chosen]} ({'right' if right else 'not the answer'}).")
        out += [f"{'*' if ok else '-'} {choice}: {text}" for choice, ok, text, _ in self.verdict]
        out += [("> " if k == self.kind else "  ") + WHO_COPIES[k] for k in WHO_COPIES]
        out += ["Challenge the answer:"] + [f"  {name}: {text}" for name, text in CHALLENGES]
        return out

    def __str__(self):
        return "\n".join(self.lines())

    __repr__ = __str__

    def _repr_html_(self):
        esc = html.escape
        parts = [f"<h4>{esc(CHOICES[ANSWER][0].upper() + CHOICES[ANSWER][1:])}</h4>"]
        for lesson, name in self.missing:
            parts.append(f"<p style='color:#9a6700'>Lesson {number(lesson)} has not recorded its figures yet: run "
                         f"<i>{esc(name)}</i> to fill its rows.</p>")
        body = "".join(f"<tr><td style='text-align:left'>{esc(what)}</td><td>{_fmt(t)}</td><td>{_fmt(r)}</td>"
                       f"<td>{esc(where)}</td></tr>" for what, t, r, where in self.rows)
        parts.append("<table><tr><th style='text-align:left'>your measurement</th><th>through TCP</th>"
                     f"<th>by RDMA</th><th>lesson</th></tr>{body}</table>")
        from rdmalab.lessons.plots import png_base64
        parts.append(f"<img src='data:image/png;base64,{png_base64(chart(self.kept, self.kind))}' style='max-width:100%'/>")
        chosen = self.answers.get("welcome")
        if chosen is None or not 0 <= chosen < len(CHOICES):
            parts.append(f"<p>You have not answered lesson {WELCOME}'s question (its first cell saves your "
                         "choice).</p>")
        else:
            parts.append(f"<p>In lesson {WELCOME} you chose <b>{esc(CHOICES[chosen])}</b>: "
                         f"{'right.' if chosen == ANSWER else 'not the answer. Here is why, with your numbers.'}</p>")
        items = "".join(f"<li style='{'font-weight:bold' if mine else ''}'>{'&#10004;' if ok else '&#10008;'} "
                        f"<i>{esc(choice)}</i>{' (your choice)' if mine else ''}: {esc(text)}</li>"
                        for choice, ok, text, mine in self.verdict)
        parts.append(f"<ul>{items}</ul>")
        who = "".join(f"<li>{'<b>these numbers</b>: ' if k == self.kind else ''}{esc(WHO_COPIES[k])}</li>"
                      for k in WHO_COPIES)
        parts.append(f"<p><b>Who copied the bytes of an RDMA WRITE?</b></p><ul>{who}</ul>")
        challenge = "".join(f"<li><b>{esc(name)}</b>: {esc(text)}</li>" for name, text in CHALLENGES)
        parts.append("<p><b>Challenge the answer.</b> Each of these keeps part of RDMA's recipe and drops another: "
                     f"what would its numbers say about which property it really is?</p><ul>{challenge}</ul>")
        return "".join(parts)


def _text(x):
    return "-" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))


def closing_view(device=None, kept=None, answers=None):
    """The closing view: `kept` defaults to everything recorded, `answers` to the saved quiz answers,
    `device` (e.g. ring.data["device"]) says which device's story to mark."""
    kept = evidence.recall() if kept is None else kept
    answers = load_answers() if answers is None else answers
    return ClosingView(kept, answers, kind_of(device, kept.get("allreduce", {}).get("provider")))
