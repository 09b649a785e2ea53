"""IPv4 + UDP around a RoCEv2 packet: what a pcap file or a raw socket holds.

A NIC that sends through an ordinary UDP socket lets the kernel write these headers. To put the
packet in a pcap, or to send it through a raw socket, or to compute its ICRC (which covers them),
we build them here ourselves, with correct IPv4 header and UDP checksums.

A Flow is what the headers say: addresses, ports, and the IPv4 fields that matter for the ICRC.
RoCEv2's destination port is always 4791; the source port is the sender's choice (rxe derives it
from the QP number so that switches spread different QPs over different paths, but keeps it fixed
for one QP so that its packets stay in order).

Why ip_id=0 and df=True by default: Linux sends a datagram of an unconnected UDP socket that has
Don't Fragment set (IP_PMTUDISC_DO) with Identification 0, so a NIC on such a socket knows the
exact IPv4 header the kernel will put around its packet, and can compute the ICRC beforehand.
"""
import ipaddress
import socket
import struct
from dataclasses import dataclass

from .headers import WireError

ROCEV2_PORT = 4791
IPPROTO_UDP = 17
# Linux's values (<linux/in.h>); Python's socket module names them from 3.12 only
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2


def dont_fragment(sock):
    """Make a UDP socket (Linux) send every datagram with Don't Fragment set, and so, unconnected,
    with IPv4 Identification 0: the header Flow's defaults describe. A datagram over the path MTU
    then fails with EMSGSIZE instead of being fragmented, which RoCEv2 never is."""
    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    sport: int
    dport: int = ROCEV2_PORT
    ip_id: int = 0
    ttl: int = 64
    tos: int = 0
    df: bool = True

    def reply(self, **changes):
        """The flow of an answer: addresses and ports swapped."""
        fields = dict(src=self.dst, dst=self.src, sport=self.dport, dport=self.sport)
        fields.update(changes)
        return Flow(**fields)


def checksum(data):
    """The Internet checksum (RFC 1071): ones' complement of the ones' complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _addr(text):
    try:
        return ipaddress.IPv4Address(text).packed
    except ValueError:
        raise WireError(f"{text!r} is not an IPv4 address (a Flow takes dotted quads like '10.0.0.1')") from None


def ipv4_header(flow, payload_len):
    """The 20-byte IPv4 header of a datagram carrying `payload_len` bytes of UDP (header included)."""
    total = 20 + payload_len
    if total > 0xFFFF:
        raise WireError(f"an IPv4 packet of {total} bytes is over the 65535-byte limit")
    header = struct.pack("!BBHHHBBH4s4s", 0x45, flow.tos, total, flow.ip_id, 0x4000 if flow.df else 0,
                         flow.ttl, IPPROTO_UDP, 0, _addr(flow.src), _addr(flow.dst))
    return header[:10] + struct.pack("!H", checksum(header)) + header[12:]


def udp_header(flow, payload):
    """The 8-byte UDP header, its checksum over the IPv4 pseudo-header, itself and the payload."""
    length = 8 + len(payload)
    header = struct.pack("!HHHH", flow.sport, flow.dport, length, 0)
    pseudo = _addr(flow.src) + _addr(flow.dst) + struct.pack("!BBH", 0, IPPROTO_UDP, length)
    value = checksum(pseudo + header + payload) or 0xFFFF   # 0 on the wire means "no checksum"
    return header[:6] + struct.pack("!H", value)


def ipv4_udp(flow, payload):
    """A whole IPv4 packet: IPv4 header, UDP header, payload."""
    return ipv4_header(flow, 8 + len(payload)) + udp_header(flow, payload) + payload


def parse_ipv4_udp(packet, verify=True):
    """Split an IPv4/UDP packet into (flow, ip_header, udp_header, udp_payload).

    With verify, a wrong IPv4 header checksum or UDP checksum raises WireError (a UDP checksum of 0
    means the sender sent none, which UDP over IPv4 allows; rxe sends none)."""
    packet = bytes(packet)
    if len(packet) < 28:
        raise WireError(f"truncated packet: {len(packet)} bytes cannot hold IPv4 and UDP headers (28)")
    if packet[0] >> 4 != 4:
        raise WireError(f"not an IPv4 packet (version {packet[0] >> 4})")
    ihl = (packet[0] & 0xF) * 4
    if ihl != 20:
        raise WireError(f"IPv4 header of {ihl} bytes: options are not expected in RoCEv2 packets")
    tos, total, ip_id, frag, ttl, proto = struct.unpack_from("!xBHHHBB", packet)
    if proto != IPPROTO_UDP:
        raise WireError(f"IPv4 protocol {proto} is not UDP (17)")
    if total > len(packet) or total < 28:
        raise WireError(f"truncated packet: IPv4 total length {total}, {len(packet)} bytes present")
    if frag & 0x3FFF:
        raise WireError("an IPv4 fragment: RoCEv2 packets are never fragmented (they fit the path MTU)")
    ip, udp = packet[:20], packet[20:28]
    sport, dport, ulen, usum = struct.unpack("!HHHH", udp)
    if ulen != total - 20:
        raise WireError(f"UDP length {ulen} does not match the IPv4 total length {total} - 20")
    payload = packet[28:total]
    src, dst = str(ipaddress.IPv4Address(ip[12:16])), str(ipaddress.IPv4Address(ip[16:20]))
    flow = Flow(src, dst, sport, dport, ip_id, ttl, tos, bool(frag & 0x4000))
    if verify:
        if checksum(ip):
            raise WireError("bad IPv4 header checksum")
        if usum and udp_header(flow, payload) != udp:
            raise WireError("bad UDP checksum")
    return flow, ip, udp, payload
