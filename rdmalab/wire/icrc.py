"""The ICRC: RoCEv2's end-to-end CRC, the last 4 bytes of every packet.

Ethernet's own CRC is checked and rewritten at every hop; the Invariant CRC is computed once by
the sending NIC and checked by the receiving NIC, so it catches a packet damaged anywhere on the
way, switches included. It covers everything that no one on the way may change. Fields a router or
switch does change are replaced by ones ("masked") before the CRC is computed, so it stays valid:

    8 bytes of ones                 stand-in for InfiniBand's Local Route Header, which RoCE lacks
    IPv4 header                     with TOS (DSCP/ECN), TTL and header checksum set to ones
      or IPv6 header                with traffic class, flow label and hop limit set to ones
    UDP header                      with its checksum set to ones
    BTH                             with byte 4 (FECN, BECN, reserved) set to ones: congestion marks
    extension headers, payload, pad as they are

The CRC is the ordinary CRC-32 (Ethernet's, zlib's). Linux's rxe (drivers/infiniband/sw/rxe/
rxe_icrc.c) starts from 0xdebb20e3, which is the CRC-32 register after the 8 bytes of ones, and
stores the result in little-endian byte order: zlib.crc32 over the same bytes gives the same value.
"""
import functools
import struct
import zlib

from .headers import WireError

ICRC_SIZE = 4
_LRH_STANDIN = b"\xff" * 8


def _masked_ip(ip_header):
    ip = bytearray(ip_header)
    version = ip[0] >> 4 if ip else None
    if version == 4:
        if len(ip) != 20:
            raise WireError(f"IPv4 header of {len(ip)} bytes: RoCEv2 packets carry no IP options (20 bytes)")
        ip[1] = 0xFF                 # TOS: DSCP and ECN, which switches may rewrite
        ip[8] = 0xFF                 # TTL, decremented by every router
        ip[10:12] = b"\xff\xff"      # header checksum, recomputed by every router
    elif version == 6:
        if len(ip) != 40:
            raise WireError(f"IPv6 header of {len(ip)} bytes: RoCEv2 uses the 40-byte fixed header")
        ip[0] |= 0x0F                # traffic class (high half) ...
        ip[1:4] = b"\xff\xff\xff"    # ... its low half and the 20-bit flow label
        ip[7] = 0xFF                 # hop limit
    else:
        raise WireError(f"not an IPv4 or IPv6 header (version {version})")
    return bytes(ip)


def compute_icrc(ip_header, udp_header, transport):
    """The ICRC of a packet, as an int: `transport` is the UDP payload without its ICRC
    (BTH, extension headers, payload, pad); the headers are the bytes as sent on the wire."""
    if len(udp_header) != 8:
        raise WireError(f"UDP header of {len(udp_header)} bytes, expected 8")
    if len(transport) < 12:
        raise WireError(f"truncated packet: {len(transport)} bytes cannot hold a 12-byte BTH")
    transport = memoryview(transport)   # (read in place, not copied)
    crc = _headers_crc(bytes(ip_header), bytes(udp_header))
    crc = zlib.crc32(transport[5:], zlib.crc32(b"\xff", zlib.crc32(transport[:4], crc)))   # byte 4: FECN, BECN, reserved
    return crc


@functools.lru_cache(maxsize=4096)
def _headers_crc(ip_header, udp_header):
    """The CRC over the 8 bytes of ones and the masked IP and UDP headers: the same for every packet of
    one length on one flow, so a NIC computes it once (kept for the last 4096 flows and lengths)."""
    udp = udp_header[:6] + b"\xff\xff"                       # UDP checksum
    return zlib.crc32(udp, zlib.crc32(_masked_ip(ip_header), zlib.crc32(_LRH_STANDIN)))


def icrc_bytes(value):
    """The 4 bytes that end the packet: the CRC in little-endian order, as rxe and NICs send it."""
    return struct.pack("<I", value)


def icrc_of_trailer(udp_payload):
    """The ICRC a packet carries in its last 4 bytes."""
    if len(udp_payload) < ICRC_SIZE:
        raise WireError(f"truncated packet: {len(udp_payload)} bytes cannot end with a 4-byte ICRC")
    return struct.unpack("<I", udp_payload[-ICRC_SIZE:])[0]


def ip_id_for(udp_payload, ip_header, udp_header):
    """The IPv4 Identification for which the packet's ICRC is right, or None if there is none.

    A NIC on a UDP socket sees the addresses and ports of a packet, not its IPv4 Identification, which
    the ICRC covers. A sender whose kernel numbers its packets (rxe does) leaves the receiver 2**16
    candidates. The CRC is linear, so it need not try them all: flipping bit i of the Identification
    flips a fixed pattern delta_i of the CRC's bits (for one packet length), and the ICRC of a packet
    with Identification x is its ICRC with 0 XOR the deltas of x's bits: solved by looking up one
    byte's 256 combinations against the other's. `ip_header` is the one with Identification 0.
    Spending 16 of the ICRC's 32 bits this way, a damaged packet passes 1 time in 65536."""
    carried = icrc_of_trailer(udp_payload)
    zero = compute_icrc(ip_header, udp_header, bytes(udp_payload[:-ICRC_SIZE]))
    low, _ = _identification_tables(len(udp_payload) - ICRC_SIZE)
    high = _high_byte_lookup(len(udp_payload) - ICRC_SIZE)
    wanted = carried ^ zero
    for lo, pattern in enumerate(low):
        hi = high.get(wanted ^ pattern)
        if hi is not None:
            return hi << 8 | lo
    return None


def ip_id_delta(udp_payload_len, ip_id):
    """What an IPv4 Identification of `ip_id` instead of 0 changes in the ICRC of a packet of
    `udp_payload_len` bytes: XOR it in. (A kernel that segments a train of packets numbers them 0, 1,
    2...: their ICRCs must count with it.)"""
    low, high = _identification_tables(udp_payload_len - ICRC_SIZE)
    return low[ip_id & 0xFF] ^ high[ip_id >> 8]


@functools.lru_cache(maxsize=256)
def _high_byte_lookup(transport_len):
    return {pattern: value for value, pattern in enumerate(_identification_tables(transport_len)[1])}


@functools.lru_cache(maxsize=256)
def _identification_tables(transport_len):
    """For an IPv4 packet whose transport part is `transport_len` bytes: the CRC patterns of each value
    of the Identification's low byte, and of its high byte (two lists of 256)."""
    length = len(_LRH_STANDIN) + 20 + 8 + transport_len
    zeros = bytes(length)
    base = zlib.crc32(zeros)
    deltas = []
    for bit in range(16):   # Identification: bytes 4 and 5 of the IPv4 header, big-endian
        flipped = bytearray(length)
        flipped[len(_LRH_STANDIN) + 4 + (1 - bit // 8)] = 1 << (bit % 8)
        deltas.append(zlib.crc32(flipped) ^ base)

    def patterns(bits):
        out = [0] * 256
        for value in range(1, 256):
            low_bit = value & -value
            out[value] = out[value ^ low_bit] ^ bits[low_bit.bit_length() - 1]
        return out
    return patterns(deltas[:8]), patterns(deltas[8:])
