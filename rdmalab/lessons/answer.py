"""The series' answer, from the learner's own numbers: the last lesson's (the-answer) closing view.

    from rdmalab.lessons import answer
    answer.record_one_sided(spent, writes, frozen)   # lesson 05 keeps its figures (evidence "one-sided")
    answer.record_target_cpu(results, one_cpu)    # lesson 06: the one-CPU READ, the dashboard's rows ("target-cpu")
    answer.record_allreduce(ring, tcp, mpi)       # the AllReduce lesson keeps its figures (evidence "allreduce")
    figures = answer.gather()                     # the-answer: every figure the lessons kept, named, by lesson
    answer.closing_view(committed=my_answer)      # a table, a chart, the lesson-00 choice and today's, judged

The view reads what the lessons in RECORDING recorded (rdmalab.lessons.evidence, keyed by slug; the text names
them by today's numbers, rdmalab.lessons.series). Figures saved before the one-sided lesson was split in two
(all under "one-sided") are read as the lessons that measure them today (evidence.migrated): the one-CPU READ and
the dashboard's rows as target-cpu's. Its verdict rests on what holds on every device: lesson 05's stopped target,
lesson 06's READ on one CPU, the receiver's syscalls, the copies per byte that something counted, the address and key in a WRITE's first
packet, the target's NIC refusing an access. What depends on this machine (a ping-pong between two
processes, which measures the scheduler's hand-offs too; two rings on one host, on soft0 its shared memory
against TCP loopback) is shown, labelled so, and kept out of the verdict. Copies per byte that nothing
counted (rxe's, a NIC's; soft0 counts its own) are given by design (bench.BY_DESIGN), under the table of
measurements, never in it. Devices are
named as the run recorded them. A lesson not run yet leaves its figures out and says which lesson gives
them; nothing fails.
"""
import html
from dataclasses import dataclass

from rdmalab.bench.results import BY_DESIGN, device_kind
from rdmalab.lessons import evidence
from rdmalab.lessons.quiz import ANSWER, CHOICES, WHY, load_answers
from rdmalab.lessons.series import LESSONS as LESSON_ORDER, number, title
from rdmalab import verbs

RECORDING = ("socket-path", "one-sided", "target-cpu", "allreduce", "training-step", "in-pytorch", "on-the-wire",
             "when-it-breaks")   # they record
LESSONS = {slug: title(slug) for slug in RECORDING}
SOCKETS, ONE_SIDED, TARGET_CPU, ALLREDUCE, TRAINING, PYTORCH, SCALING, WIRE, BREAKS, WELCOME = (number(s) for s in (
    "socket-path", "one-sided", "target-cpu", "allreduce", "training-step", "in-pytorch", "scaling-out", "on-the-wire",
    "when-it-breaks", "welcome"))
DEVICE_LABEL = {"soft": "the emulated NIC, through shared memory", "rxe": "Linux's Soft-RoCE (rdma_rxe)",
                "hardware": "a hardware NIC"}
# Two rings on this machine: what their busbw ratio compares, by device
ONE_HOST = {"soft": "both on one host: soft0's shared memory against TCP loopback",
            "rxe": "both on one host: rxe's loopback against TCP's",
            "hardware": "over the NIC against TCP, where the ranks ran",
            None: "both on this machine"}
# How each device's design moves a WRITE's payload (the marked line names the device the numbers came from)
DESIGN = {"soft": "soft0, the emulated NIC (its shared-memory link)", "rxe": "Soft-RoCE (rdma_rxe)",
          "hardware": "a hardware NIC (mlx5, ...)"}


def kind_of(device=None, provider=None):
    """'soft', 'rxe' or 'hardware', from the device (bench.device_kind); None if there is none."""
    return device_kind(provider, device)


def allreduce_figures(ring, tcp, mpi, provider):
    """Evidence "allreduce" from allreduce.measure's reports (ring over RDMA, ring over TCP) and mpi_allreduce's
    rows: in-place times in seconds (the slowest rank's, as measure reports them) and busbw in GB/s; the device,
    as the run named it; and what disturbed the rings' runs at the largest size, in words ('' if nothing did:
    Report.disturbed)."""
    rows, trows = ring.data["rows"], tcp.data["rows"]
    if [r["size"] for r in rows] != [r["size"] for r in trows] or len(mpi["rows"]) != len(rows):
        raise ValueError("the RDMA, TCP and MPI runs must cover the same sizes")
    disturbed = "; ".join(f"over {name}, {r.disturbed()}" for name, r in (("RDMA", ring), ("TCP", tcp)) if r.disturbed())
    return {"ranks": ring.data["ranks"], "sizes": [r["size"] for r in rows],
            "ring_rdma_s": [r["in"]["time_us"] / 1e6 for r in rows],
            "ring_tcp_s": [r["in"]["time_us"] / 1e6 for r in trows],
            "mpi_s": [m["time_us"] / 1e6 for m in mpi["rows"]],
            "busbw_rdma": [r["in"]["busbw"] for r in rows], "busbw_tcp": [r["in"]["busbw"] for r in trows],
            "provider": provider, "device": ring.data.get("device"), "disturbed": disturbed}


def record_allreduce(ring, tcp, mpi):
    """Keep the AllReduce lesson's figures (evidence "allreduce"), for the closing view (lesson 15)."""
    return evidence.record("allreduce", **allreduce_figures(ring, tcp, mpi, verbs.PROVIDER))


def record_one_sided(spent, writes, frozen=None):
    """Keep the one-sided lesson's figures (evidence "one-sided"): what the target spent while `writes` WRITEs
    landed (`spent`, procstat.since) and the freeze-the-target experiment (`frozen`, a freeze.FreezeResult).
    Context switches are counted as the socket path counts them: voluntary and involuntary."""
    figures = dict(writes=writes, rdma_target_syscalls=spent["read_syscalls"] + spent["write_syscalls"],
                   rdma_target_switches=spent["voluntary_switches"] + spent["involuntary_switches"],
                   rdma_target_cpu_ms=spent["cpu_s"] * 1e3,
                   device_kind=kind_of(frozen.data.get("device") if frozen else None, verbs.PROVIDER))
    if frozen is not None:
        d = frozen.data
        figures.update(frozen_rdma_completed=d["rdma_completed"], frozen_rdma_posted=d["rdma_posted"],
                       frozen_target_found=d["target_found_pattern"], frozen_tcp_stalled=d["tcp_stalled"],
                       frozen_tcp_bytes=d["tcp_bytes_before_stall"])
    return evidence.record("one-sided", **figures)


def target_cpu_figures(results, one_cpu=None):
    """Evidence "target-cpu" from the dashboard's results ({test: bench.Results}: write_lat, tcp_lat, write_bw,
    tcp_bw): its smallest latency row (the figure that stands for a message's fixed cost) and its largest
    streaming row, and from the one-CPU comparison (`one_cpu`, a one_cpu.OneCpu): the READ and the TCP request."""
    lat, tcp = (min(results[t].rows, key=lambda row: row["size"]) for t in ("write_lat", "tcp_lat"))
    bw, tbw = (results[t].rows[-1] for t in ("write_bw", "tcp_bw"))
    share = lambda row: float(row["target"]["cpu_s"] / max(row["initiator"]["cpu_s"], 1e-9))   # noqa: E731
    copied = bw["bytes_copied_by_cpu"]   # counted (soft0's shared-memory link), else None: by_design says it
    figures = dict(write_lat_us=float(lat["t_typical"]), tcp_lat_us=float(tcp["t_typical"]), lat_size=int(lat["size"]),
                   bw_size=int(bw["size"]), rdma_target_cpu_share=share(bw), tcp_receiver_cpu_share=share(tbw),
                   rdma_copies_per_byte=None if copied is None else copied / (bw["size"] * bw["iterations"]),
                   device_kind=kind_of(results["write_bw"].device, results["write_bw"].provider))
    if one_cpu is not None:
        tests = one_cpu.data["tests"]
        figures.update(one_cpu_read_us=tests["read_lat"]["t_typical"], one_cpu_request_us=tests["tcp_rr"]["t_typical"])
    return figures


def record_target_cpu(results, one_cpu=None):
    """Keep the target's CPU lesson's figures (evidence "target-cpu": target_cpu_figures), for the closing view."""
    return evidence.record("target-cpu", **target_cpu_figures(results, one_cpu))


def busbw(size, seconds, ranks):
    """nccl-tests' AllReduce bus bandwidth, GB/s: algbw = size / time, times 2(n-1)/n."""
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks


def _per(total, count):
    return None if total is None or not count else total / count


# ---- the figures, named: what the-answer's exercise cites and the verdict rests on ----

@dataclass
class Figure:
    """One figure the learner measured: its name, the lesson (slug) that measured it, what it says, whether it
    would come out the same on any device (and if not, why not), and which choice of the question it bears on
    (an index into CHOICES)."""
    name: str
    lesson: str
    text: str
    holds: bool
    bears_on: int
    why_not: str = ""


NAMES = ("stopped-target", "one-cpu-read", "tcp-receiver", "write-target", "tcp-copies", "receiver-cpu", "landing",
         "first-packet", "access-refused", "ping-pong", "ring-busbw", "step-wait", "ddp-step", "headers", "go-back-n", "retries")
PING_PONG = ("a ping-pong's two programs hand each message back and forth: each waits for the other to be "
             "scheduled, so on this machine it measures the scheduler's wake-ups as much as the transport")


# Whether a rank computing while gradients land in its memory by RDMA WRITE measures what a hardware NIC does
LANDING_WHY_NOT = {"rxe": "on Soft-RoCE the kernels copy every packet (across two hosts the target's kernel, in "
                          "softirq or a kworker, on the target's CPUs): a hardware NIC's DMA engine uses no CPU"}
STEP_WHY_NOT = ("a step's times are this machine's: its CPUs are the accelerators and, on soft0, the NIC too; "
                "what a GPU waits for depends on its own speed against its links'")


def _landing_why_not(eight, kind):
    """Why the PyTorch lesson's landing figure does not hold on every device ('' where it does), by the device
    its RDMA stream ran on."""
    return LANDING_WHY_NOT.get(device_kind(None, eight.get("landing_device")) or kind, "")


def _ring_busbw_why_not(kind):
    return (f"your two rings ran {ONE_HOST.get(kind, ONE_HOST[None])}: their ratio says how this machine's two "
            f"paths copy, not what holds on an RDMA device (on another device it comes out otherwise)")


class Figures(dict):
    """{name: Figure} in the order of NAMES, for the figures the lessons recorded; `missing`: the lessons (slug,
    title) that recorded nothing yet. Shows as a table: name, lesson, what you measured."""

    def __init__(self, figures, missing):
        super().__init__((f.name, f) for f in figures)
        self.missing = missing

    def lines(self):
        out = [f"{f.name:<15} {number(f.lesson)}  {f.text}" for f in self.values()]
        out += [f"(lesson {number(slug)} has recorded nothing yet: run {name} for its figures)"
                for slug, name in self.missing]
        return out

    def __str__(self):
        return "\n".join(self.lines())

    __repr__ = __str__

    def _repr_html_(self):
        esc = html.escape
        body = "".join(f"<tr><td style='text-align:left'><code>{esc(f.name)}</code></td><td>{number(f.lesson)}</td>"
                       f"<td style='text-align:left'>{esc(f.text)}</td></tr>" for f in self.values())
        absent = "".join(f"<p style='color:#9a6700'>Lesson {number(slug)} has recorded nothing yet: run "
                         f"<i>{esc(name)}</i> for its figures.</p>" for slug, name in self.missing)
        return ("<table><tr><th style='text-align:left'>name</th><th>lesson</th><th style='text-align:left'>what you "
                f"measured</th></tr>{body}</table>{absent}")


def gather(kept=None, kind=None):
    """Every figure the lessons recorded (evidence.recall() by default), named (NAMES), as Figures."""
    kept = evidence.recall() if kept is None else kept
    one, four, five = kept.get("socket-path", {}), kept.get("one-sided", {}), kept.get("allreduce", {})
    six = kept.get("target-cpu", {})
    wire, broke = kept.get("on-the-wire", {}), kept.get("when-it-breaks", {}).get("failures", {})
    seven, eight = kept.get("training-step", {}), kept.get("in-pytorch", {})
    kind = kind or _kind(kept)
    out = []
    if "frozen_rdma_posted" in four:
        text = (f"with the target process stopped (SIGSTOP), {four['frozen_rdma_completed']} of "
                f"{four['frozen_rdma_posted']} RDMA operations on its memory completed")
        if four.get("frozen_tcp_stalled"):
            text += f"; a TCP sender to it stalled after {four['frozen_tcp_bytes'] / (1 << 20):.1f} MiB"
        out.append(Figure("stopped-target", "one-sided", text, True, ANSWER))
    if six.get("one_cpu_read_us") and six.get("one_cpu_request_us"):
        out.append(Figure("one-cpu-read", "target-cpu", f"on one CPU, reading 8 B of remote memory took "
                          f"{six['one_cpu_read_us']:.1f} us by RDMA READ, {six['one_cpu_request_us']:.1f} us by a "
                          "TCP request its server answers (full round trips)", True, ANSWER))
    if one.get("tcp_reads_per_message") is not None:
        out.append(Figure("tcp-receiver", "socket-path", f"a TCP receiver that only received made "
                          f"{one['tcp_reads_per_message']:.1f} read() calls and "
                          f"{one.get('tcp_switches_per_message', 0):.1f} context switches a message",
                          True, ANSWER))
    if four.get("writes"):
        out.append(Figure("write-target", "one-sided", f"the target of {four['writes']} RDMA WRITEs made "
                          f"{four.get('rdma_target_syscalls', 0)} syscalls and used "
                          f"{four.get('rdma_target_cpu_ms', 0):.2f} ms of CPU", True, ANSWER))
    if one.get("tcp_copies_per_byte") is not None:
        out.append(Figure("tcp-copies", "socket-path", f"TCP copied every byte {one['tcp_copies_per_byte']:.1f} "
                          "times (counted from its read and write byte counts)", True, ANSWER))
    tshare = six.get("tcp_receiver_cpu_share", one.get("tcp_receiver_cpu_share"))
    if six.get("rdma_target_cpu_share") is not None and tshare is not None:
        out.append(Figure("receiver-cpu", "target-cpu", f"streaming {_size(six.get('bw_size'))}, the receiving "
                          f"process used {tshare:.0%} of the sender's CPU time over TCP, {six['rdma_target_cpu_share']:.0%} "
                          "as the target of RDMA WRITEs", True, ANSWER))
    if eight.get("landing"):
        why_not = _landing_why_not(eight, kind)
        out.append(Figure("landing", "in-pytorch", f"a rank training while a neighbour streamed gradients into its "
                          f"memory kept {eight['landing']['rdma']:.0%} of its speed by RDMA WRITE, "
                          f"{eight['landing']['tcp']:.0%} by TCP", not why_not, ANSWER, why_not))
    if wire.get("reth_rkey") is not None:
        out.append(Figure("first-packet", "on-the-wire", f"a WRITE of {wire['write_length']} B went as "
                          f"{wire['write_packets']} packets; only the first carried a RETH: the target's address "
                          f"0x{wire['reth_va']:x}, its rkey 0x{wire['reth_rkey']:x} and the length, all its NIC "
                          "needs to place the bytes", True, ANSWER))
    refused = broke.get("no REMOTE_WRITE", {})
    if refused.get("status") is not None:
        out.append(Figure("access-refused", "when-it-breaks", f"a WRITE into memory registered without "
                          f"REMOTE_WRITE: the target's NIC refused it ({refused['status']} {_status(refused['status'])})",
                          True, ANSWER))
    if six.get("write_lat_us") and six.get("tcp_lat_us"):
        out.append(Figure("ping-pong", "target-cpu", f"a ping-pong of {_size(six.get('lat_size'))}: "
                          f"{six['write_lat_us']:.1f} us by RDMA WRITE, {six['tcp_lat_us']:.1f} us by TCP (half "
                          "round trips between two processes)", False, 0, PING_PONG))
    if five.get("busbw_rdma") and five.get("busbw_tcp"):
        r, t = five["busbw_rdma"][-1], five["busbw_tcp"][-1]
        text = (f"the ring's busbw at {_size(five['sizes'][-1])}, {five['ranks']} ranks: {r:.2f} GB/s over RDMA, "
                f"{t:.2f} over TCP, {ONE_HOST.get(kind, ONE_HOST[None])}")
        if five.get("disturbed"):
            text += f" (a disturbed run: {five['disturbed']})"
        holds = kind == "hardware" and not five.get("disturbed")
        out.append(Figure("ring-busbw", "allreduce", text, holds, ANSWER if holds else 1,
                          "" if holds else _ring_busbw_why_not(kind)))
    step = seven.get("step_ms", {})
    if step.get("rdma") and step.get("tcp"):
        share = (seven.get("waiting_share") or {}).get("measured")
        out.append(Figure("step-wait", "training-step", f"a data-parallel training step took {step['rdma']:.2f} ms "
                          f"with the ring over RDMA, {step['tcp']:.2f} over TCP"
                          + (f"; the AllReduce was {share:.0%} of the RDMA step" if share is not None else ""),
                          False, 1, STEP_WHY_NOT))
    ddp = (eight.get("ddp_ratio") or {}).get("measured")
    if ddp is not None:
        out.append(Figure("ddp-step", "in-pytorch", f"in PyTorch's DDP, a step with your ring as its hook took {ddp:.2f} "
                          "x the same step on Gloo (TCP)", False, 1, STEP_WHY_NOT))
    if wire.get("headers_share") is not None:
        out.append(Figure("headers", "on-the-wire", f"a ring AllReduce puts 2(n-1)/n of the gradient on every "
                          f"rank's link, plus {wire['headers_share']:.1%} of headers at MTU 4096, whatever the "
                          "transport", True, 1))
    if wire.get("resent") is not None:
        out.append(Figure("go-back-n", "on-the-wire", f"with {wire.get('loss', 0.02):.0%} of packets lost, the NICs "
                          f"resent {wire['resent']} of a {_size(wire.get('lossy_size'))} WRITE's packets (go-back-N); "
                          f"it took {wire['lossy_ms']:.1f} ms instead of {wire['clean_ms']:.1f}", True, 3))
    psn = broke.get("wrong PSN", {})
    if psn.get("status") is not None:
        out.append(Figure("retries", "when-it-breaks", f"with a wrong PSN the sender's NIC resent until its "
                          f"retry count ran out: {psn['status']} {_status(psn['status'])} after {psn['ms']:.0f} ms",
                          True, 3))
    order = {name: i for i, name in enumerate(NAMES)}
    return Figures(sorted(out, key=lambda f: order[f.name]), missing(kept))


def _status(status):
    from rdmalab.errors import status_name
    return status_name(status)


# ---- the table of measurements ----

def rows(kept, kind=None):
    """The table: (what, through TCP, by RDMA, lesson that measured it, holds on every device); None where not
    measured. What holds on every device comes first, led by the stopped target; what depends on this machine
    (a ping-pong, rings on one host) after, labelled so."""
    one, four, five = kept.get("socket-path", {}), kept.get("one-sided", {}), kept.get("allreduce", {})
    six = kept.get("target-cpu", {})
    kind = kind or _kind(kept)
    writes = four.get("writes")
    frozen = "frozen_rdma_posted" in four
    copies = six.get("rdma_copies_per_byte")
    out = [
        ("operations that completed against a stopped (SIGSTOP) target",
         f"stalled after {four['frozen_tcp_bytes'] / (1 << 20):.1f} MiB" if frozen and four.get("frozen_tcp_stalled")
         else None, f"{four['frozen_rdma_completed']} of {four['frozen_rdma_posted']}" if frozen else None, ONE_SIDED,
         True),
        ("one CPU: read 8 B of remote memory, us (full round trip)", six.get("one_cpu_request_us"),
         six.get("one_cpu_read_us"), TARGET_CPU, True),
        ("receiver's syscalls per message (TCP: its read() calls)", one.get("tcp_reads_per_message"),
         _per(four.get("rdma_target_syscalls"), writes), f"{SOCKETS} / {ONE_SIDED}", True),
        ("receiver's context switches per message", one.get("tcp_switches_per_message"),
         _per(four.get("rdma_target_switches"), writes), f"{SOCKETS} / {ONE_SIDED}", True),
        ("CPU copies per byte delivered (counted)", one.get("tcp_copies_per_byte"),
         copies if copies is not None else ("not counted: see by design, below" if six else None),
         f"{SOCKETS} / {TARGET_CPU}", copies is None),   # (a WRITE's count is its device's: soft0's CPU copies once)
        (f"receiver CPU / sender CPU, streaming {_size(six.get('bw_size'))}",
         six.get("tcp_receiver_cpu_share", one.get("tcp_receiver_cpu_share")),
         six.get("rdma_target_cpu_share"), f"{TARGET_CPU} (TCP: {SOCKETS} if {TARGET_CPU} is missing)", True),
        (f"ping-pong at {_size(six.get('lat_size'))}, us (half round trip between two processes: the scheduler's "
         "hand-offs too)", six.get("tcp_lat_us"), six.get("write_lat_us"), TARGET_CPU, False),
    ]
    for size, t, r in zip(five.get("sizes", []), five.get("busbw_tcp", []), five.get("busbw_rdma", [])):
        out.append((f"ring AllReduce busbw at {_size(size)}, GB/s ({five['ranks']} ranks; "
                    f"{ONE_HOST.get(kind, ONE_HOST[None])})", t, r, ALLREDUCE, kind == "hardware"))
    seven, eight = kept.get("training-step", {}), kept.get("in-pytorch", {})
    if eight.get("landing"):
        first_local = next((i for i, row in enumerate(out) if not row[-1]), len(out))   # (after what holds)
        out.insert(first_local, ("a rank's training speed while gradients land in its memory, share of its speed "
                                 "alone", eight["landing"].get("tcp"), eight["landing"].get("rdma"), PYTORCH,
                                 not _landing_why_not(eight, kind)))
    if seven.get("step_ms", {}).get("rdma"):
        out.append(("a data-parallel training step, ms (this machine's CPUs as accelerators)",
                    seven["step_ms"].get("tcp"), seven["step_ms"]["rdma"], TRAINING, False))
    return out


def missing(kept):
    """Lessons whose figures the view lacks, as (slug, number and title)."""
    return [(k, name) for k, name in LESSONS.items() if not kept.get(k)]


def by_design(kind=None, device=None, counted=None):
    """What each kind of device's design copies per byte of a WRITE: [(label, copies per byte, who copies,
    is this device)]; this device's line names it as the run did, and says so where its copies were also
    counted (`counted`: soft0's, per byte; the table holds that measurement)."""
    out = []
    for (k, link), (copies, who) in BY_DESIGN.items():
        if k == "soft" and link != "shm":   # the lessons run soft0's shared-memory link
            continue
        name = str(device).split(" (")[0] if device else None   # ("soft0 (soft)", as a report names it)
        label = DESIGN[k] + (f": these numbers, from {name}" if k == kind and name else
                             ": these numbers" if k == kind else "")
        if k == kind and counted is not None:
            label += f" (counted too: {counted:.2f}, in the table)"
        out.append((label, copies, who, k == kind))
    return out


# ---- the verdict ----

def verdict(kept, answers, kind=None):
    """What each choice is, judged against the evidence: a list of (choice, is_answer, text, is the lesson-00
    choice)."""
    chosen = answers.get("welcome")
    notes = _numbers(kept, kind or _kind(kept))
    return [(choice, i == ANSWER, WHY[i] + (" " + notes[i] if notes.get(i) else ""), i == chosen)
            for i, choice in enumerate(CHOICES)]


def _numbers(kept, kind):
    """The learner's numbers that bear on each choice (indexes as quiz.CHOICES): only figures that hold on every
    device argue; the others are said to be what they are."""
    four, five, six = kept.get("one-sided", {}), kept.get("allreduce", {}), kept.get("target-cpu", {})
    figures = gather(kept, kind)
    notes = {}
    lat, tlat = six.get("write_lat_us"), six.get("tcp_lat_us")
    if lat and tlat:
        notes[0] = (f"Your ping-pongs in {TARGET_CPU} took {lat:.1f} us by RDMA WRITE and {tlat:.1f} us by TCP at "
                    f"{_size(six.get('lat_size'))}: half round trips between two processes, each message waiting "
                    f"for the other program to run, so they measure this machine's scheduler as much as either "
                    f"transport, and this verdict does not rest on them.")
    ratio = _ratio(five.get("busbw_rdma"), five.get("busbw_tcp"))
    if five.get("disturbed"):   # a disturbed run ranks nothing: say so rather than conclude
        notes[1] = (f"Your rings' run in {ALLREDUCE} was disturbed at {_size(five['sizes'][-1])} ({five['disturbed']}): "
                    f"it cannot say how RDMA and TCP compare. Run {ALLREDUCE}'s measurements again on a quiet machine.")
    elif ratio and ratio < 1:   # the run says otherwise this time: say so, and why it can on this machine
        notes[1] = (f"In your run of {ALLREDUCE} the ring over RDMA moved only {ratio:.1f}x TCP's busbw at "
                    f"{_size(five['sizes'][-1])}, {ONE_HOST.get(kind, ONE_HOST[None])}; a rank that waits while "
                    f"another process holds its CPU loses milliseconds (lesson {SCALING} shows the spread). Run "
                    f"{ALLREDUCE}'s ring cells again on a quiet machine, or `rdmalab allreduce --ranks 2 --size 1M` "
                    f"for each transport.")
    elif ratio:
        notes[1] = (f"Your two rings ran {ONE_HOST.get(kind, ONE_HOST[None])}, where no network link limits "
                    f"either: RDMA's busbw was {ratio:.1f}x TCP's at {_size(five['sizes'][-1])}, which says what a "
                    f"byte costs the CPUs on this machine" + (", not on a device: it is kept out of this verdict."
                                                              if kind != "hardware" else "."))
    if "headers" in figures:
        notes[1] = (notes.get(1, "") + f" On a wire the bytes are the same for both: {figures['headers'].text} "
                    f"({WIRE}).").strip()
    holding = [f for f in figures.values() if f.holds and f.bears_on == ANSWER]
    if holding:   # (lead, in full, with what needs no device to believe; name the rest: gather() shows them)
        lead = [f for f in holding if f.name in ("stopped-target", "tcp-receiver", "write-target")]
        said = "; ".join(f"{f.text} ({number(f.lesson)})" for f in lead)
        named = ", ".join(f"{f.name} ({number(f.lesson)})" for f in holding if f not in lead)
        notes[2] = ("Your evidence, all of which would come out the same on any device: "
                    + "; and ".join(part for part in (said, named) if part) + ".")
    reliable = [f for f in figures.values() if f.bears_on == 3]
    if "tcp-receiver" in figures or reliable:
        bits = [f"{f.text} ({number(f.lesson)})" for f in reliable]
        if "tcp-receiver" in figures:
            bits.insert(0, f"your reliable TCP stream still cost its receiver "
                           f"{kept['socket-path']['tcp_reads_per_message']:.1f} read() calls a message ({SOCKETS})")
        text = "; ".join(bits) + "."
        notes[3] = text[0].upper() + text[1:]
    if four.get("writes"):
        notes[4] = (f"In {ONE_SIDED} the target made {four.get('rdma_target_syscalls', 0)} syscalls for "
                    f"{four['writes']} one-sided writes: no socket API can offer that.")
    return notes


def _ratio(a, b):
    return a[-1] / b[-1] if a and b and b[-1] else None


def _kind(kept):
    five, four, six = kept.get("allreduce", {}), kept.get("one-sided", {}), kept.get("target-cpu", {})
    return kind_of(five.get("device"), five.get("provider")) if five else four.get("device_kind") or six.get("device_kind")


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


def chart(kept, kind=None, device=None):
    """Two panels, one idea each: what the receiver did per message (TCP against an RDMA target), and the ring's
    busbw per size over both transports (labelled with what it compares on this machine)."""
    import matplotlib.pyplot as plt
    one, four, five = kept.get("socket-path", {}), kept.get("one-sided", {}), kept.get("allreduce", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1, 1.4]})
    labels = ["syscalls", "context switches"]
    tcp = [one.get("tcp_reads_per_message"), one.get("tcp_switches_per_message")]
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
    left.set_title("What the receiving process did (any device)", fontsize=11)
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
    where = "a disturbed run, no conclusion" if five.get("disturbed") else "this machine only" if kind != "hardware" \
        else "over the NIC"
    right.set_title(f"Ring AllReduce, {five.get('ranks', '?')} ranks: {where}", fontsize=11)
    on = f"{device} ({DEVICE_LABEL[kind]})" if device and kind in DEVICE_LABEL else DEVICE_LABEL.get(kind, "this machine")
    fig.suptitle(f"Your measurements, on {on}", fontsize=11)
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


def committed_answer(fn, figures):
    """What the learner committed to before the view: `fn(figures)` (their exercise's function) if it returns
    {"choice": int, "because": [names]}, else None. Never raises: the exercise has said what was wrong."""
    try:
        said = fn(figures) if callable(fn) else fn
    except Exception:   # (shown by the exercise's feedback already)
        return None
    if not isinstance(said, dict) or not isinstance(said.get("choice"), int) or not 0 <= said["choice"] < len(CHOICES):
        return None
    because = said.get("because")
    return {"choice": said["choice"], "because": [b for b in because if isinstance(b, str)]
            if isinstance(because, (list, tuple)) else []}


class ClosingView:
    """The answer with the learner's numbers: shows as HTML (tables, chart, verdict) or as text."""

    def __init__(self, kept, answers, kind, device=None, committed=None, predicted=None):
        self.kept, self.answers, self.kind, self.device = kept, answers, kind, device
        self.predicted = _predictions(evidence.predictions() if predicted is None else predicted)
        self.figures = gather(kept, kind)
        self.asked = committed is not None   # (the last lesson asks for an answer before the view)
        self.committed = committed_answer(committed, self.figures) if self.asked else None
        self.rows, self.missing = rows(kept, kind), missing(kept)
        counted = kept.get("target-cpu", {}).get("rdma_copies_per_byte")
        self.verdict, self.design = verdict(kept, answers, kind), by_design(kind, device, counted)

    def _choices(self):
        """(what the learner chose in lesson 00, and before this view), as sentences."""
        chosen, out = self.answers.get("welcome"), []
        if chosen is None or not 0 <= chosen < len(CHOICES):
            out.append(f"You have not answered lesson {WELCOME}'s question (its first cell saves your choice).")
        else:
            out.append(f"In lesson {WELCOME} you chose: {CHOICES[chosen]} "
                       f"({'right' if chosen == ANSWER else 'not the answer'}).")
        if self.asked and not self.committed:
            out.append("You committed to no answer before this view: the exercise above asks for one, and the "
                       "verdict below is easier to weigh against an answer of your own.")
        if self.committed:
            now = self.committed["choice"]
            out.append(f"Before this view you answered: {CHOICES[now]} ({'right' if now == ANSWER else 'not the answer'})"
                       + (f", because of {', '.join(self.committed['because'])}." if self.committed["because"] else "."))
        return out

    def lines(self):
        out = [f"Which property of RDMA matters most for AllReduce? {CHOICES[ANSWER]}."]
        for lesson, name in self.missing:
            out.append(f"Lesson {number(lesson)} has not recorded its figures yet: run {name} to fill its rows.")
        for holds, heading in ((True, "Measured, and the same on any device:"),
                               (False, "Measured, and true of this machine only (kept out of the verdict):")):
            out.append(heading)
            out += [f"  {what}: TCP {_text(t)}, RDMA {_text(r)} [{where}]" for what, t, r, where, h in self.rows
                    if h == holds]
        out.append("By design: an RDMA WRITE's CPU copies per byte (measured only where counted, in the table)")
        out += [("> " if mine else "  ") + f"{label}: {copies} ({who})" for label, copies, who, mine in self.design]
        if self.predicted:
            out.append("Your predictions, beside what you then measured:")
            out += [f"  {lesson} {what}: you predicted {p}, measured {m}" for lesson, what, p, m in self.predicted]
        out += self._choices()
        out += [f"{'*' if ok else '-'} {choice}: {text}" for choice, ok, text, _ in self.verdict]
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
        body = ""
        for holds, heading in ((True, "the same on any device"),
                               (False, "true of this machine only: kept out of the verdict")):
            body += f"<tr><th colspan='4' style='text-align:left'><i>{esc(heading)}</i></th></tr>"
            body += "".join(f"<tr><td style='text-align:left'>{esc(what)}</td><td>{_fmt(t)}</td><td>{_fmt(r)}</td>"
                            f"<td>{esc(where)}</td></tr>" for what, t, r, where, h in self.rows if h == holds)
        parts.append("<table><tr><th style='text-align:left'>your measurement</th><th>through TCP</th>"
                     f"<th>by RDMA</th><th>lesson</th></tr>{body}</table>")
        design = "".join(f"<li>{'<b>' if mine else ''}{esc(label)}{'</b>' if mine else ''}: {copies} "
                         f"({esc(who)})</li>" for label, copies, who, mine in self.design)
        parts.append(f"<p><b>By design:</b> an RDMA WRITE's CPU copies per byte (measured only where counted, in the "
                     f"table)</p><ul>{design}</ul>")
        from rdmalab.lessons.plots import png_base64
        parts.append(f"<img src='data:image/png;base64,{png_base64(chart(self.kept, self.kind, self.device))}' "
                     "style='max-width:100%'/>")
        if self.predicted:
            body = "".join(f"<tr><td>{esc(lesson)}</td><td style='text-align:left'>{esc(what)}</td><td>{esc(p)}</td>"
                           f"<td>{esc(m)}</td></tr>" for lesson, what, p, m in self.predicted)
            parts.append("<p><b>Your predictions, beside what you then measured</b> (each written before its "
                         "measurement: where they differ most, the lesson had the most to teach)</p><table><tr>"
                         "<th>lesson</th><th style='text-align:left'>prediction</th><th>you predicted</th>"
                         f"<th>you measured</th></tr>{body}</table>")
        parts += [f"<p>{esc(line)}</p>" for line in self._choices()]
        items = "".join(f"<li style='{'font-weight:bold' if mine else ''}'>{'&#10004;' if ok else '&#10008;'} "
                        f"<i>{esc(choice)}</i>{' (your choice in lesson ' + WELCOME + ')' if mine else ''}: "
                        f"{esc(text)}</li>" for choice, ok, text, mine in self.verdict)
        parts.append(f"<ul>{items}</ul>")
        challenge = "".join(f"<li><b>{esc(name)}</b>: {esc(text)}</li>" for name, text in CHALLENGES)
        parts.append("<p><b>Challenge the answer.</b> Each of these keeps part of RDMA's recipe and drops another: "
                     f"what would its numbers say about which property it really is?</p><ul>{challenge}</ul>")
        return "".join(parts)


def _predictions(kept):
    """[(lesson number, what, predicted, measured)] as text, in the series' order, from evidence.predictions()."""
    out = []
    for slug, _ in LESSON_ORDER:
        for what, pair in kept.get(slug, {}).items():
            predicted = pair.get("predicted")
            out.append((number(slug), what, "nothing written" if predicted is None else _text(predicted),
                        _text(pair.get("measured"))))
    return out


def _text(x):
    return "-" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))


def closing_view(device=None, kept=None, answers=None, committed=None, predicted=None):
    """The closing view: `kept` defaults to everything recorded, `answers` to the saved quiz answers, `device` to
    the one the AllReduce lesson ran on (its name, as the run recorded it); `committed`: the learner's answer
    before the view (the-answer's exercise function, or what it returned)."""
    kept = evidence.recall() if kept is None else kept
    answers = load_answers() if answers is None else answers
    five = kept.get("allreduce", {})
    device = device or five.get("device")
    kind = kind_of(device, five.get("provider")) if device or five else _kind(kept)
    return ClosingView(kept, answers, kind, device, committed, predicted)
