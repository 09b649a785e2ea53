"""The InfiniBand transport headers that RoCEv2 carries in a UDP datagram, byte for byte.

A RoCEv2 packet is IPv4 (or IPv6) + UDP (destination port 4791) + the InfiniBand transport layer:

    BTH (12 bytes) | extension headers, as the opcode says | payload | pad (0-3) | ICRC (4)

Each header here is a small frozen dataclass with `pack()` (to bytes) and `unpack(buf, offset)`
(from bytes). The field names are Wireshark's, so a learner can put `print(pkt)` next to a
capture and read the same words. All multi-byte fields are big-endian ("network order"), as the
InfiniBand spec defines them; only the ICRC is stored the other way round (see icrc.py).

What goes wrong on the wire (a short packet, an unknown opcode, a field out of range) raises
WireError and nothing else, so a NIC can count it and drop the packet.
"""
import struct
import sys
from dataclasses import dataclass

from .psn import MASK24   # QPNs, PSNs and MSNs are 24-bit numbers


class WireError(ValueError):
    """A packet that cannot be encoded or decoded: says what is wrong with it."""


def _need(buf, offset, size, what):
    # one check for every header: a truncated packet is the commonest malformed input
    if len(buf) - offset < size:
        raise WireError(f"truncated packet: {what} needs {size} bytes at offset {offset}, "
                        f"only {max(len(buf) - offset, 0)} left")


def _check(value, bits, what):
    if not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise WireError(f"{what} must be an integer in 0..{(1 << bits) - 1}, not {value!r}")
    return value


@dataclass(frozen=True)
class BTH:
    """Base Transport Header, in every packet (12 bytes).

    byte 0   opcode: transport (RC 0x00, UC 0x20, UD 0x60) + operation (see opcodes.py)
    byte 1   se (solicited event) | m (MigReq) | padcnt (2 bits) | tver (4 bits, always 0)
    2-3      p_key, the partition (0xffff, the default partition, on RoCE)
    4        fecn | becn | 6 reserved bits: congestion marks a switch may set on the way,
             so the ICRC leaves this byte out
    5-7      destqp, the receiving queue pair's number
    8        a (AckReq: "answer this packet with an ACK") | 7 reserved bits
    9-11     psn, the packet sequence number, 24 bits, wrapping
    """
    opcode: int
    destqp: int
    psn: int
    se: bool = False
    m: bool = False
    padcnt: int = 0
    tver: int = 0
    p_key: int = 0xFFFF
    fecn: bool = False
    becn: bool = False
    a: bool = False
    SIZE = 12

    def pack(self):
        _check(self.opcode, 8, "BTH opcode"); _check(self.padcnt, 2, "BTH pad count")
        _check(self.tver, 4, "BTH tver"); _check(self.p_key, 16, "BTH p_key")
        _check(self.destqp, 24, "BTH destination QP"); _check(self.psn, 24, "BTH PSN")
        flags = self.se << 7 | self.m << 6 | self.padcnt << 4 | self.tver
        return struct.pack("!BBHII", self.opcode, flags, self.p_key,
                           self.fecn << 31 | self.becn << 30 | self.destqp, self.a << 31 | self.psn)

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "BTH")
        opcode, flags, p_key, word1, word2 = struct.unpack_from("!BBHII", buf, offset)
        return cls(opcode=opcode, destqp=word1 & MASK24, psn=word2 & MASK24,
                   se=bool(flags & 0x80), m=bool(flags & 0x40), padcnt=(flags >> 4) & 3,
                   tver=flags & 0xF, p_key=p_key, fecn=bool(word1 >> 31), becn=bool(word1 >> 30 & 1),
                   a=bool(word2 >> 31))


@dataclass(frozen=True)
class RETH:
    """RDMA Extended Transport Header (16 bytes): where in the target's memory, under which key,
    and how many bytes in all. Only the first (or only) packet of a WRITE carries it, and the READ
    request: the later packets of a WRITE land after the previous ones."""
    va: int
    r_key: int
    dmalen: int
    SIZE = 16

    def describe(self):
        return f"RETH va=0x{self.va:016x} r_key=0x{self.r_key:08x} dmalen={self.dmalen}"

    def pack(self):
        _check(self.va, 64, "RETH va"); _check(self.r_key, 32, "RETH r_key")
        _check(self.dmalen, 32, "RETH dmalen")
        return struct.pack("!QII", self.va, self.r_key, self.dmalen)

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "RETH")
        return cls(*struct.unpack_from("!QII", buf, offset))


# AETH syndrome, bits 6-5: what kind of answer this is
ACK, RNR_NAK, NAK = 0, 1, 3
# bits 4-0 of a NAK's syndrome: why the responder refused
NAK_PSN_SEQUENCE_ERROR = 0        # a PSN later than expected: a packet was lost, go back
NAK_INVALID_REQUEST = 1           # an opcode or access the QP does not allow
NAK_REMOTE_ACCESS_ERROR = 2       # bad rkey, out of the MR's bounds, MR without the access
NAK_REMOTE_OPERATIONAL_ERROR = 3  # the responder could not carry out a valid request
NAK_INVALID_RD_REQUEST = 4
NAK_NAMES = {0: "PSN Sequence Error", 1: "Invalid Request", 2: "Remote Access Error",
             3: "Remote Operational Error", 4: "Invalid RD Request"}
CREDITS_INVALID = 0x1F            # an ACK's credit count "not given" (rxe always sends this)


@dataclass(frozen=True)
class AETH:
    """ACK Extended Transport Header (4 bytes), in every ACK, NAK and READ response.

    syndrome (8 bits): 0 | kind (2 bits: 0 ACK, 1 RNR NAK, 3 NAK) | value (5 bits: an ACK's credit
    count, an RNR NAK's timer, a NAK's error code); msn (24 bits): how many messages the responder
    has completed, so the requester knows which work requests are done."""
    syndrome: int
    msn: int
    SIZE = 4

    @classmethod
    def ack(cls, msn, credits=CREDITS_INVALID):
        return cls(ACK << 5 | _check(credits, 5, "ACK credit count"), msn)

    @classmethod
    def rnr_nak(cls, msn, timer):
        """An RNR NAK: "no receive posted, try again after `timer`" (the 5-bit min_rnr_timer code)."""
        return cls(RNR_NAK << 5 | _check(timer, 5, "RNR NAK timer"), msn)

    @classmethod
    def nak(cls, msn, code):
        return cls(NAK << 5 | _check(code, 5, "NAK code"), msn)

    @property
    def kind(self):
        return (self.syndrome >> 5) & 3

    @property
    def value(self):
        """The credit count (ACK), timer (RNR NAK) or error code (NAK)."""
        return self.syndrome & 0x1F

    def describe(self):
        kind, value = self.kind, self.value
        if kind == ACK:
            return f"ACK credits={value} MSN={self.msn}"
        if kind == RNR_NAK:
            return f"RNR NAK timer={value} MSN={self.msn}"
        if kind == NAK:
            return f"NAK {NAK_NAMES.get(value, f'code {value}')} MSN={self.msn}"
        return f"reserved syndrome 0x{self.syndrome:02x}"

    def pack(self):
        _check(self.syndrome, 8, "AETH syndrome"); _check(self.msn, 24, "AETH MSN")
        return struct.pack("!I", self.syndrome << 24 | self.msn)

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "AETH")
        word, = struct.unpack_from("!I", buf, offset)
        return cls(word >> 24, word & MASK24)


@dataclass(frozen=True)
class AtomicETH:
    """Atomic Extended Transport Header (28 bytes): the 8-byte word to operate on (va, r_key) and
    the operands: compare-and-swap uses both, fetch-and-add only swapdt (the number to add)."""
    va: int
    r_key: int
    swapdt: int
    cmpdt: int = 0
    SIZE = 28

    def describe(self):
        return (f"AtomicETH va=0x{self.va:016x} r_key=0x{self.r_key:08x} swapdt={self.swapdt} "
                f"cmpdt={self.cmpdt}")

    def pack(self):
        _check(self.va, 64, "AtomicETH va"); _check(self.r_key, 32, "AtomicETH r_key")
        _check(self.swapdt, 64, "AtomicETH swap/add data"); _check(self.cmpdt, 64, "AtomicETH compare data")
        return struct.pack("!QIQQ", self.va, self.r_key, self.swapdt, self.cmpdt)

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "AtomicETH")
        return cls(*struct.unpack_from("!QIQQ", buf, offset))


@dataclass(frozen=True)
class AtomicAckETH:
    """Atomic ACK Extended Transport Header (8 bytes): the word's value before the atomic."""
    origremdt: int
    SIZE = 8

    def describe(self):
        return f"AtomicAckETH origremdt={self.origremdt}"

    def pack(self):
        return struct.pack("!Q", _check(self.origremdt, 64, "AtomicAckETH original data"))

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "AtomicAckETH")
        return cls(*struct.unpack_from("!Q", buf, offset))


@dataclass(frozen=True)
class ImmDt:
    """Immediate data (4 bytes), handed to the receiver's work completion as imm_data. `value` reads
    the 4 bytes as sent, most significant first (as tshark shows them). A work request's imm_data is
    not that number: ibv_send_wr's imm_data is a __be32 that pyverbs fills with the int as given, and
    the NIC sends its 4 bytes as they lie in memory; the receiver's completion gives them back the
    same way. So on x86 imm_data=0x0A0B0C0D goes on the wire as 0D 0C 0B 0A (of_imm_data, .imm_data)."""
    value: int
    SIZE = 4

    @classmethod
    def of_imm_data(cls, imm_data):
        """The ImmDt a work request's imm_data puts on the wire."""
        return cls(int.from_bytes(imm_data.to_bytes(4, sys.byteorder), "big"))

    @property
    def imm_data(self):
        """What the receiver's work completion shows as imm_data."""
        return int.from_bytes(self.value.to_bytes(4, "big"), sys.byteorder)

    def describe(self):
        return f"ImmDt 0x{self.value:08x}"

    def pack(self):
        return struct.pack("!I", _check(self.value, 32, "immediate data"))

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "ImmDt")
        return cls(*struct.unpack_from("!I", buf, offset))


@dataclass(frozen=True)
class IETH:
    """Invalidate Extended Transport Header (4 bytes): the rkey a SEND_WITH_INV invalidates."""
    r_key: int
    SIZE = 4

    def describe(self):
        return f"IETH r_key=0x{self.r_key:08x}"

    def pack(self):
        return struct.pack("!I", _check(self.r_key, 32, "IETH r_key"))

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "IETH")
        return cls(*struct.unpack_from("!I", buf, offset))


@dataclass(frozen=True)
class DETH:
    """Datagram Extended Transport Header (8 bytes), in UD packets: the Q_Key the receiving QP must
    hold, and the sender's QP number (UD has no connection to say who sent it)."""
    q_key: int
    srcqp: int
    SIZE = 8

    def describe(self):
        return f"DETH q_key=0x{self.q_key:08x} srcqp=0x{self.srcqp:06x}"

    def pack(self):
        _check(self.q_key, 32, "DETH q_key"); _check(self.srcqp, 24, "DETH source QP")
        return struct.pack("!II", self.q_key, self.srcqp)

    @classmethod
    def unpack(cls, buf, offset=0):
        _need(buf, offset, cls.SIZE, "DETH")
        q_key, word = struct.unpack_from("!II", buf, offset)
        return cls(q_key, word & MASK24)
