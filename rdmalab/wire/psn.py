"""RC's packet arithmetic, in one place for the wire codec, soft0's two links and the lessons.

A message goes out as packets, as many as its length needs at the path MTU (packets(): an empty one
takes one too), each at a position: FIRST, MIDDLE..., LAST, or ONLY when one packet carries it all
(positions(); wire/segment.py turns these into opcodes). Each packet takes the next PSN.

PSNs are 24-bit numbers that wrap at 2**24 (MSNs and QP numbers are 24-bit too). Whether one PSN is
"before" another is decided as rxe does (psn_compare in rxe_hdr.h): the difference, taken as a signed
24-bit number. So the half of the PSN space after a PSN is "ahead" of it, the half before it "behind":
10 is ahead of 2**24 - 5.

A request nobody answers is resent after the QP's local ACK timeout, 4.096 us x 2**timeout, retry_cnt
times; a timeout of 0 is infinite, no timer at all (IB spec Vol. 1, 9.7.6.1.3).
"""
PSN_MODULUS = 1 << 24
MASK24 = PSN_MODULUS - 1   # a 24-bit field: PSNs, MSNs, QP numbers
POSITIONS = ("FIRST", "MIDDLE", "LAST", "ONLY")   # of a packet in its message: 0, 1, 2, 3


def packets(length, mtu):
    """Packets a message of `length` bytes takes at this path MTU (a zero-length one takes one):
    both ends advance their PSN by this."""
    return (length + mtu - 1) // mtu or 1


def positions(count):
    """Each packet's position in a message of `count` packets: ONLY, or FIRST, MIDDLE..., LAST."""
    return ["ONLY"] if count == 1 else ["FIRST"] + ["MIDDLE"] * (count - 2) + ["LAST"]


def psn_add(psn, n):
    return (psn + n) & MASK24


def psn_diff(a, b):
    """a - b as a signed 24-bit number: > 0 when a is ahead of b, < 0 when behind, in -2**23 .. 2**23-1."""
    d = (a - b) & MASK24
    return d - PSN_MODULUS if d & 0x800000 else d   # (bit 23: the sign)


def psn_compare(a, b):
    """-1, 0 or 1: is a behind, the same as, or ahead of b (rxe's psn_compare, reduced to its sign)."""
    d = psn_diff(a, b)
    return (d > 0) - (d < 0)


def ack_timeout(timeout):
    """Seconds a requester waits for an answer before it resends: 4.096 us x 2**timeout (0: for ever)."""
    return float("inf") if timeout == 0 else 4.096e-6 * (1 << timeout)
