"""The on-the-wire lesson's packets: captures read back with soft0's RoCEv2 codec (rdmalab.wire),
shown as Wireshark shows them, and the bytes a message puts on an Ethernet link.

    capture()          the packets of a pcap file: the one shipped with the lab (RXE_CAPTURE, a real
                       Linux Soft-RoCE device talking to the codec), or one of your own
    table(packets)     Wireshark's packet list: No., Time, Source, Destination, Length, Info
    fields(packet)     one packet's headers, field by field, as Wireshark's detail pane lists them
    ladder(packets)    a ladder diagram: the two hosts as lines, each packet an arrow between them
    psn_plot(...)      a requester's PSNs against time: go-back-N after a loss, at a glance
    on_the_wire(...)   how many packets and bytes a message of some size takes at a path MTU
    write_request(...) the first packet of an RDMA WRITE: what it carries to the target's NIC
    exchange(...)      run a WRITE, a READ and a SEND between two hosts on soft0's wire link, captured
                       (rdmalab capture, the program rdmalab.lessons.wire_demo), optionally losing packets,
                       and optionally sniffed on the loopback interface too (Sniffer: dumpcap, Wireshark's)
    sniffed(exchange)  what the sniffer saw beside what soft0's NICs recorded, in a sentence
    record(...)        keep what the lesson saw (evidence "on-the-wire"), for the last lesson's answer
"""
import html
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from rdmalab.wire import LINKTYPE_ETHERNET, Flow, Packet, decode_ipv4, message_opcodes, read_pcap, segments
from rdmalab.wire.encap import ROCEV2_PORT, ipv4_udp
from rdmalab.wire.headers import AETH, RETH, AtomicETH
from rdmalab.wire.psn import psn_add

CAPTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "captures")
# Captured in the lab's Soft-RoCE guest (tests/wire/test_rxe_interop.py): rxe1, Linux's rdma_rxe, at 10.20.0.1,
# and soft0's packet codec at 10.20.0.2, on the two ends of a veth pair; path MTU 1024.
RXE_CAPTURE = os.path.join(CAPTURES, "rxe-interop.pcap")
ETHERNET_HEADER, ETHERNET_FCS, ETHERNET_PREAMBLE_AND_GAP = 14, 4, 20   # bytes around every IP packet
ETHERTYPE_IPV4, IPPROTO_UDP = b"\x08\x00", 17


@dataclass
class Captured:
    """One captured packet: its number in the file (from 1), time (s since the first), the IPv4/UDP flow
    it travelled on, the decoded RoCEv2 packet, and its length as captured (the IP packet)."""
    number: int
    time: float
    flow: Flow
    packet: Packet
    length: int

    def __str__(self):
        return f"{self.number:3d} {self.time:9.6f} {self.flow.src} -> {self.flow.dst} {self.length:5d} {self.packet}"


def capture(path=RXE_CAPTURE):
    """Every RoCEv2 packet (IPv4, UDP port 4791) of a pcap, decoded and ICRC-checked, numbered as the file
    numbers its frames. A capture of raw IP packets holds only RoCEv2's; one taken on an Ethernet link
    (tcpdump on a NIC, QEMU's filter-dump on the two-host pair's link) holds the link's other traffic too
    (ARP, ssh), which is passed over. A packet the codec cannot read raises its WireError, naming what is
    wrong (a capture taken on the sending host may hold UDP checksums its network card was left to fill in:
    they are not checked here)."""
    linktype, records = read_pcap(path)
    out, start = [], records[0][0] if records else 0.0
    for number, (ts, frame) in enumerate(records, 1):
        if linktype == LINKTYPE_ETHERNET:
            if frame[12:14] != ETHERTYPE_IPV4:
                continue
            frame = frame[ETHERNET_HEADER:]
            if frame[9] != IPPROTO_UDP or int.from_bytes(frame[(frame[0] & 0xF) * 4 + 2:][:2], "big") != ROCEV2_PORT:
                continue
        flow, pkt = decode_ipv4(frame, checksums=False)
        out.append(Captured(number, ts - start, flow, pkt, len(frame)))
    return out


class Table:
    """Rows shown as an HTML table in a notebook, as aligned text elsewhere."""

    def __init__(self, header, rows):
        self.header, self.rows = header, rows

    def __str__(self):
        widths = [max(len(str(x)) for x in column) for column in zip(self.header, *self.rows)]
        return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [self.header, *self.rows])

    __repr__ = __str__

    def _repr_html_(self):
        head = "".join(f"<th style='text-align:left'>{html.escape(str(h))}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td style='text-align:left;font-family:monospace'>{html.escape(str(x))}</td>"
                                        for x in row) + "</tr>" for row in self.rows)
        return f"<table><tr>{head}</tr>{body}</table>"


def table(packets):
    """Wireshark's packet list of `packets` (from capture())."""
    return Table(["No.", "Time", "Source", "Destination", "Length", "Info"],
                 [[c.number, f"{c.time:.6f}", c.flow.src, c.flow.dst, c.length, _info(c.packet)] for c in packets])


def _info(pkt):
    """The Info column: the opcode, the QP, the PSN, and what the extension headers say in a few words."""
    parts = [pkt.info.name, f"QP=0x{pkt.destqp:06x}", f"PSN={pkt.psn}"]
    if pkt.a:
        parts.append("AckReq")
    for header in pkt.headers():
        parts.append(header.describe())
    if pkt.info.payload:
        parts.append(f"{len(pkt.payload)} bytes")
    return " ".join(parts)


def fields(pkt):
    """Every field of one packet's headers, as (header, field, value) rows: read them next to Wireshark's
    detail pane (tshark -V)."""
    rows = [("BTH", "opcode", f"0x{pkt.opcode:02x}  ({pkt.info.name})"),
            ("BTH", "solicited event", int(pkt.se)), ("BTH", "pad count", pkt.padcnt),
            ("BTH", "partition key", f"0x{pkt.p_key:04x}"), ("BTH", "destination QP", f"0x{pkt.destqp:06x}"),
            ("BTH", "AckReq", int(pkt.a)), ("BTH", "PSN", pkt.psn)]
    for header in pkt.headers():
        name = type(header).__name__
        if isinstance(header, RETH):
            rows += [(name, "virtual address", f"0x{header.va:016x}"), (name, "remote key", f"0x{header.r_key:08x}"),
                     (name, "DMA length", header.dmalen)]
        elif isinstance(header, AETH):
            rows += [(name, "syndrome", f"0x{header.syndrome:02x}  ({header.describe().rsplit(' MSN', 1)[0]})"),
                     (name, "message sequence number", header.msn)]
        elif isinstance(header, AtomicETH):
            rows += [(name, "virtual address", f"0x{header.va:016x}"), (name, "remote key", f"0x{header.r_key:08x}"),
                     (name, "swap or add data", header.swapdt), (name, "compare data", header.cmpdt)]
        else:
            rows.append((name, "", header.describe()))
    if pkt.info.payload:
        rows.append(("payload", "bytes", len(pkt.payload)))
    rows.append(("ICRC", "", f"0x{pkt.icrc:08x}" if pkt.icrc is not None else "-"))
    return Table(["header", "field", "value"], rows)


def ladder(packets, ax=None, title="Packets between the two hosts"):
    """A ladder diagram: each host a vertical line, time downwards (in packet order, evenly spaced), each
    packet an arrow from sender to receiver, labelled with its opcode and PSN. Returns the Axes."""
    import matplotlib.pyplot as plt
    hosts = []
    for c in packets:
        for h in (c.flow.src, c.flow.dst):
            if h not in hosts:
                hosts.append(h)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 0.32 * len(packets) + 1.2))
    x = {h: i for i, h in enumerate(hosts[:2])}
    for i, c in enumerate(packets):
        a, b = x.get(c.flow.src, 0), x.get(c.flow.dst, 1)
        answer = c.packet.aeth.describe() if c.packet.aeth is not None else None
        colour = "#0969da" if answer is None else "#1a7f37" if answer.startswith("ACK") else "#cf222e"
        ax.annotate("", (b, -i - 0.6), (a, -i), arrowprops=dict(arrowstyle="->", color=colour, lw=1.2))
        label = f"{c.packet.info.name.removeprefix('RC ')}  PSN {c.packet.psn}"
        if answer is not None:
            label += f"  ({answer.split(' MSN')[0]})"
        ax.text(0.5, -i - 0.3, label, ha="center", va="bottom", fontsize=7, color=colour,
                bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    for h, i in x.items():
        ax.axvline(i, color="grey", lw=2)
        ax.text(i, 0.6, h, ha="center", fontsize=9, weight="bold")
    ax.set_xlim(-0.25, 1.25)
    ax.set_ylim(-len(packets) - 0.2, 1.0)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    return ax


def psn_plot(packets, sender, ax=None, title="Request PSNs in time: a drop is the requester going back"):
    """Every request packet `sender` sent, as its PSN (from the first) against time: first sends in blue,
    resends in orange; each NAK it received a red line. Go-back-N shows as the PSNs falling back. Returns the Axes."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    requests = [c for c in packets if c.flow.src == sender and c.packet.aeth is None]
    if not requests:
        raise ValueError(f"no request packets from {sender} in this capture")
    base, seen, first, again = requests[0].packet.psn, set(), [], []
    for c in requests:
        (again if c.packet.psn in seen else first).append((c.time * 1e3, psn_add(c.packet.psn, -base)))
        seen.add(c.packet.psn)
    for points, colour, label in ((first, "#0969da", "sent"), (again, "#d4a72c", "sent again")):
        if points:
            ax.scatter(*zip(*points), s=6, color=colour, label=label)
    naks = [c.time * 1e3 for c in packets if c.flow.dst == sender and c.packet.aeth is not None
            and c.packet.aeth.describe().startswith("NAK")]
    for i, t in enumerate(naks):
        ax.axvline(t, color="#cf222e", lw=0.8, alpha=0.6, label="NAK received" if i == 0 else None)
    ax.set_xlabel("time [ms]")
    ax.set_ylabel("PSN - first PSN")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def on_the_wire(kind, length, mtu, ethernet=True):
    """(packets, bytes) a message of `length` bytes takes at path MTU `mtu`: kind is "RDMA_WRITE", "SEND"
    or "RDMA_READ_RESPONSE". The bytes are those of the real packets, built with the codec: IPv4, UDP, BTH,
    the extension headers each packet carries, payload, pad and ICRC; with ethernet=True also each frame's
    Ethernet header and checksum (preamble and inter-frame gap, 20 bytes a frame more, are left out)."""
    ops, flow, total = message_opcodes(kind, length, mtu), Flow("10.0.0.1", "10.0.0.2", sport=49152), 0
    for op, (_, size) in zip(ops, segments(length, mtu)):
        headers = {"reth": RETH(0, 0, length)} if op.name.endswith(("WRITE_FIRST", "WRITE_ONLY")) else {}
        if op.name.startswith("RC_RDMA_READ_RESPONSE") and not op.name.endswith("MIDDLE"):
            headers["aeth"] = AETH.ack(0)
        pkt = Packet(op, destqp=1, psn=0, payload=bytes(size), **headers)
        total += len(ipv4_udp(flow, pkt.encode(flow)))
    if ethernet:
        total += len(ops) * (ETHERNET_HEADER + ETHERNET_FCS)
    return len(ops), total


def write_request(remote_addr, rkey, length, dest_qp, psn, mtu=1024, payload=b""):
    """The first packet of an RDMA WRITE of `length` bytes to `remote_addr` under `rkey`, as any RoCEv2 NIC
    builds it (soft0's codec, checked against Linux's Soft-RoCE and Wireshark): its BTH names the QP and
    PSN, its RETH the address, key and length. Read it with fields()."""
    first = message_opcodes("RDMA_WRITE", length, mtu)[0]
    size = segments(length, mtu)[0][1]
    return Packet(first, destqp=dest_qp, psn=psn, payload=(payload or bytes(size))[:size],
                  reth=RETH(remote_addr, rkey, length), a=first.name.endswith("ONLY"))


@dataclass
class Exchange:
    """What exchange() ran: the capture's path, and the program's own report (write_us, read_us, send_us:
    how long each operation took; write_landed; received); the sniffer's pcap, or why there is none."""
    path: str
    report: dict
    sniffed: str = None
    no_sniffer: str = None


class Sniffer:
    """dumpcap (Wireshark's capture engine) on the loopback interface, keeping UDP port 4791: what any sniffer
    sees of soft0's wire link, where `rdmalab capture` writes what the NICs themselves sent and received.
    Capturing needs root or CAP_NET_RAW; without it (or without dumpcap) `why_not` says so and nothing runs."""

    def __init__(self, path, wait_s=10):
        self.path, self.why_not, self.proc = path, None, None
        dumpcap = shutil.which("dumpcap")
        if dumpcap is None:
            self.why_not = "no dumpcap here (Debian and Ubuntu: apt-get install tshark)"
            return
        self.proc = subprocess.Popen([dumpcap, "-q", "-P", "-i", "lo", "-f", f"udp port {ROCEV2_PORT}", "-w", path],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        # dumpcap says when it captures, or why it cannot, then stays quiet. Read its pipe unbuffered: a line a
        # buffered reader had read ahead would be invisible to select(), which would then wait out the deadline
        fd, heard, said, deadline = self.proc.stderr.fileno(), b"", [], time.monotonic() + wait_s
        while select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            heard += chunk
            said = [line.strip() for line in heard.decode(errors="replace").splitlines()]
            if any(line.startswith("Capturing on") for line in said):
                return
        self.proc.kill()   # (a dumpcap that could not start has exited already; one that said nothing in time is ended)
        self.proc.wait()
        self.why_not = (f"dumpcap could not capture on the loopback interface ({said[-1] if said else 'it said nothing'}): "
                        "it needs root or CAP_NET_RAW")
        self.proc = None

    def stop(self):
        """Stop capturing; the pcap's path, or None."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)   # dumpcap writes what it has and exits
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return self.path if os.path.exists(self.path) else None


def _udp_payloads(path):
    """The UDP payloads (BTH to ICRC) of a pcap's Ethernet frames to or from port 4791."""
    from rdmalab.wire.encap import parse_ipv4_udp
    linktype, records = read_pcap(path)
    out = []
    for _, frame in records:
        flow, _, _, payload = parse_ipv4_udp(frame[14:] if linktype == LINKTYPE_ETHERNET else frame, verify=False)
        if ROCEV2_PORT in (flow.sport, flow.dport):
            out.append(bytes(payload))
    return out


def sniffed(ex):
    """What the sniffer saw beside what soft0's NICs recorded, in a sentence: how many packets each has and how
    many of the recorded ones the sniffer saw byte for byte, from the BTH to the ICRC."""
    recorded = _udp_payloads(ex.path)
    if not ex.sniffed:
        return f"soft0's NICs recorded {len(recorded)} packets; no sniffer ran: {ex.no_sniffer}."
    seen = _udp_payloads(ex.sniffed)
    left = list(seen)
    same = 0
    for payload in recorded:
        if payload in left:
            left.remove(payload)
            same += 1
    return (f"soft0's NICs recorded {len(recorded)} packets; dumpcap on the loopback interface saw {len(seen)}, "
            f"{same} of them the same as recorded, byte for byte from the BTH to the ICRC.")


def exchange(name, write=10240, read=2500, rnr=True, loss=0.0, seed=1, timeout=120, sniff=False):
    """Run rdmalab.lessons.wire_demo (two hosts, wire_demo.hosts(): 127.0.8.1 and .2 for root, a pair of the
    learner's own otherwise; each with soft0's NIC on the wire link)
    under `rdmalab capture`, into <learner dir>/captures/<name>.pcap. loss: the rate at which each NIC loses
    the packets it sends (RDMALAB_SOFT_LOSS, seeded by `seed`, so a run repeats). This always uses soft0,
    whatever device the lessons run on: its wire link is what shows the packets. Where Linux's Soft-RoCE
    holds UDP port 4791, it runs in a network namespace of its own. sniff: a Sniffer watches the loopback
    interface meanwhile (not in a namespace of its own, whose loopback no sniffer outside sees), into
    <name>.sniffed.pcap, with each packet a datagram of its own (RDMALAB_SOFT_GSO=0: by default soft0 hands the
    kernel a train of packets in one piece, which reaches a sniffer on the loopback unsegmented)."""
    from rdmalab.lessons import wire_demo
    from rdmalab.lessons.evidence import LEARNER_DIR
    os.makedirs(os.path.join(LEARNER_DIR, "captures"), exist_ok=True)
    path = os.path.join(LEARNER_DIR, "captures", f"{name}.pcap")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMALAB_SOFT_")}
    env["RDMALAB_PROVIDER"] = "soft"   # (wire_demo puts itself on its hosts)
    if loss:
        env.update(RDMALAB_SOFT_LOSS=str(loss), RDMALAB_SOFT_SEED=str(seed))
    program = [sys.executable, "-m", "rdmalab.lessons.wire_demo", "--write", str(write), "--read", str(read)]
    command = [sys.executable, "-m", "rdmalab", "capture", "-o", path, "--", *program, *(["--rnr"] if rnr else [])]
    sniffer, no_sniffer = None, None
    if _port_taken(wire_demo.INITIATOR):
        command = _in_own_network(command)
        no_sniffer = "the exchange ran in a network namespace of its own (Linux's Soft-RoCE holds port 4791 here)"
    elif sniff:
        env["RDMALAB_SOFT_GSO"] = "0"   # a datagram a packet: trains sent in one piece reach a sniffer in one piece
        sniffer = Sniffer(path.removesuffix(".pcap") + ".sniffed.pcap")
        no_sniffer = sniffer.why_not
    # its own process group: an interrupted cell or a timeout ends the programs (and so their NICs) too
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        out, err = run.communicate(timeout=timeout)
    except BaseException:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        raise
    finally:
        sniffed_path = sniffer.stop() if sniffer is not None else None
    lines = out.strip().splitlines()
    if run.returncode or not lines:
        raise RuntimeError(f"the captured exchange failed (exit status {run.returncode}):\n{err.strip()[-2000:]}")
    return Exchange(path, json.loads(lines[-1]), sniffed_path, no_sniffer if sniffed_path is None else None)


def _port_taken(host):
    """Whether UDP port 4791 is taken on `host`: where Linux's Soft-RoCE (rdma_rxe) is loaded, its kernel
    socket holds port 4791 on every address of the machine."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind((host, ROCEV2_PORT))
        return False
    except OSError:
        return True
    finally:
        probe.close()


def _in_own_network(command):
    """`command` run in a network namespace of its own (a loopback of its own, where no kernel socket holds
    port 4791): as root, or as a user where the kernel lets users create namespaces."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        raise RuntimeError("UDP port 4791 is taken on this machine (Linux's Soft-RoCE, rdma_rxe, is loaded: its "
                           "kernel socket holds it), and without util-linux's unshare and iproute2's ip the "
                           "exchange cannot run in a network namespace of its own: install them, or unload "
                           "rdma_rxe (rdma link delete rxe0; modprobe -r rdma_rxe)")
    unshare = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--net", "--map-root-user"]
    return [*unshare, "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]


def resent(packets, sender):
    """The request packets `sender` sent more than once, each PSN counted once: {psn: times sent}."""
    sent = {}
    for c in packets:
        if c.flow.src == sender and c.packet.aeth is None:
            sent[c.packet.psn] = sent.get(c.packet.psn, 0) + 1
    return {psn: n for psn, n in sent.items() if n > 1}


def record(write, clean, lossy, resent_psns, lossy_size, loss, headers_share):
    """Keep the on-the-wire lesson's figures for the last lesson (rdmalab.lessons.evidence, key "on-the-wire"):
    the captured WRITE (`write`: its packets, Captured) and what its first packet's RETH named; the clean and the
    lossy exchange (Exchange) of a `lossy_size` WRITE with `loss` of packets lost, and the PSNs resent
    (resent()); and the share of headers in a ring AllReduce's bytes at MTU 4096 (`headers_share`)."""
    from rdmalab.lessons import evidence
    reth = write[0].packet.reth
    return evidence.record("on-the-wire", write_length=reth.dmalen, write_packets=len(write),
                           reth_packets=sum(c.packet.reth is not None for c in write), reth_va=reth.va,
                           reth_rkey=reth.r_key, lossy_size=lossy_size, loss=loss, resent=len(resent_psns),
                           clean_ms=clean.report["write_us"] / 1000, lossy_ms=lossy.report["write_us"] / 1000,
                           headers_share=headers_share)


__all__ = ["RXE_CAPTURE", "Captured", "capture", "table", "fields", "ladder", "psn_plot", "on_the_wire", "exchange",
           "resent", "record",
           "ROCEV2_PORT"]
