"""rdmalab.wire: headers, opcodes, packets, ICRC, segmentation, IPv4/UDP and pcap.

Pure byte-level tests; tshark's dissector judges the same packets in test_tshark.py, a real rxe
device in test_rxe_interop.py.
"""
import random
import struct
import zlib

import pytest

from rdmalab.wire import (
    AETH, BTH, DETH, IETH, NAK, OPCODES, RETH, RNR_NAK, AtomicAckETH, AtomicETH, BadICRC, Flow, ImmDt, Op,
    Packet, PcapWriter, WireError, compute_icrc, decode_ipv4, encode_ipv4, ipv4_udp, message_opcodes, packet_count,
    parse_ipv4_udp, psn_add, psn_compare, psn_diff, read_pcap, segments)
from rdmalab.wire import encap, headers

pytestmark = pytest.mark.host_only

FLOW = Flow("10.0.0.1", "10.0.0.2", sport=49153)
# an instance of every extension header, with every field away from zero
SAMPLES = {RETH: RETH(0x00007F1234567000, 0xDEADBEEF, 10240), AETH: AETH.ack(msn=0x123456),
           AtomicETH: AtomicETH(0x7F0000000008, 0x1234, 0x1111222233334444, 0x5555666677778888),
           AtomicAckETH: AtomicAckETH(0xFEDCBA9876543210), ImmDt: ImmDt(0x01020304), IETH: IETH(0xCAFE),
           DETH: DETH(0x11111111, 0xABCDEF)}


def sample(op, payload=b"0123456789"):
    info = OPCODES[op]
    kwargs = {h.__name__.lower(): SAMPLES[h] for h in info.headers}   # RETH -> reth=, ...
    return Packet(op, destqp=0xABCDEF, psn=0xFFFFFE, payload=payload if info.payload else b"", a=True,
                  se=op in (Op.RC_SEND_ONLY, Op.RC_SEND_LAST), **kwargs)


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.name)
def test_every_opcode_round_trips(op):
    for payload in (b"", b"x", b"abcd", bytes(range(256)) * 4 + b"xyz"):
        pkt = sample(op, payload)
        data = pkt.encode(FLOW)
        assert len(data) % 4 == 0, "BTH to ICRC is a whole number of 4-byte words"
        back = Packet.decode(data)
        assert back == pkt and back.icrc == icrc_of(data)
        assert back.padcnt == (-len(pkt.payload)) % 4 == (data[1] >> 4) & 3
        flow, again = decode_ipv4(encode_ipv4(pkt, FLOW))
        assert again == pkt and flow == FLOW


def icrc_of(data):
    return struct.unpack("<I", data[-4:])[0]


def test_one_line_in_wiresharks_words():
    pkt = Packet(Op.RC_RDMA_WRITE_ONLY, destqp=0x11, psn=100, reth=RETH(0x7F0000001000, 0x1234, 5), payload=b"hello")
    assert str(pkt) == "RC RDMA Write Only QP=0x000011 PSN=100 RETH va=0x00007f0000001000 r_key=0x00001234 dmalen=5 5 bytes"
    nak = Packet(Op.RC_ACKNOWLEDGE, destqp=0x11, psn=7, aeth=AETH.nak(3, 2))
    assert str(nak) == "RC Acknowledge QP=0x000011 PSN=7 NAK Remote Access Error MSN=3"


def test_opcode_table_says_which_headers():
    assert OPCODES[Op.RC_RDMA_WRITE_FIRST].headers == (RETH,)
    assert OPCODES[Op.RC_RDMA_WRITE_MIDDLE].headers == ()
    assert OPCODES[Op.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE].headers == (RETH, ImmDt)
    assert OPCODES[Op.RC_RDMA_READ_RESPONSE_MIDDLE].headers == ()
    assert OPCODES[Op.RC_RDMA_READ_RESPONSE_LAST].headers == (AETH,)
    assert OPCODES[Op.RC_ATOMIC_ACKNOWLEDGE].headers == (AETH, AtomicAckETH)
    assert OPCODES[Op.UD_SEND_ONLY_WITH_IMMEDIATE].headers == (DETH, ImmDt)
    assert OPCODES[Op.UC_RDMA_WRITE_FIRST].name == "UC RDMA Write First"
    assert not OPCODES[Op.RC_ACKNOWLEDGE].payload and not OPCODES[Op.RC_RDMA_READ_REQUEST].payload


def test_bth_fields_and_the_bits_they_take():
    bth = BTH(opcode=0x0A, destqp=0x123456, psn=0xABCDEF, se=True, m=True, padcnt=3, p_key=0x8001,
              fecn=True, becn=False, a=True)
    raw = bth.pack()
    assert raw.hex() == "0af08001" "80123456" "80abcdef"   # SE|M|pad 3|tver 0 = 0xf0; FECN, AckReq: 0x80
    assert BTH.unpack(raw) == bth
    assert BTH.unpack(BTH(0, 1, 2, becn=True).pack()).becn


def test_aeth_syndromes():
    assert AETH.ack(5).pack().hex() == "1f000005" and AETH.ack(5).kind == 0 and AETH.ack(5).value == 31
    rnr = AETH.rnr_nak(7, timer=12)
    assert rnr.syndrome == 0x2C and rnr.kind == RNR_NAK and rnr.value == 12
    for code, name in [(0, "PSN Sequence Error"), (1, "Invalid Request"), (2, "Remote Access Error"),
                       (3, "Remote Operational Error")]:
        nak = AETH.unpack(AETH.nak(9, code).pack())
        assert nak.syndrome == 0x60 | code and nak.kind == NAK and name in nak.describe()
    assert AETH.ack(1, credits=0).describe() == "ACK credits=0 MSN=1"


def test_encode_refuses_what_the_opcode_does_not_allow():
    with pytest.raises(WireError, match="RC RDMA Write First carries a RETH: give reth="):
        Packet(Op.RC_RDMA_WRITE_FIRST, 1, 1, payload=b"x").encode(FLOW)
    with pytest.raises(WireError, match="does not carry a RETH: leave out reth="):
        Packet(Op.RC_RDMA_WRITE_MIDDLE, 1, 1, payload=b"x", reth=SAMPLES[RETH]).encode(FLOW)
    with pytest.raises(WireError, match="carries no payload"):
        Packet(Op.RC_ACKNOWLEDGE, 1, 1, payload=b"x", aeth=AETH.ack(1)).encode(FLOW)
    with pytest.raises(WireError, match="PSN must be an integer in 0..16777215"):
        Packet(Op.RC_SEND_ONLY, 1, 1 << 24).encode(FLOW)
    with pytest.raises(WireError, match="unknown or unsupported BTH opcode 0x15"):
        Packet(0x15, 1, 1).encode(FLOW)
    with pytest.raises(WireError, match="not an IPv4 address"):
        Packet(Op.RC_SEND_ONLY, 1, 1).encode(Flow("host", "10.0.0.2", 1))


def test_truncated_packets_raise_wire_error_at_every_length():
    for op in Op:
        data = sample(op, b"payload!").encode(FLOW)
        shortest = 12 + sum(h.SIZE for h in OPCODES[op].headers) + 4
        for n in range(shortest):
            with pytest.raises(WireError, match="truncated"):
                Packet.decode(data[:n])


def test_malformed_packets_say_what_is_wrong():
    good = sample(Op.RC_RDMA_WRITE_ONLY, b"abc").encode(FLOW)
    bad = bytearray(good); bad[0] = 0x15
    with pytest.raises(WireError, match="opcode 0x15"):
        Packet.decode(bad)
    bad = bytearray(good); bad[1] |= 0x01
    with pytest.raises(WireError, match="header version 1"):
        Packet.decode(bad)
    ack = sample(Op.RC_ACKNOWLEDGE).encode(FLOW)
    with pytest.raises(WireError, match="carries no payload, but 4 bytes follow"):
        Packet.decode(ack[:-4] + b"junk" + ack[-4:])
    write = sample(Op.RC_RDMA_WRITE_MIDDLE, b"").encode(FLOW)
    bad = bytearray(write); bad[1] |= 0x30       # pad count 3 with no payload bytes at all
    with pytest.raises(WireError, match="pad count 3"):
        Packet.decode(bad)


def test_random_bytes_decode_or_raise_wire_error_only():
    rng = random.Random(15)
    valid = [sample(op).encode(FLOW) for op in Op]
    for i in range(20000):
        if i % 2:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(60)))
        else:   # a valid packet with a few bytes changed and maybe cut short
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.getrandbits(8)
            data = bytes(data[:rng.randrange(len(data) + 1)])
        try:
            Packet.decode(data)
        except WireError:
            pass
        for junk in (data, b"\x45" + data):
            try:
                decode_ipv4(junk)
            except WireError:
                pass


def test_icrc_of_a_connectx4_packet():
    """A CNP captured on a ConnectX-4 Lx (scapy's test suite, test/contrib/roce.uts): real hardware's
    ICRC, over an IPv4 header with TOS 0xc2 and a BECN mark, both masked."""
    frame = bytes.fromhex(
        "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161 0a0011010a001201"
        "000012b700280000 8100ffff40000118 00000000 00000000000000000000000000000000 82fd002a".replace(" ", ""))
    flow, pkt = decode_ipv4(frame[14:])
    assert pkt.opcode == Op.CNP and pkt.becn and pkt.destqp == 0x118 and pkt.icrc == 0x2A00FD82
    assert (flow.tos, flow.ip_id) == (0xC2, 0x718C)


def test_icrc_masks_exactly_the_variant_fields():
    pkt = sample(Op.RC_SEND_ONLY)
    ip = encap.ipv4_header(FLOW, 8 + len(pkt.transport()) + 4)
    udp = encap.udp_header(FLOW, pkt.transport() + bytes(4))
    body = pkt.transport()
    base = compute_icrc(ip, udp, body)
    # the variant fields: TOS, TTL, IP checksum, UDP checksum, BTH's FECN/BECN byte
    for where, i in [("ip", 1), ("ip", 8), ("ip", 10), ("ip", 11), ("udp", 6), ("udp", 7), ("body", 4)]:
        parts = {"ip": bytearray(ip), "udp": bytearray(udp), "body": bytearray(body)}
        parts[where][i] ^= 0x5A
        assert compute_icrc(bytes(parts["ip"]), bytes(parts["udp"]), bytes(parts["body"])) == base, (where, i)
    # everything else counts: IP identification and addresses, ports, lengths, BTH, payload
    for where, i in [("ip", 4), ("ip", 6), ("ip", 12), ("ip", 19), ("udp", 0), ("udp", 4), ("body", 0),
                     ("body", 5), ("body", 11), ("body", len(body) - 1)]:
        parts = {"ip": bytearray(ip), "udp": bytearray(udp), "body": bytearray(body)}
        parts[where][i] ^= 0x5A
        assert compute_icrc(bytes(parts["ip"]), bytes(parts["udp"]), bytes(parts["body"])) != base, (where, i)
    # rxe's formulation: start from 0xdebb20e3 (the register after 8 bytes of ones), no final xor, invert
    assert ~zlib.crc32(b"\xff" * 8) & 0xFFFFFFFF == 0xDEBB20E3


def test_icrc_over_ipv6_masks_traffic_class_flow_label_and_hop_limit():
    ip6 = bytes.fromhex("6" "ab" "12345" "0020" "11" "40") + bytes(range(32))
    udp, body = bytes.fromhex("c000 12b7 0020 abcd".replace(" ", "")), sample(Op.RC_SEND_ONLY, b"").transport()
    other = bytes.fromhex("6" "00" "00000" "0020" "11" "01") + bytes(range(32))
    assert compute_icrc(ip6, udp, body) == compute_icrc(other, udp, body)
    assert compute_icrc(ip6, udp, body) != compute_icrc(ip6[:8] + bytes(32), udp, body)


def test_decode_checks_the_icrc_when_told_the_flow():
    data = sample(Op.RC_SEND_ONLY, b"over a UDP socket").encode(FLOW)
    assert Packet.decode(data, FLOW) == Packet.decode(data)
    for wrong in (FLOW.reply(), Flow(FLOW.src, FLOW.dst, FLOW.sport + 1), Flow(FLOW.src, FLOW.dst, FLOW.sport, ip_id=1)):
        with pytest.raises(BadICRC, match="bad ICRC: the packet carries 0x"):
            Packet.decode(data, wrong)
    # what does not count: TTL and TOS, which routers change
    assert Packet.decode(data, Flow(FLOW.src, FLOW.dst, FLOW.sport, ttl=3, tos=0xB8)) == Packet.decode(data)
    with pytest.raises(WireError, match="reth= takes a RETH, not tuple"):
        Packet(Op.RC_RDMA_WRITE_ONLY, 1, 1, reth=(1, 2, 3)).encode(FLOW)


def test_a_damaged_packet_fails_its_icrc():
    frame = bytearray(encode_ipv4(sample(Op.RC_RDMA_WRITE_FIRST, b"data" * 64), FLOW))
    frame[-10] ^= 1
    frame[26:28] = b"\0\0"      # no UDP checksum, as rxe sends: only the ICRC can tell
    with pytest.raises(BadICRC, match="bad ICRC"):
        decode_ipv4(bytes(frame))
    assert issubclass(BadICRC, WireError)


def test_ipv4_and_udp_checksums():
    frame = ipv4_udp(FLOW, b"hello")
    assert encap.checksum(frame[:20]) == 0, "a correct IPv4 header sums to 0xffff"
    pseudo = frame[12:20] + struct.pack("!BBH", 0, 17, 13)
    assert encap.checksum(pseudo + frame[20:]) == 0
    assert parse_ipv4_udp(frame)[0] == FLOW and parse_ipv4_udp(frame)[3] == b"hello"
    with pytest.raises(WireError, match="bad IPv4 header checksum"):
        parse_ipv4_udp(frame[:10] + b"\0\0" + frame[12:])
    with pytest.raises(WireError, match="bad UDP checksum"):
        parse_ipv4_udp(frame[:-1] + b"H")
    assert FLOW.reply() == Flow("10.0.0.2", "10.0.0.1", 4791, 49153)


@pytest.mark.parametrize("mtu", [256, 512, 1024, 2048, 4096])
def test_segmentation_at_each_mtu(mtu):
    for length in (0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 10240, 65536 + 7):
        segs, n = segments(length, mtu), packet_count(length, mtu)
        assert len(segs) == n == max(1, -(-length // mtu))
        assert sum(size for _, size in segs) == length
        assert [size for _, size in segs[:-1]] == [mtu] * (n - 1) and (0 < segs[-1][1] <= mtu or length == 0)
        assert [offset for offset, _ in segs] == [i * mtu for i in range(n)]
        ops = message_opcodes("RDMA_WRITE", length, mtu)
        if n == 1:
            assert ops == [Op.RC_RDMA_WRITE_ONLY]
        else:
            assert ops == [Op.RC_RDMA_WRITE_FIRST] + [Op.RC_RDMA_WRITE_MIDDLE] * (n - 2) + [Op.RC_RDMA_WRITE_LAST]


def test_message_opcodes_for_each_kind():
    assert message_opcodes("RDMA_WRITE", 10240, 1024).count(Op.RC_RDMA_WRITE_MIDDLE) == 8
    assert message_opcodes("SEND", 2000, 1024, imm=True) == [Op.RC_SEND_FIRST, Op.RC_SEND_LAST_WITH_IMMEDIATE]
    assert message_opcodes("SEND", 10, 1024, inv=True) == [Op.RC_SEND_ONLY_WITH_INVALIDATE]
    assert message_opcodes("RDMA_WRITE", 0, 256, imm=True) == [Op.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE]
    assert message_opcodes("RDMA_READ_RESPONSE", 2500, 1024) == [
        Op.RC_RDMA_READ_RESPONSE_FIRST, Op.RC_RDMA_READ_RESPONSE_MIDDLE, Op.RC_RDMA_READ_RESPONSE_LAST]
    assert message_opcodes("SEND", 3000, 1024, transport="UC")[0] == Op.UC_SEND_FIRST
    assert message_opcodes("SEND", 100, 1024, transport="UD") == [Op.UD_SEND_ONLY]
    with pytest.raises(WireError, match="not an InfiniBand MTU: use one of 256, 512, 1024, 2048, 4096"):
        segments(100, 1500)
    with pytest.raises(WireError, match="UD carries only SENDs of one packet"):
        message_opcodes("SEND", 5000, 1024, transport="UD")
    with pytest.raises(WireError, match="RC only"):
        message_opcodes("RDMA_READ_RESPONSE", 10, 1024, transport="UC")
    with pytest.raises(WireError, match="unknown message kind"):
        message_opcodes("READ", 10, 1024)


def test_psn_arithmetic_wraps_at_2_to_the_24():
    top = (1 << 24) - 1
    assert psn_add(top, 1) == 0 and psn_add(top - 4, 15) == 10
    assert psn_diff(10, top - 4) == 15 and psn_diff(top - 4, 10) == -15
    assert psn_compare(10, top - 4) == 1 and psn_compare(top - 4, 10) == -1 and psn_compare(7, 7) == 0
    # the window: 2**23 - 1 ahead is ahead, 2**23 ahead reads as behind (rxe's (s32)(diff << 8))
    assert psn_compare(psn_add(5, (1 << 23) - 1), 5) == 1 and psn_compare(psn_add(5, 1 << 23), 5) == -1
    for _ in range(1000):
        a, b = random.getrandbits(24), random.getrandbits(24)
        rxe = ((((a - b) & 0xFFFFFFFF) << 8) & 0xFFFFFFFF)
        rxe = rxe - (1 << 32) if rxe >> 31 else rxe
        assert psn_compare(a, b) == (rxe > 0) - (rxe < 0)


def test_pcap_round_trip(tmp_path):
    path = tmp_path / "x.pcap"
    frames = [encode_ipv4(sample(op), FLOW) for op in Op]
    with PcapWriter(path) as pcap:
        for i, frame in enumerate(frames):
            pcap.write(frame, ts=1000.25 + i)
    linktype, records = read_pcap(path)
    assert linktype == 228 and [data for _, data in records] == frames
    assert records[1][0] == pytest.approx(1001.25)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated record"):
        read_pcap(path)


def test_header_field_ranges_are_checked():
    with pytest.raises(WireError, match="RETH r_key must be an integer in 0..4294967295"):
        RETH(0, 1 << 32, 0).pack()
    with pytest.raises(WireError, match="RNR NAK timer"):
        AETH.rnr_nak(1, 32)
    with pytest.raises(WireError, match="truncated packet: AtomicETH needs 28 bytes"):
        AtomicETH.unpack(bytes(27))
    assert headers.NAK_NAMES[2] == "Remote Access Error"


def test_encode_fast_gives_the_bytes_packet_encode_gives():
    from rdmalab.wire.packet import encode_fast
    from rdmalab.wire.headers import IETH
    flow = Flow("127.0.0.1", "127.0.0.2", sport=4791)
    rng = random.Random(15)
    for _ in range(300):
        op = rng.choice([Op.RC_SEND_FIRST, Op.RC_SEND_MIDDLE, Op.RC_SEND_LAST, Op.RC_SEND_ONLY,
                         Op.RC_SEND_LAST_WITH_IMMEDIATE, Op.RC_SEND_ONLY_WITH_INVALIDATE, Op.RC_RDMA_WRITE_FIRST,
                         Op.RC_RDMA_WRITE_MIDDLE, Op.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Op.RC_RDMA_WRITE_LAST])
        payload = rng.randbytes(rng.randrange(0, 1030))
        fields = {}
        if op in (Op.RC_RDMA_WRITE_FIRST, Op.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE):
            fields["reth"] = RETH(rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32))
        if op in (Op.RC_SEND_LAST_WITH_IMMEDIATE, Op.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE):
            fields["immdt"] = ImmDt(rng.getrandbits(32))
        if op == Op.RC_SEND_ONLY_WITH_INVALIDATE:
            fields["ieth"] = IETH(rng.getrandbits(32))
        pkt = Packet(op, rng.getrandbits(24), rng.getrandbits(24), payload=payload, a=rng.random() < 0.5,
                     se=rng.random() < 0.5, **fields)
        headers = b"".join(h.pack() for h in pkt.headers())
        assert encode_fast(flow, op, pkt.destqp, pkt.psn, payload, headers, pkt.a, pkt.se) == pkt.encode(flow)


def test_the_nics_fast_ack_is_the_ack_packet_encode_gives():
    from rdmalab.verbs.soft.link.transport import Responder

    class Conn:
        dest_qpn, flow = 0x123, Flow("127.0.0.1", "127.0.0.2", sport=4791)

    class NIC:
        def send(self, pkt, conn):
            self.datagram = pkt.encode(conn.flow)

    responder, nic = Responder(Conn()), NIC()
    for msn, psn in ((0, 0), (0xABCDE, 77), (0xFFFFFF, 0xFFFFFF)):
        responder.msn = msn
        responder.ack(nic, psn)
        assert nic.datagram == Packet(Op.RC_ACKNOWLEDGE, 0x123, psn, aeth=AETH.ack(msn)).encode(Conn.flow)



def test_the_ipv4_identification_a_udp_socket_hides_is_found_from_the_icrc():
    from rdmalab.wire.icrc import ip_id_for
    from rdmalab.wire.packet import _flow_headers
    rng = random.Random(17)
    for ip_id in [0, 1, 255, 256, 0x1234, 0xFFFF] + [rng.getrandbits(16) for _ in range(20)]:
        sent = Flow("10.20.0.1", "10.20.0.2", sport=rng.randrange(49152, 65536), ip_id=ip_id)
        pkt = Packet(Op.RC_RDMA_WRITE_ONLY, 0x123, 5, reth=RETH(1, 2, 3), payload=rng.randbytes(rng.randrange(200)))
        data = pkt.encode(sent)
        seen = Flow(sent.src, sent.dst, sport=sent.sport)   # what a UDP socket shows: no Identification
        assert ip_id_for(data, *_flow_headers(seen, len(data))) == ip_id
        damaged = data[:14] + bytes([data[14] ^ 0x40]) + data[15:]
        found = ip_id_for(damaged, *_flow_headers(seen, len(damaged)))
        assert found is None or found != ip_id   # (a damaged packet may match another Identification, rarely)


def test_a_trains_packets_carry_the_icrc_of_the_identification_the_kernel_gives_each():
    # the kernel sends a train (UDP segmentation) from one header with Identification 0 and numbers the
    # segments 0, 1, 2...: packet k must carry the ICRC for Identification k, or rxe drops it
    import dataclasses
    from rdmalab.verbs.soft.link.nic import icrc_for_identification
    flow = Flow("10.20.0.2", "10.20.0.1", 4791)
    train = [Packet(Op.RC_RDMA_WRITE_MIDDLE, 0x11, 40 + k, payload=bytes([k]) * 1024) for k in range(15)]
    for k, pkt in enumerate(train):
        alone = pkt.encode(flow)
        sent = alone[:-4] + icrc_for_identification(alone, k)
        assert sent == pkt.encode(dataclasses.replace(flow, ip_id=k))
        assert Packet.decode(sent, dataclasses.replace(flow, ip_id=k)) == pkt
        if k:
            with pytest.raises(BadICRC):
                Packet.decode(sent, flow)
