"""The NIC process sends a run of equal datagrams to one host as one train (Linux's UDP segmentation
offload, UDP_SEGMENT) and takes trains in (UDP_GRO): fewer system calls, the same packets on the wire
but for their ICRC, which must count the IPv4 Identification the kernel gives each packet of a train
(0, 1, 2...: nic.icrc_for_identification). Checked with real sockets: what arrives is every datagram, whole, in order,
whether the kernel cuts the train or the NIC falls back to one datagram at a time."""
import errno
import select
import socket
import time

import pytest

from rdmalab import verbs as v
from rdmalab.verbs.soft.link import nic as nicmod

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="the udp link belongs to the emulated NIC, soft0")
HOST, PEER = "127.0.19.1", "127.0.19.2"


@pytest.fixture
def nic():
    doorbell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    n = nicmod.NIC(HOST, doorbell, environ={})
    yield n
    n.close()


@pytest.fixture
def peer():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((PEER, nicmod.PORT))
    s.settimeout(2)
    yield s
    s.close()


def datagrams(count, size, last=None):
    out = [bytes([i]) * size for i in range(count)]
    if last is not None:
        out.append(b"\xee" * last)
    return out


def received(sock, count):
    return [sock.recv(1 << 16) for _ in range(count)]


def test_trains_group_one_destination_and_one_length_the_last_shorter():
    out = [(d, PEER) for d in datagrams(5, 100, last=40)] + [(b"x" * 100, "127.0.19.3")] + \
          [(d, PEER) for d in datagrams(3, 100)]
    ends, start = [], 0
    while start < len(out):
        start = nicmod.NIC.train_end(out, start)
        ends.append(start)
    assert ends == [6, 7, 10]   # 5 of 100 and their shorter last; another host; 3 more
    big = [(d, PEER) for d in datagrams(100, 4158)]
    assert nicmod.NIC.train_end(big, 0) == nicmod.TRAIN_BYTES // 4158   # at most 64 KB a train


def test_a_train_arrives_as_its_datagrams_in_order(nic, peer):
    sent = datagrams(15, 4158, last=1000)
    nic.put_on_wire([(d, PEER) for d in sent])
    nic.flush()
    got = received(peer, len(sent))
    assert got == [(d[:-4] + nicmod.icrc_for_identification(d, k) if k else d) for k, d in enumerate(sent)]   # one train: packet k is Identification k
    assert got[0] == sent[0] and all(a[:-4] == b[:-4] and a[-4:] != b[-4:] for a, b in zip(got[1:], sent[1:]))
    assert nic.counters["send_err"] == 0


def test_without_segmentation_offload_it_sends_one_datagram_at_a_time(nic, peer, monkeypatch):
    class NoGSO:   # a kernel that refuses UDP_SEGMENT
        def __init__(self, sock):
            self.sock = sock

        def sendmsg(self, *args):
            raise OSError(errno.EINVAL, "Invalid argument")

        def __getattr__(self, name):
            return getattr(self.sock, name)

    monkeypatch.setattr(nic, "udp", NoGSO(nic.udp))
    sent = datagrams(6, 500)
    nic.put_on_wire([(d, PEER) for d in sent])
    nic.flush()
    assert received(peer, len(sent)) == sent
    assert nic.gso is False and nic.counters["send_err"] == 0


def test_the_nic_takes_a_train_as_separate_packets(nic, monkeypatch):
    got = []
    monkeypatch.setattr(nic, "receive", lambda data, src, sport, k: got.append((bytes(data), src, k)))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind((PEER, 0))
    sent = datagrams(8, 1078, last=300)
    sender.sendmsg(sent, [(socket.IPPROTO_UDP, nicmod.UDP_SEGMENT, nicmod.SEGMENT_SIZE.pack(1078))], 0,
                   (HOST, nicmod.PORT))
    sender.close()
    assert nic.gro, "Linux's UDP_GRO was refused"
    deadline = time.monotonic() + 5
    while len(got) < len(sent) and time.monotonic() < deadline:
        select.select([nic.udp], [], [], 0.5)
        nic.take_packets()
    assert [d for d, _, _ in got] == sent and {src for _, src, _ in got} == {PEER}
    assert [k for _, _, k in got] == list(range(len(sent)))   # the Identification each most likely had
