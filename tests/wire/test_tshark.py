"""tshark as the judge: pcaps of every kind of packet rdmalab.wire encodes, dissected by
Wireshark's InfiniBand dissector, field by field, with no malformed packet and no expert warning.

Wireshark's RoCEv2 dissector (4.0, Debian 12's tshark) shows the ICRC (infiniband.invariant.crc)
but has no preference or expert item that verifies it: `tshark -G defaultprefs` lists only
infiniband.rroce.port and infiniband.try_heuristic_first. So the ICRC's value is checked against
tshark's reading of it, and its correctness against real rxe (test_rxe_interop.py) and a ConnectX-4
packet (test_codec.py). If the tshark at hand has a field infiniband.invariant.crc.status, the
tests check it too. tshark does verify IPv4 and UDP checksums when asked (-o ip.check_checksum:TRUE).
"""
import functools
import random
import shutil
import subprocess

import pytest

from rdmalab.wire import (
    AETH, OPCODES, RETH, Flow, Op, Packet, PcapWriter, decode_ipv4, encode_ipv4, message_opcodes,
    parse_ipv4_udp, read_pcap, segments)

from rdmalab.lessons.packets import RXE_CAPTURE   # captured by test_rxe_interop.py; lesson 13 reads it

from .test_codec import sample

pytestmark = [pytest.mark.host_only, pytest.mark.skipif(
    not shutil.which("tshark"), reason="tshark is not installed: make test installs it as root "
    "(apt-get install tshark, with wireshark-common/install-setuid preseeded to false)")]

FLOW = Flow("10.0.0.1", "10.0.0.2", sport=49153)
FIELDS = ["frame.protocols", "_ws.malformed", "_ws.expert.severity", "ip.checksum.status", "udp.checksum.status",
          "infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
          "infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a",
          "infiniband.bth.psn", "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
          "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.atomiceth.swapdt",
          "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt", "infiniband.immdt",
          "infiniband.ieth", "infiniband.deth.q_key", "infiniband.deth.srcqp", "infiniband.invariant.crc",
          "_ws.col.Info"]


@functools.lru_cache(None)
def icrc_status_field():
    out = subprocess.run(["tshark", "-G", "fields"], capture_output=True, text=True).stdout
    return "infiniband.invariant.crc.status" if "\tinfiniband.invariant.crc.status\t" in out else None


def dissect(path, *options, checksums=True):
    """One dict per frame: FIELDS -> tshark's text (first occurrence; empty when absent).
    checksums: have tshark verify IPv4 and UDP checksums (it does not by default)."""
    fields = FIELDS + ([icrc_status_field()] if icrc_status_field() else [])
    verify = ["-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"] if checksums else []
    cmd = ["tshark", "-n", "-r", str(path), *verify, *options, "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(fields, line.split("\t"))) for line in out.splitlines()]


def number(text):
    return int(text, 0)


def write(path, packets):
    frames = [encode_ipv4(p, FLOW) for p in packets]
    with PcapWriter(path) as pcap:
        for f in frames:
            pcap.write(f)
    return frames


def check(row, pkt, frame):
    """tshark's reading of one frame against the Packet it was encoded from."""
    assert row["frame.protocols"].startswith("ip:udp:infiniband"), row["frame.protocols"]
    assert row["_ws.malformed"] == "" and row["_ws.expert.severity"] == "", row
    assert row["ip.checksum.status"] == row["udp.checksum.status"] == "1", "tshark: a bad IPv4 or UDP checksum"
    assert row["_ws.col.Info"].startswith(OPCODES[pkt.opcode].name), (row["_ws.col.Info"], OPCODES[pkt.opcode].name)
    assert number(row["infiniband.bth.opcode"]) == pkt.opcode
    assert number(row["infiniband.bth.psn"]) == pkt.psn and number(row["infiniband.bth.destqp"]) == pkt.destqp
    assert number(row["infiniband.bth.padcnt"]) == pkt.padcnt and number(row["infiniband.bth.tver"]) == 0
    assert number(row["infiniband.bth.p_key"]) == pkt.p_key
    assert (row["infiniband.bth.se"], row["infiniband.bth.m"], row["infiniband.bth.a"]) == \
        tuple(str(int(flag)) for flag in (pkt.se, pkt.m, pkt.a))
    # tshark reads the ICRC as a big-endian number; NICs store the CRC little-endian
    assert number(row["infiniband.invariant.crc"]) == int.from_bytes(frame[-4:], "big")
    assert int.from_bytes(frame[-4:], "big") == int.from_bytes(pkt.encode(FLOW)[-4:], "big")
    if icrc_status_field():
        assert row[icrc_status_field()] == "1", "tshark: bad ICRC"
    if pkt.reth or pkt.atomiceth:   # tshark shows the AtomicETH's address and key as RETH fields
        h = pkt.reth or pkt.atomiceth
        assert (number(row["infiniband.reth.va"]), number(row["infiniband.reth.r_key"])) == (h.va, h.r_key)
    if pkt.reth:
        assert number(row["infiniband.reth.dmalen"]) == pkt.reth.dmalen
    if pkt.aeth:
        assert (number(row["infiniband.aeth.syndrome"]), number(row["infiniband.aeth.msn"])) == \
            (pkt.aeth.syndrome, pkt.aeth.msn)
    if pkt.atomiceth:
        assert (number(row["infiniband.atomiceth.swapdt"]), number(row["infiniband.atomiceth.cmpdt"])) == \
            (pkt.atomiceth.swapdt, pkt.atomiceth.cmpdt)
    if pkt.atomicacketh:
        assert number(row["infiniband.atomicacketh.origremdt"]) == pkt.atomicacketh.origremdt
    if pkt.immdt:
        assert int(row["infiniband.immdt"], 16) == pkt.immdt.value
    if pkt.ieth:
        assert int(row["infiniband.ieth"], 16) == pkt.ieth.r_key
    if pkt.deth:
        assert (number(row["infiniband.deth.q_key"]), number(row["infiniband.deth.srcqp"])) == \
            (pkt.deth.q_key, pkt.deth.srcqp)
    for header, field in [("reth", "infiniband.reth.dmalen"), ("aeth", "infiniband.aeth.syndrome"),
                          ("deth", "infiniband.deth.srcqp")]:
        assert (getattr(pkt, header) is None) == (row[field] == ""), f"{header}: tshark sees {row[field]!r}"


# every opcode Wireshark 4.0 knows; CNP (0x81) it prints as "Unknown OpCode", so it is not here
KNOWN = [op for op in Op if op != Op.CNP]


def test_every_opcode_is_dissected_with_the_right_fields(tmp_path):
    # Payloads of 13..19 bytes: pad counts 3..1 and 0; under 13 bytes see test_short_sends. Seeded:
    # Wireshark offers SEND payloads to heuristic dissectors, and one in some thousands of random
    # payloads looks enough like another protocol (an Ethertype, say) for one of them to claim it.
    rng = random.Random(4791)
    packets = [sample(op, rng.randbytes(13 + i % 7)).replace(psn=rng.getrandbits(24))
               for i, op in enumerate(KNOWN)]
    frames = write(tmp_path / "opcodes.pcap", packets)
    rows = dissect(tmp_path / "opcodes.pcap")
    assert len(rows) == len(packets)
    for row, pkt, frame in zip(rows, packets, frames):
        check(row, pkt, frame)
    assert {number(r["infiniband.bth.padcnt"]) for r in rows} == {0, 1, 2, 3}


def test_acks_and_every_nak(tmp_path):
    aeths = [AETH.ack(7), AETH.ack(7, credits=3), AETH.rnr_nak(8, timer=12), AETH.nak(9, 0), AETH.nak(9, 1),
             AETH.nak(9, 2), AETH.nak(9, 3)]
    packets = [Packet(Op.RC_ACKNOWLEDGE, destqp=0x11, psn=100 + i, aeth=a) for i, a in enumerate(aeths)]
    frames = write(tmp_path / "acks.pcap", packets)
    fields = ["-e", "infiniband.aeth.syndrome.opcode", "-e", "infiniband.aeth.syndrome.credit_count",
              "-e", "infiniband.aeth.syndrome.timer", "-e", "infiniband.aeth.syndrome.error_code"]
    out = subprocess.run(["tshark", "-n", "-r", tmp_path / "acks.pcap", "-T", "fields", *fields],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    # Wireshark's split of the syndrome: kind 0 ACK (credits), 1 RNR NAK (timer), 3 NAK (error code)
    assert [line.split("\t") for line in out] == [
        ["0", "31", "", ""], ["0", "3", "", ""], ["1", "", "12", ""],
        ["3", "", "", "0"], ["3", "", "", "1"], ["3", "", "", "2"], ["3", "", "", "3"]]
    for row, pkt, frame in zip(dissect(tmp_path / "acks.pcap"), packets, frames):
        check(row, pkt, frame)


def test_a_10k_write_at_mtu_1024(tmp_path):
    message = random.Random(10240).randbytes(10240)
    ops = message_opcodes("RDMA_WRITE", len(message), 1024)
    packets = [Packet(op, destqp=0x11, psn=(0xFFFFFB + i) & 0xFFFFFF, payload=message[o:o + n], a=i == 9,
                      reth=RETH(0x7F0000001000, 0xABCDE, len(message)) if i == 0 else None)
               for i, (op, (o, n)) in enumerate(zip(ops, segments(len(message), 1024)))]
    frames = write(tmp_path / "write.pcap", packets)
    rows = dissect(tmp_path / "write.pcap")
    for row, pkt, frame in zip(rows, packets, frames):
        check(row, pkt, frame)
    assert [r["_ws.col.Info"].split(" QP")[0] for r in rows] == \
        ["RC RDMA Write First"] + ["RC RDMA Write Middle"] * 8 + ["RC RDMA Write Last"]
    assert [number(r["infiniband.bth.psn"]) for r in rows] == [0xFFFFFB, 0xFFFFFC, 0xFFFFFD, 0xFFFFFE, 0xFFFFFF,
                                                                0, 1, 2, 3, 4]


def test_short_sends(tmp_path):
    """SEND payloads of 0..12 bytes. Wireshark 4.0 offers a SEND's payload to its RPC-over-RDMA
    heuristic first, which takes one under 13 bytes for its own header and reads past its end:
    '[Malformed Packet: RPCoRDMA]', in that dissector, not InfiniBand's. So it is switched off here
    (in Wireshark: Analyze > Enabled Protocols > RPCoRDMA)."""
    rng = random.Random(13)
    packets = [sample(op, rng.randbytes(n)) for n in range(13) for op in (Op.RC_SEND_ONLY, Op.RC_SEND_LAST)]
    frames = write(tmp_path / "short.pcap", packets)
    for row, pkt, frame in zip(dissect(tmp_path / "short.pcap", "--disable-protocol", "rpcordma"), packets, frames):
        check(row, pkt, frame)


def test_a_real_rxe_exchange(tmp_path):
    """The capture of test_rxe_interop.py in the Soft-RoCE guest (rxe1 10.20.0.1 <-> the codec's
    peer 10.20.0.2): every frame dissected as InfiniBand, no malformed packet, no expert item, and
    every ICRC, rxe's and the peer's, good. The peer's frames were captured on their way out, before
    the veth's checksum offload: their UDP checksums are not checked (rxe sends none)."""
    linktype, records = read_pcap(RXE_CAPTURE)
    assert linktype == 228
    rows = dissect(RXE_CAPTURE, checksums=False)
    assert len(rows) == len(records) >= 22
    seen = set()
    for row, (_, frame) in zip(rows, records):
        flow, pkt = decode_ipv4(frame, checksums=False)     # the ICRC, by this codec
        seen.add(pkt.opcode)
        assert row["frame.protocols"].startswith("ip:udp:infiniband"), row
        assert row["_ws.malformed"] == row["_ws.expert.severity"] == "", row
        assert number(row["infiniband.bth.opcode"]) == pkt.opcode and number(row["infiniband.bth.psn"]) == pkt.psn
        assert number(row["infiniband.invariant.crc"]) == int.from_bytes(frame[-4:], "big")
        assert (flow.ip_id == 0) == (flow.src == "10.20.0.2"), "the peer's UDP socket sends Identification 0"
        assert pkt.encode(flow) == parse_ipv4_udp(frame, verify=False)[3], "re-encoding gives the same bytes"
    assert {Op.RC_RDMA_WRITE_FIRST, Op.RC_RDMA_WRITE_MIDDLE, Op.RC_RDMA_WRITE_LAST, Op.RC_SEND_ONLY,
            Op.RC_ACKNOWLEDGE, Op.RC_RDMA_READ_REQUEST, Op.RC_RDMA_READ_RESPONSE_FIRST,
            Op.RC_FETCH_ADD, Op.RC_ATOMIC_ACKNOWLEDGE, Op.RC_RDMA_WRITE_ONLY} <= seen
