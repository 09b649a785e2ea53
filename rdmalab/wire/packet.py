"""One RoCEv2 packet: encode it from an opcode, fields and payload; decode it into a Packet.

    pkt = Packet(Op.RC_RDMA_WRITE_FIRST, destqp=0x11, psn=100,
                 reth=RETH(va=0x7f0000, r_key=0x1234, dmalen=10240), payload=data[:1024])
    udp_payload = pkt.encode(flow)          # BTH ... payload, pad, ICRC: what goes in the datagram
    Packet.decode(udp_payload)              # the same Packet back (and its ICRC, unchecked)
    flow, pkt = decode_ipv4(ip_packet)      # from a capture: checksums and ICRC checked

The opcode says which extension headers must be present (opcodes.py); encode refuses a packet
that lacks one or has one too many, so a NIC cannot send what no receiver would accept.
"""
import dataclasses
import functools
import struct
from dataclasses import dataclass, field

from . import encap
from .psn import MASK24
from .headers import AETH, BTH, DETH, IETH, RETH, AtomicAckETH, AtomicETH, ImmDt, WireError
from .icrc import ICRC_SIZE, compute_icrc, icrc_bytes, icrc_of_trailer, ip_id_for
from .opcodes import Op, opcode

# extension header class -> the Packet attribute that holds it
_SLOTS = {RETH: "reth", AETH: "aeth", AtomicETH: "atomiceth", AtomicAckETH: "atomicacketh",
          ImmDt: "immdt", IETH: "ieth", DETH: "deth"}


class BadICRC(WireError):
    """The packet's ICRC does not match its contents: it was damaged on the way (or misbuilt)."""


@dataclass
class Packet:
    opcode: int
    destqp: int
    psn: int
    payload: bytes = field(default=b"", repr=False)   # str() shows its length
    reth: RETH | None = None
    aeth: AETH | None = None
    atomiceth: AtomicETH | None = None
    atomicacketh: AtomicAckETH | None = None
    immdt: ImmDt | None = None
    ieth: IETH | None = None
    deth: DETH | None = None
    a: bool = False           # AckReq
    se: bool = False          # solicited event
    m: bool = False           # MigReq, for path migration (rxe sends 0)
    p_key: int = 0xFFFF
    fecn: bool = False
    becn: bool = False
    tver: int = 0
    icrc: int = field(default=None, compare=False)   # set by decode: the ICRC the packet carried

    @property
    def info(self):
        return opcode(self.opcode)

    @property
    def padcnt(self):
        """Pad bytes after the payload: packets are a whole number of 4-byte words."""
        return -len(self.payload) % 4

    def headers(self):
        return [getattr(self, _SLOTS[h]) for h in self.info.headers]

    def transport(self):
        """BTH, extension headers, payload and pad: the UDP payload without its ICRC."""
        info = self.info
        for header, slot in _SLOTS.items():
            value = getattr(self, slot)
            present, wanted = value is not None, header in info.headers
            if present != wanted:
                raise WireError(f"{info.name} {'carries' if wanted else 'does not carry'} a {header.__name__}: "
                                f"{'give' if wanted else 'leave out'} {slot}=")
            if present and not isinstance(value, header):
                raise WireError(f"{slot}= takes a {header.__name__}, not {type(value).__name__}")
        if self.payload and not info.payload:
            raise WireError(f"{info.name} carries no payload ({len(self.payload)} bytes given)")
        bth = BTH(self.opcode, self.destqp, self.psn, se=self.se, m=self.m, padcnt=self.padcnt,
                  tver=self.tver, p_key=self.p_key, fecn=self.fecn, becn=self.becn, a=self.a)
        return b"".join([bth.pack()] + [h.pack() for h in self.headers()]
                        + [bytes(self.payload), b"\0" * self.padcnt])

    def encode(self, flow):
        """The UDP payload to send on `flow` (encap.Flow): transport headers, payload, pad, ICRC.
        The ICRC covers the IPv4 and UDP headers, so it is computed for the headers `flow` gives."""
        body = self.transport()
        return body + icrc_bytes(compute_icrc(*_flow_headers(flow, len(body) + ICRC_SIZE), body))

    @classmethod
    def decode(cls, data, flow=None):
        """A Packet from a UDP payload (BTH ... ICRC). The ICRC is kept in .icrc; it is checked only
        when `flow` says what the IPv4 and UDP headers were (a UDP socket shows addresses and ports,
        not the IPv4 Identification: Flow's default, 0, is what a sender that uses
        encap.dont_fragment sends; rxe sends other values), or by decode_ipv4 on a whole packet."""
        data = bytes(data)
        if len(data) < BTH.SIZE:
            BTH.unpack(data)   # (raises: truncated)
        op, flags, p_key, word1, word2 = _BTH.unpack_from(data)   # BTH.unpack's fields, without the object
        if flags & 0xF:
            raise WireError(f"BTH header version {flags & 0xF}: only version 0 exists")
        info = opcode(op)
        offset, fields = BTH.SIZE, {}
        for header in info.headers:
            fields[_SLOTS[header]] = header.unpack(data, offset)
            offset += header.SIZE
        end, padcnt = len(data) - ICRC_SIZE, flags >> 4 & 3
        if end < offset:
            raise WireError(f"truncated packet: {info.name} needs {offset + ICRC_SIZE} bytes "
                            f"(headers and ICRC), got {len(data)}")
        if not info.payload and end > offset:
            raise WireError(f"{info.name} carries no payload, but {end - offset} bytes follow its headers")
        if padcnt > end - offset:
            raise WireError(f"pad count {padcnt} is more than the {end - offset} bytes after the headers")
        if flow is not None:
            verify_icrc(data, *_flow_headers(flow, len(data)))
        return cls(op, word1 & MASK24, word2 & MASK24, data[offset:end - padcnt], a=bool(word2 >> 31),
                   se=bool(flags & 0x80), m=bool(flags & 0x40), p_key=p_key, fecn=bool(word1 >> 31),
                   becn=bool(word1 >> 30 & 1), icrc=_ICRC.unpack_from(data, end)[0], **fields)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def __str__(self):
        """One line, in Wireshark's words: 'RC RDMA Write First QP=0x000011 PSN=100 ...'."""
        parts = [f"{self.info.name} QP=0x{self.destqp:06x} PSN={self.psn}"]
        for h in self.headers():
            parts.append(h.describe())
        if self.info.payload:
            parts.append(f"{len(self.payload)} bytes")
        return " ".join(parts)


_BTH = struct.Struct("!BBHII")
_ICRC = struct.Struct("<I")


def encode_fast(flow, opcode, destqp, psn, payload=b"", headers=b"", a=False, se=False):
    """Packet(opcode, destqp, psn, payload=..., a=..., se=..., <extension headers>).encode(flow), the
    same bytes, without building a Packet: for a NIC's data path, where every microsecond of every
    packet counts. `headers` are the extension headers, packed, in order. Nothing is checked: give
    it only what Packet would accept (tests/wire/test_codec.py compares the two)."""
    pad = -len(payload) % 4
    body = b"".join((_BTH.pack(opcode, se << 7 | pad << 4, 0xFFFF, destqp, a << 31 | psn), headers, payload,
                     b"\0" * pad))
    return body + icrc_bytes(compute_icrc(*_flow_headers(flow, len(body) + ICRC_SIZE), body))


@functools.lru_cache(maxsize=4096)   # (a NIC sends many packets of one length on one flow)
def _flow_headers(flow, udp_payload_len):
    """The IPv4 and UDP headers `flow` describes, as the ICRC sees them (the UDP checksum is masked,
    so it is left at 0 rather than computed over a payload)."""
    length = 8 + udp_payload_len
    udp = flow.sport.to_bytes(2, "big") + flow.dport.to_bytes(2, "big") + length.to_bytes(2, "big") + b"\0\0"
    return encap.ipv4_header(flow, length), udp


def sender_ip_id(udp_payload, flow):
    """The IPv4 Identification the sender's ICRC was computed for, when `flow` (as a UDP socket shows it:
    addresses and ports) lacks it; None if no Identification makes the ICRC right (icrc.ip_id_for)."""
    return ip_id_for(udp_payload, *_flow_headers(dataclasses.replace(flow, ip_id=0), len(udp_payload)))


def verify_icrc(udp_payload, ip_header, udp_header):
    """Raise BadICRC unless the packet's ICRC matches its headers and contents."""
    carried = icrc_of_trailer(udp_payload)
    computed = compute_icrc(ip_header, udp_header, memoryview(udp_payload)[:-ICRC_SIZE])
    if carried != computed:
        raise BadICRC(f"bad ICRC: the packet carries 0x{carried:08x}, its contents give 0x{computed:08x}")


def decode_ipv4(ip_packet, checksums=True):
    """(flow, Packet) from a whole IPv4 packet (a capture, a raw socket), with the ICRC checked, and
    the IPv4 and UDP checksums unless checksums=False: WireError (BadICRC for the ICRC) if one is wrong.

    checksums=False is for packets captured on their way out of this host: the kernel leaves the
    UDP checksum to the network card ("checksum offload"), so a capture holds only its seed."""
    flow, ip, udp, payload = encap.parse_ipv4_udp(ip_packet, verify=checksums)
    if flow.dport != encap.ROCEV2_PORT:
        raise WireError(f"UDP port {flow.dport} is not RoCEv2's {encap.ROCEV2_PORT}")
    pkt = Packet.decode(payload)
    verify_icrc(payload, ip, udp)
    return flow, pkt


def encode_ipv4(pkt, flow):
    """A whole IPv4 packet for a pcap or a raw socket: headers with checksums, ICRC included."""
    return encap.ipv4_udp(flow, pkt.encode(flow))


__all__ = ["Packet", "BadICRC", "verify_icrc", "decode_ipv4", "encode_ipv4", "encode_fast", "sender_ip_id", "Op"]
