"""Messages into packets at the path MTU, and the 24-bit packet sequence numbers that order them.

A message (a SEND's buffer, a WRITE's, a READ's answer) larger than the path MTU is cut into
MTU-sized packets: FIRST, MIDDLE..., LAST; one that fits (an empty one too) is a single ONLY
packet. Each packet takes the next PSN. A READ request is one packet but reserves as many PSNs as
the responses it asks for, since each READ response packet carries its own PSN.

    >>> [op.name for op in message_opcodes("RDMA_WRITE", 10240, 1024)][:2]
    ['RC_RDMA_WRITE_FIRST', 'RC_RDMA_WRITE_MIDDLE']
    >>> packet_count(10240, 1024)
    10

PSNs wrap at 2**24; psn_add, psn_diff and psn_compare (which decides, as rxe does, whether one PSN
is before another) are in psn.py, with the packets' count and positions.
"""
from .psn import packets, positions, psn_add, psn_compare, psn_diff  # noqa: F401 (the codec's PSN arithmetic)
from .headers import WireError
from .opcodes import Op

MTUS = (256, 512, 1024, 2048, 4096)   # the InfiniBand path MTUs (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5)
_KINDS = ("SEND", "RDMA_WRITE", "RDMA_READ_RESPONSE")   # the messages cut into packets


def check_mtu(mtu):
    if mtu not in MTUS:
        raise WireError(f"path MTU {mtu!r} is not an InfiniBand MTU: use one of {', '.join(map(str, MTUS))}")
    return mtu


def packet_count(length, mtu):
    """How many packets a message of `length` bytes makes: ceil(length / mtu), at least 1."""
    check_mtu(mtu)
    if length < 0:
        raise WireError(f"a message cannot have {length} bytes")
    return packets(length, mtu)


def segments(length, mtu):
    """(offset, size) of each packet's payload within the message."""
    return [(i * mtu, min(mtu, length - i * mtu)) for i in range(packet_count(length, mtu))]


def message_opcodes(kind, length, mtu, transport="RC", imm=False, inv=False):
    """The opcode of each packet of a message: `kind` is SEND, RDMA_WRITE or RDMA_READ_RESPONSE;
    imm (SEND or WRITE with immediate) and inv (SEND with invalidate) change the last packet."""
    if kind not in _KINDS:
        raise WireError(f"unknown message kind {kind!r}: use one of {', '.join(_KINDS)}")
    if transport not in ("RC", "UC", "UD"):
        raise WireError(f"unknown transport {transport!r}: use RC, UC or UD")
    if imm and inv or inv and kind != "SEND" or imm and kind == "RDMA_READ_RESPONSE":
        raise WireError(f"{kind} cannot carry {'both immediate data and invalidate' if imm and inv else 'that'}")
    if transport != "RC" and (kind == "RDMA_READ_RESPONSE" or inv):
        raise WireError(f"{transport} has no READs or SEND with invalidate: those are RC only")
    n = packet_count(length, mtu)
    if transport == "UD" and (kind != "SEND" or n > 1):
        raise WireError(f"UD carries only SENDs of one packet: {length} bytes at MTU {mtu} is {n} packets")
    suffix = "_WITH_IMMEDIATE" if imm else "_WITH_INVALIDATE" if inv else ""   # (in the last packet only)
    return [Op[f"{transport}_{kind}_{p}{suffix if p in ('LAST', 'ONLY') else ''}"] for p in positions(n)]

