"""Lesson 08's packets (rdmalab.lessons.packets): the shipped capture of rxe read back as Wireshark reads it,
and the bytes on the wire counted from real packets."""
import shutil
import subprocess

import pytest

from rdmalab.lessons import packets
from rdmalab.verbs.soft.wire import BadICRC, PcapWriter, read_pcap


def test_the_capture_of_rxe_decodes_packet_by_packet_with_every_icrc_checked():
    caught = packets.capture()
    assert len(caught) == 25 and [c.number for c in caught] == list(range(1, 26))
    assert {c.flow.src for c in caught} == {"10.20.0.1", "10.20.0.2"}
    assert [c.packet.info.name for c in caught[:11]] == \
        ["RC RDMA Write First"] + ["RC RDMA Write Middle"] * 8 + ["RC RDMA Write Last", "RC Acknowledge"]
    assert caught[0].time == 0 and all(a.time <= b.time for a, b in zip(caught, caught[1:]))


def test_a_capture_with_a_corrupted_packet_is_refused_naming_the_icrc(tmp_path):
    _, records = read_pcap(packets.RXE_CAPTURE)
    bad = tmp_path / "bad.pcap"
    with PcapWriter(str(bad)) as pcap:
        for i, (ts, frame) in enumerate(records):
            if i == 3:
                frame = frame[:100] + bytes([frame[100] ^ 1]) + frame[101:]   # one payload bit flipped
            pcap.write(frame, ts)
    with pytest.raises(BadICRC, match="ICRC"):
        packets.capture(str(bad))


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed (make test installs it as root)")
def test_the_table_says_what_wireshark_says():
    info = subprocess.run(["tshark", "-r", packets.RXE_CAPTURE, "-d", "udp.port==4791,infiniband", "-T", "fields",
                           "-e", "_ws.col.Info", "-e", "frame.len"], capture_output=True, text=True, check=True).stdout
    theirs = [line.split("\t") for line in info.strip().splitlines()]
    ours = packets.table(packets.capture()).rows
    assert len(ours) == len(theirs) == 25
    for row, (their_info, their_len) in zip(ours, theirs):
        head, _, note = their_info.strip().partition(" [")   # "RC Acknowledge QP=0x000123 [Remote Access Error]"
        assert row[5].startswith(head) and note.rstrip("]") in row[5] and row[4] == int(their_len)


def test_fields_name_what_each_header_holds():
    caught = packets.capture()
    write = {(h, f): v for h, f, v in packets.fields(caught[0].packet).rows}
    assert write["RETH", "DMA length"] == 10240 and write["RETH", "remote key"] == "0x000abcde"
    assert write["BTH", "opcode"].startswith("0x06") and write["BTH", "AckReq"] == 0
    nak = {(h, f): v for h, f, v in packets.fields(caught[24].packet).rows}
    assert "Remote Access Error" in nak["AETH", "syndrome"]
    assert "RETH va=" in str(packets.table(caught[:1])) and "<table>" in packets.table(caught[:1])._repr_html_()


def test_bytes_on_the_wire_are_those_of_the_real_packets():
    caught = packets.capture()
    # the 10 KiB WRITE rxe sent at MTU 1024: our count of its IP packets is the capture's, byte for byte
    assert packets.on_the_wire("RDMA_WRITE", 10240, 1024, ethernet=False) == (10, sum(c.length for c in caught[:10]))
    # the READ's responses: 2500 bytes in three packets, the first and last with an AETH
    assert packets.on_the_wire("RDMA_READ_RESPONSE", 2500, 1024, ethernet=False) == (3, sum(c.length for c in caught[18:21]))
    count, wire = packets.on_the_wire("RDMA_WRITE", 1 << 20, 4096)
    assert count == 256 and wire == (1 << 20) + 256 * (14 + 20 + 8 + 12 + 4 + 4) + 16   # headers, one RETH


def test_the_ladder_draws_an_arrow_a_packet():
    import matplotlib
    matplotlib.use("Agg")
    ax = packets.ladder(packets.capture())
    labels = [t.get_text() for t in ax.texts if "PSN" in t.get_text()]
    assert len(labels) == 25 and "NAK Remote Access Error" in labels[24] and "Fetch Add" in labels[21]
