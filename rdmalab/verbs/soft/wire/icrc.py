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
    udp = udp_header[:6] + b"\xff\xff"                       # UDP checksum
    bth = transport[:4] + b"\xff" + transport[5:12]          # FECN, BECN, reserved
    crc = zlib.crc32(_LRH_STANDIN)
    for part in (_masked_ip(ip_header), udp, bth, transport[12:]):
        crc = zlib.crc32(part, crc)
    return crc


def icrc_bytes(value):
    """The 4 bytes that end the packet: the CRC in little-endian order, as rxe and NICs send it."""
    return struct.pack("<I", value)


def icrc_of_trailer(udp_payload):
    """The ICRC a packet carries in its last 4 bytes."""
    if len(udp_payload) < ICRC_SIZE:
        raise WireError(f"truncated packet: {len(udp_payload)} bytes cannot end with a 4-byte ICRC")
    return struct.unpack("<I", udp_payload[-ICRC_SIZE:])[0]
