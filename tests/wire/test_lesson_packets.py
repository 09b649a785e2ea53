"""Lesson 13's packets (rdmalab.lessons.packets): the shipped capture of rxe read back as Wireshark reads it,
and the bytes on the wire counted from real packets."""
import shutil
import subprocess

import pytest

from rdmalab.lessons import packets
from rdmalab.wire import BadICRC, PcapWriter, read_pcap


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


def test_an_exchange_on_the_wire_link_is_captured_and_leaves_nothing_behind(tmp_path, monkeypatch):
    """Lesson 13's live part: two hosts on soft0's wire link under `rdmalab capture`, with and without loss."""
    from rdmalab.lessons import evidence
    from rdmalab.verbs.soft import shm
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))   # (exchange() reads it when it runs)
    before = set(shm.leftovers())
    first = packets.exchange("first", write=3000, read=100, rnr=True)
    assert first.path == str(tmp_path / "captures" / "first.pcap") and first.report["write_landed"]
    assert first.report["received"] == 64
    caught = packets.capture(first.path)
    names = [c.packet.info.name for c in caught]
    assert names[:4] == ["RC RDMA Write First", "RC RDMA Write Middle", "RC RDMA Write Last", "RC Acknowledge"]
    assert "RC RDMA Read Request" in names and "RC RDMA Read Response Only" in names
    assert any(c.packet.aeth is not None and c.packet.aeth.describe().startswith("RNR NAK") for c in caught)
    assert not packets.resent(caught[:4], "127.0.8.1")
    lossy = packets.exchange("lossy", write=64 << 10, read=0, rnr=False, loss=0.05, seed=3)
    again = packets.resent(packets.capture(lossy.path), "127.0.8.1")
    assert lossy.report["write_landed"] and again, "5% loss of 64 packets, seeded: some were sent again"
    import matplotlib
    matplotlib.use("Agg")
    ax = packets.psn_plot(packets.capture(lossy.path), "127.0.8.1")
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["sent", "sent again"]
    from .test_link import nic_processes, wait_until
    assert wait_until(lambda: not nic_processes(("127.0.8.1", "127.0.8.2")), 20), "the NICs end with their programs"
    assert set(shm.leftovers()) <= before
