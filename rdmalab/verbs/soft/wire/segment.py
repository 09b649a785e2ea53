"""Messages into packets at the path MTU, and the 24-bit packet sequence numbers that order them.

A message (a SEND's buffer, a WRITE's, a READ's answer) larger than the path MTU is cut into
MTU-sized packets: FIRST, MIDDLE..., LAST; one that fits (an empty one too) is a single ONLY
packet. Each packet takes the next PSN. A READ request is one packet but reserves as many PSNs as
the responses it asks for, since each READ response packet carries its own PSN.

    >>> [op.name for op in message_opcodes("RDMA_WRITE", 10240, 1024)][:2]
    ['RC_RDMA_WRITE_FIRST', 'RC_RDMA_WRITE_MIDDLE']
    >>> packet_count(10240, 1024)
    10

PSNs wrap at 2**24. Whether one PSN is "before" another is decided as rxe does (psn_compare in
rxe_hdr.h): the difference, taken as a signed 24-bit number. So the half of the PSN space after a
PSN is "ahead" of it, the half before it "behind": 10 is ahead of 2**24 - 5.
"""
from .headers import MASK24, WireError
from .opcodes import Op

MTUS = (256, 512, 1024, 2048, 4096)   # the InfiniBand path MTUs (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5)
PSN_MODULUS = 1 << 24

# operation -> transport prefix -> (FIRST, MIDDLE, LAST, ONLY, LAST with imm/inv, ONLY with imm/inv)
_KINDS = {
    "SEND": ("SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_ONLY"),
    "RDMA_WRITE": ("RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST", "RDMA_WRITE_ONLY"),
    "RDMA_READ_RESPONSE": ("RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_MIDDLE",
                           "RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY"),
}


def check_mtu(mtu):
    if mtu not in MTUS:
        raise WireError(f"path MTU {mtu!r} is not an InfiniBand MTU: use one of {', '.join(map(str, MTUS))}")
    return mtu


def packet_count(length, mtu):
    """How many packets a message of `length` bytes makes: ceil(length / mtu), at least 1."""
    check_mtu(mtu)
    if length < 0:
        raise WireError(f"a message cannot have {length} bytes")
    return max(1, -(-length // mtu))


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
    first, middle, last, only = _KINDS[kind]
    n = packet_count(length, mtu)
    if transport == "UD" and (kind != "SEND" or n > 1):
        raise WireError(f"UD carries only SENDs of one packet: {length} bytes at MTU {mtu} is {n} packets")
    suffix = "_WITH_IMMEDIATE" if imm else "_WITH_INVALIDATE" if inv else ""
    names = [only + suffix] if n == 1 else [first] + [middle] * (n - 2) + [last + suffix]
    return [Op[f"{transport}_{name}"] for name in names]


def psn_add(psn, n):
    return (psn + n) & MASK24


def psn_diff(a, b):
    """a - b as a signed 24-bit number: > 0 when a is ahead of b, < 0 when behind, in -2**23 .. 2**23-1."""
    d = (a - b) & MASK24
    return d - PSN_MODULUS if d & 0x800000 else d


def psn_compare(a, b):
    """-1, 0 or 1: is a behind, the same as, or ahead of b (rxe's psn_compare, reduced to its sign)."""
    d = psn_diff(a, b)
    return (d > 0) - (d < 0)
