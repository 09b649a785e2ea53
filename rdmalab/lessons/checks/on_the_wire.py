"""The on-the-wire lesson (on-the-wire): its exercises, each a check (raising Wrong with a hint) and a reference
solution.

on-the-wire.packets: predict the packets of an RDMA WRITE of `length` bytes at path MTU `mtu`, as a list of
(kind, payload bytes), kind one of "only", "first", "middle", "last". The check compares the prediction
with what the codec segments (rdmalab.wire.segment, itself checked against packets captured
from Linux's rxe) for several sizes, the edges included: a message of exactly one MTU, one byte more, and
a zero-length WRITE, which still takes one packet.

on-the-wire.link-bytes: count the bytes an RDMA WRITE of n bytes at path MTU mtu takes on an Ethernet link, as
(the WRITE's, its ACK's): every packet a frame (preamble and SFD, Ethernet, IPv4, UDP, BTH, payload, ICRC, FCS,
inter-frame gap: IEEE 802.3; the BTH, RETH, AETH and ICRC: the IBTA's Vol. 1 and its RoCEv2 Annex A17),
the RETH on the first only, one ACK back. Checked against the WRITEs of the shipped capture (Linux's Soft-RoCE:
their IP packets' lengths, plus Ethernet's 38 bytes of framing) and, for other sizes, the codec's packets; each
slip (a header forgotten, a RETH on every packet, the payload not split, no ACK, an ACK a packet) is named, or
the slips it cannot be told from. Untagged frames, payloads a multiple of 4 (no pad); no frame here is under
Ethernet's 64-byte minimum (an ACK is 66 with its FCS).
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.wire import message_opcodes, segments

CASES = [(10240, 1024), (10000, 4096), (1024, 1024), (1025, 1024), (100, 256), (0, 1024)]
KINDS = ("only", "first", "middle", "last")
HINT = ("A message of n bytes takes ceil(n / mtu) packets, at least one. One packet is 'only'; more are "
        "'first', then 'middle' ones, then 'last'. Every packet but the last carries a full MTU of payload; "
        "the last carries what is left.")


def packets_of(length, mtu):
    """What the codec sends: [(kind, payload bytes)] for an RDMA WRITE of `length` bytes at `mtu`."""
    ops = message_opcodes("RDMA_WRITE", length, mtu)
    return [(op.name.rsplit("_", 1)[-1].lower(), size) for op, (_, size) in zip(ops, segments(length, mtu))]


@exercise("on-the-wire.packets", "Predict the packets of an RDMA WRITE", hints=[HINT])
def check(predict):
    """`predict(length, mtu)` -> [(kind, payload bytes), ...]; returns its answer for 10240 bytes at MTU 1024."""
    if predict is None:
        raise NotYet("write my_packets(length, mtu)", HINT)
    for length, mtu in CASES:
        try:
            got = predict(length, mtu)
        except NotImplementedError:
            raise NotYet("write my_packets(length, mtu)", HINT) from None
        want, where = packets_of(length, mtu), f"a WRITE of {length} bytes at MTU {mtu}"
        if not isinstance(got, (list, tuple)) or any(not (isinstance(p, (tuple, list)) and len(p) == 2) for p in got):
            raise Wrong(f"for {where} you returned {str(got)[:60]}: return a list of (kind, payload bytes) pairs, "
                        f"such as [('first', {mtu}), ...]", HINT)
        got = [tuple(p) for p in got]
        if len(got) != len(want):
            raise Wrong(f"{where} takes {len(want)} packet{'s' * (len(want) != 1)}; you predicted {len(got)}", HINT)
        bad_kind = next((i for i, (g, w) in enumerate(zip(got, want)) if g[0] != w[0]), None)
        if bad_kind is not None:
            raise Wrong(f"for {where}, packet {bad_kind + 1} of {len(want)} is '{want[bad_kind][0]}', not "
                        f"'{got[bad_kind][0]}' (the kinds are {', '.join(KINDS)})", HINT)
        bad_size = next((i for i, (g, w) in enumerate(zip(got, want)) if g[1] != w[1]), None)
        if bad_size is not None:
            raise Wrong(f"for {where}, packet {bad_size + 1} carries {want[bad_size][1]} bytes, not {got[bad_size][1]}",
                        HINT)
    return predict(10240, 1024)


@reference("on-the-wire.packets")
def _reference():
    def my_packets(length, mtu):
        n = max(1, -(-length // mtu))   # ceil(length / mtu), and a zero-length WRITE still sends one packet
        if n == 1:
            return [("only", length)]
        return [("first", mtu)] + [("middle", mtu)] * (n - 2) + [("last", length - (n - 1) * mtu)]
    return my_packets


# ---- on-the-wire.link-bytes: what a WRITE costs the link, headers, framing and its ACK included ----

FRAME = {"preamble and SFD": 8, "Ethernet header": 14, "IPv4 header": 20, "UDP header": 8, "BTH": 12, "ICRC": 4,
         "FCS": 4, "inter-frame gap": 12}   # each packet's bytes on the link, besides its payload and the RETH
RETH, AETH = 16, 4
LINK_CASES = [(10240, 1024), (3000, 1024), (64, 1024), (1 << 20, 4096), (4096, 4096), (4100, 4096), (0, 1024)]
LINK_HINT = ("A frame on the link is preamble and SFD (8), Ethernet (14), IPv4 (20), UDP (8), BTH (12), payload, "
             "ICRC (4), FCS (4), then a gap of 12. The RETH (16) rides on the first packet only; the one ACK back "
             "is a frame with a 4-byte AETH after its BTH, and no payload.")
CAPTURED = {(10240, 1024): slice(0, 11), (3000, 1024): slice(13, 17), (64, 1024): slice(23, 25)}   # (in RXE_CAPTURE)


def link_bytes(n, mtu, leave_out=(), reth_every=False, reth=True, split=True, ceil=True, at_least_one=True,
               ack=True, aeth=True, ack_each=False):
    """(the WRITE's bytes on the link, its ACK's) for a WRITE of `n` bytes (a multiple of 4: no pad) at path MTU
    `mtu`. Each keyword at its default is right; otherwise it is a slip the check names: `leave_out`, parts of
    FRAME forgotten."""
    packets = -(-n // mtu) if ceil else n // mtu
    packets = 1 if not split else max(1, packets) if at_least_one else packets
    frame = sum(size for part, size in FRAME.items() if part not in leave_out)
    out = n + packets * frame + RETH * (packets if reth_every else min(packets, 1)) * reth
    back = (frame + AETH * aeth) * (packets if ack_each else 1) * ack
    return out, back


def captured_link_bytes(n, mtu):
    """What the link carried for the WRITEs the shipped capture holds (Linux's Soft-RoCE and soft0's codec): each
    IP packet's captured length, plus Ethernet's header and FCS, preamble and gap; (WRITE, ACK)."""
    from rdmalab.lessons.packets import capture
    outside_ip = sum(FRAME[part] for part in ("preamble and SFD", "Ethernet header", "FCS", "inter-frame gap"))
    wire = [c.length + outside_ip for c in capture()[CAPTURED[n, mtu]]]
    return sum(wire[:-1]), wire[-1]


def true_link_bytes(n, mtu):
    """The real count: the capture's where it holds that WRITE, else the codec's packets (packets.on_the_wire, the
    Ethernet frames) with each frame's preamble and gap, and an ACK built by the codec."""
    if (n, mtu) in CAPTURED:
        return captured_link_bytes(n, mtu)
    from rdmalab.lessons.packets import on_the_wire
    from rdmalab.wire import Flow, Packet
    from rdmalab.wire.encap import ipv4_udp
    from rdmalab.wire.headers import AETH as Aeth
    from rdmalab.wire.opcodes import Op
    packets, frames = on_the_wire("RDMA_WRITE", n, mtu)
    flow = Flow("10.0.0.2", "10.0.0.1", sport=49152)
    ack = len(ipv4_udp(flow, Packet(Op.RC_ACKNOWLEDGE, destqp=1, psn=0, aeth=Aeth.ack(0)).encode(flow)))
    around = FRAME["preamble and SFD"] + FRAME["inter-frame gap"]
    return frames + packets * around, ack + FRAME["Ethernet header"] + FRAME["FCS"] + around


SLIPS = [(dict(leave_out=(part,)), f"no {part} ({size} bytes a frame)") for part, size in FRAME.items()] + [
    (dict(leave_out=("preamble and SFD", "inter-frame gap")), "no preamble or gap: each frame also takes 8 bytes "
                                                              "of preamble and SFD, then 12 of idle gap"),
    (dict(leave_out=("ICRC", "FCS")), "neither the ICRC nor the FCS: each packet ends with both, 4 bytes each"),
    (dict(reth_every=True), "a RETH on every packet: only the first carries it, the later ones follow by PSN"),
    (dict(reth=False), "no RETH: the first packet carries one (16 bytes: address, rkey, length)"),
    (dict(split=False), "one packet for the whole message: the payload is split at the path MTU, and every "
                        "packet carries its own headers"),
    (dict(ceil=False), "the last, partial packet forgotten: n bytes take ceil(n / mtu) packets"),
    (dict(at_least_one=False), "no packet for a zero-length WRITE: it still sends one, with its RETH"),
    (dict(ack=False), "no ACK: the target's NIC answers the WRITE with one, back over the link"),
    (dict(aeth=False), "an ACK without its AETH (4 bytes after its BTH)"),
    (dict(ack_each=True), "an ACK for every packet: one ACK answers the whole message"),
]


@exercise("on-the-wire.link-bytes", "Count the bytes a WRITE puts on the link", hints=[LINK_HINT])
def _check_link_bytes(count):
    """`count(n, mtu)` -> (bytes the WRITE's packets take on the link, bytes its ACK takes back), checked against
    the shipped capture's WRITEs and, for other sizes, the codec's packets."""
    if count is None:
        raise NotYet("write my_link_bytes(n, mtu)", LINK_HINT)
    for n, mtu in LINK_CASES:
        try:
            got = count(n, mtu)
        except NotImplementedError:
            raise NotYet("write my_link_bytes(n, mtu)", LINK_HINT) from None
        where = f"a WRITE of {n} bytes at MTU {mtu}" + (" (captured)" if (n, mtu) in CAPTURED else "")
        if not isinstance(got, (tuple, list)) or len(got) != 2 or \
                not all(isinstance(x, int) and not isinstance(x, bool) for x in got):
            raise Wrong(f"for {where} you returned {str(got)[:60]}: return two whole numbers, (the WRITE's bytes, "
                        "its ACK's bytes)", LINK_HINT)
        want = true_link_bytes(n, mtu)
        if tuple(got) == want:
            continue
        slips = [said for keywords, said in SLIPS if link_bytes(n, mtu, **keywords) == tuple(got)]
        off = ", ".join(f"{what} {g - w:+d}" for what, g, w in zip(("the WRITE", "the ACK"), got, want) if g != w)
        said = f"for {where} you counted {tuple(got)}; the link carries {want} ({off})"
        if len(slips) == 1:
            raise Wrong(f"{said}: {slips[0]}.", LINK_HINT)
        if slips:
            raise Wrong(f"{said}: as many bytes as one of these: {'; or '.join(slips)}.", LINK_HINT)
        raise Wrong(f"{said}: no one slip accounts for it. Count one packet's frame part by part, then the RETH and "
                    "the ACK.", LINK_HINT)


@reference("on-the-wire.link-bytes")
def _link_bytes():
    def my_link_bytes(n, mtu):
        packets = max(1, -(-n // mtu))                  # ceil(n / mtu), and at least one
        frame = 8 + 14 + 20 + 8 + 12 + 4 + 4 + 12       # preamble+SFD, Ethernet, IPv4, UDP, BTH, ICRC, FCS, gap
        return n + packets * frame + 16, frame + 4      # the RETH on the first packet; the ACK: BTH + AETH
    return my_link_bytes
