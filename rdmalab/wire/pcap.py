"""pcap files: the classic format tcpdump writes and Wireshark/tshark read.

We write LINKTYPE_IPV4 (228): each record is a bare IPv4 packet, no Ethernet header, since a NIC
on a UDP socket never sees one. Wireshark shows it as "Raw IPv4" and dissects IPv4, UDP and, at
port 4791, InfiniBand. LINKTYPE_RAW (101, raw IPv4 or IPv6) is read too, and Ethernet (1).

    with PcapWriter("/tmp/write.pcap") as pcap:
        pcap.write(encode_ipv4(pkt, flow))
    for ts, data in read_pcap("/tmp/write.pcap")[1]: ...
"""
import struct
import time

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_IPV4 = 228
_MAGIC_US = 0xA1B2C3D4   # microsecond timestamps
_MAGIC_NS = 0xA1B23C4D   # nanosecond timestamps
SNAPLEN = 65535


class PcapWriter:
    def __init__(self, path, linktype=LINKTYPE_IPV4):
        self.file = open(path, "wb")
        # header: magic, version 2.4, timezone 0, sigfigs 0, snapshot length, link type
        self.file.write(struct.pack("<IHHiIII", _MAGIC_US, 2, 4, 0, 0, SNAPLEN, linktype))

    def write(self, data, ts=None):
        ts = time.time() if ts is None else ts
        sec = int(ts)
        data = bytes(data)[:SNAPLEN]
        self.file.write(struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(data), len(data)) + data)

    def close(self):
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_pcap(path):
    """(linktype, [(timestamp, bytes), ...]) of a classic pcap file, either byte order."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 24:
        raise ValueError(f"{path}: {len(blob)} bytes is too short for a pcap file header (24)")
    for order in "<>":
        magic, = struct.unpack(order + "I", blob[:4])
        if magic in (_MAGIC_US, _MAGIC_NS):
            break
    else:
        raise ValueError(f"{path}: not a classic pcap file (magic {blob[:4].hex()}; pcapng is not read here)")
    scale = 1e-6 if magic == _MAGIC_US else 1e-9
    linktype, = struct.unpack_from(order + "I", blob, 20)
    records, offset = [], 24
    while offset < len(blob):
        if len(blob) - offset < 16:
            raise ValueError(f"{path}: truncated record header at offset {offset}")
        sec, frac, caplen, _ = struct.unpack_from(order + "IIII", blob, offset)
        offset += 16
        if len(blob) - offset < caplen:
            raise ValueError(f"{path}: truncated record at offset {offset}")
        records.append((sec + frac * scale, blob[offset:offset + caplen]))
        offset += caplen
    return linktype, records
