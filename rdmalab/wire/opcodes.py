"""The BTH opcode: which transport, which operation, and so which headers follow the BTH.

The top 3 bits say the transport (RC reliable connected 0x00, UC unreliable connected 0x20,
UD unreliable datagram 0x60); the low 5 bits the operation. A message longer than the path MTU
goes out as FIRST, MIDDLE..., LAST packets; one that fits as ONLY. Only the first packet of a
WRITE carries the RETH (the others land right after it), only the last one of a SEND or WRITE
carries the immediate data, and every READ response but the middle ones carries an AETH.

OPCODES maps each opcode to an Opcode: its name as Wireshark prints it, the extension headers it
carries in order, and whether it carries a payload.
"""
from dataclasses import dataclass
from enum import IntEnum

from .headers import AETH, DETH, IETH, RETH, AtomicAckETH, AtomicETH, ImmDt, WireError


class Op(IntEnum):
    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03
    RC_SEND_ONLY = 0x04
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RC_RDMA_READ_REQUEST = 0x0C
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RC_RDMA_READ_RESPONSE_LAST = 0x0F
    RC_RDMA_READ_RESPONSE_ONLY = 0x10
    RC_ACKNOWLEDGE = 0x11
    RC_ATOMIC_ACKNOWLEDGE = 0x12
    RC_COMPARE_SWAP = 0x13
    RC_FETCH_ADD = 0x14
    RC_SEND_LAST_WITH_INVALIDATE = 0x16
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17
    UC_SEND_FIRST = 0x20
    UC_SEND_MIDDLE = 0x21
    UC_SEND_LAST = 0x22
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23
    UC_SEND_ONLY = 0x24
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25
    UC_RDMA_WRITE_FIRST = 0x26
    UC_RDMA_WRITE_MIDDLE = 0x27
    UC_RDMA_WRITE_LAST = 0x28
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29
    UC_RDMA_WRITE_ONLY = 0x2A
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B
    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65
    # RoCEv2's Congestion Notification Packet: a receiver that saw ECN marks tells the sender to
    # slow down. No transport payload, 16 reserved bytes (real NICs send it; rxe does not).
    CNP = 0x81


@dataclass(frozen=True)
class Opcode:
    op: Op
    name: str            # as Wireshark prints it in the Info column
    headers: tuple       # extension header classes after the BTH, in wire order
    payload: bool        # carries data (a SEND's message, a WRITE's or a READ response's bytes)

    def has(self, header):
        return header in self.headers


# The operation part (low 5 bits) -> (Wireshark's words, extension headers, payload?).
_OPERATIONS = {
    0x00: ("Send First", (), True),
    0x01: ("Send Middle", (), True),
    0x02: ("Send Last", (), True),
    0x03: ("Send Last Immediate", (ImmDt,), True),
    0x04: ("Send Only", (), True),
    0x05: ("Send Only Immediate", (ImmDt,), True),
    0x06: ("RDMA Write First", (RETH,), True),
    0x07: ("RDMA Write Middle", (), True),
    0x08: ("RDMA Write Last", (), True),
    0x09: ("RDMA Write Last Immediate", (ImmDt,), True),
    0x0A: ("RDMA Write Only", (RETH,), True),
    0x0B: ("RDMA Write Only Immediate", (RETH, ImmDt), True),
    0x0C: ("RDMA Read Request", (RETH,), False),
    0x0D: ("RDMA Read Response First", (AETH,), True),
    0x0E: ("RDMA Read Response Middle", (), True),
    0x0F: ("RDMA Read Response Last", (AETH,), True),
    0x10: ("RDMA Read Response Only", (AETH,), True),
    0x11: ("Acknowledge", (AETH,), False),
    0x12: ("Atomic Acknowledge", (AETH, AtomicAckETH), False),
    0x13: ("Compare Swap", (AtomicETH,), False),
    0x14: ("Fetch Add", (AtomicETH,), False),
    0x16: ("Send Last Invalidate", (IETH,), True),
    0x17: ("Send Only Invalidate", (IETH,), True),
}


def _entry(op):
    if op == Op.CNP:
        return Opcode(op, "CNP", (), True)   # its 16 reserved bytes read as payload
    transport, (words, headers, payload) = op >> 5, _OPERATIONS[op & 0x1F]
    if transport == 3:   # UD: every packet says who sent it and under which Q_Key
        return Opcode(op, f"UD {words}", (DETH,) + headers, payload)
    return Opcode(op, f"{('RC', 'UC')[transport]} {words}", headers, payload)


OPCODES = {op.value: _entry(op) for op in Op}


def opcode(value):
    """The table entry of an opcode number; unknown numbers are malformed packets."""
    try:
        return OPCODES[value]
    except KeyError:
        raise WireError(f"unknown or unsupported BTH opcode 0x{value:02x}: known are RC "
                        "0x00-0x14, 0x16-0x17, UC 0x20-0x2b, UD 0x64-0x65 and CNP 0x81") from None
