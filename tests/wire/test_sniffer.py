"""What soft0's NICs record of the wire link (`rdmalab capture`) against what a sniffer sees: dumpcap, Wireshark's
capture engine, on the loopback interface the link's UDP datagrams cross (lesson 13 shows the sentence)."""
import os
import shutil

import pytest

from rdmalab.lessons import packets

pytestmark = pytest.mark.host_only   # (the guest's rxe holds port 4791: there the exchange runs in a namespace)


@pytest.mark.skipif(not shutil.which("dumpcap") or os.geteuid() != 0,
                    reason="needs dumpcap (make test installs tshark as root) and root to capture on the loopback")
def test_a_sniffer_on_the_loopback_sees_every_recorded_packet_byte_for_byte(tmp_path, monkeypatch):
    monkeypatch.setattr("rdmalab.lessons.evidence.LEARNER_DIR", str(tmp_path))
    ex = packets.exchange("sniffed", write=4096, read=512, rnr=False, sniff=True)
    said = packets.sniffed(ex)
    recorded = len(packets._udp_payloads(ex.path))
    assert ex.sniffed and recorded >= 5, said   # a WRITE of 4 packets and its ACK, a READ and its response
    assert said == (f"soft0's NICs recorded {recorded} packets; dumpcap on the loopback interface saw {recorded}, "
                    f"{recorded} of them the same as recorded, byte for byte from the BTH to the ICRC.")


def test_without_dumpcap_the_exchange_runs_and_says_why_nothing_sniffed(tmp_path, monkeypatch):
    monkeypatch.setattr("rdmalab.lessons.evidence.LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(packets.shutil, "which", lambda name: None if name == "dumpcap" else shutil.which(name))
    ex = packets.exchange("unsniffed", write=4096, read=0, rnr=False, sniff=True)
    assert ex.sniffed is None and ex.report["write_landed"]
    assert packets.sniffed(ex).endswith("no sniffer ran: no dumpcap here (Debian and Ubuntu: apt-get install tshark).")


def fake_dumpcap(tmp_path, monkeypatch, script):
    """A dumpcap that runs `script` (sh) where the lessons look for dumpcap."""
    fake = tmp_path / "dumpcap"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(packets.shutil, "which", lambda name: str(fake) if name == "dumpcap" else shutil.which(name))


def test_a_dumpcap_that_says_nothing_is_ended_and_named_instead_of_waited_for(tmp_path, monkeypatch):
    fake_dumpcap(tmp_path, monkeypatch, "exec sleep 600")
    sniffer = packets.Sniffer(str(tmp_path / "x.pcap"), wait_s=0.5)
    assert sniffer.proc is None and "it said nothing" in sniffer.why_not and sniffer.stop() is None


def test_a_dumpcap_that_says_two_lines_at_once_is_heard_capturing(tmp_path, monkeypatch):
    """dumpcap may write a warning and "Capturing on" in one write: both are read, none waits in a buffer."""
    fake_dumpcap(tmp_path, monkeypatch, "printf 'a warning\\nCapturing on Loopback: lo\\n' >&2\nexec sleep 600")
    sniffer = packets.Sniffer(str(tmp_path / "x.pcap"), wait_s=30)
    try:
        assert sniffer.why_not is None and sniffer.proc is not None and sniffer.proc.poll() is None
    finally:
        sniffer.stop()
