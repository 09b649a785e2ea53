"""The on-the-wire lesson (on-the-wire): its exercise, a check (raising Wrong with a hint) and a reference solution.

on-the-wire.packets: predict the packets of an RDMA WRITE of `length` bytes at path MTU `mtu`, as a list of
(kind, payload bytes), kind one of "only", "first", "middle", "last". The check compares the prediction
with what the codec segments (rdmalab.wire.segment, itself checked against packets captured
from Linux's rxe) for several sizes, the edges included: a message of exactly one MTU, one byte more, and
a zero-length WRITE, which still takes one packet.
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.wire import message_opcodes, segments

CASES = [(10240, 1024), (10000, 4096), (1024, 1024), (1025, 1024), (100, 256), (0, 1024)]
KINDS = ("only", "first", "middle", "last")
HINT = ("A message of n bytes takes ceil(n / mtu) packets, at least one. One packet is 'only'; more are "
        "'first', then 'middle' ones, then 'last'. Every packet but the last carries a full MTU of payload; "
        "the last carries what is left.")


def packets_of(length, mtu):
    """What the codec sends: [(kind, payload bytes)] for an RDMA WRITE of `length` bytes at `mtu`."""
    ops = message_opcodes("RDMA_WRITE", length, mtu)
    return [(op.name.rsplit("_", 1)[-1].lower(), size) for op, (_, size) in zip(ops, segments(length, mtu))]


@exercise("on-the-wire.packets", "Predict the packets of an RDMA WRITE", hints=[HINT])
def check(predict):
    """`predict(length, mtu)` -> [(kind, payload bytes), ...]; returns its answer for 10240 bytes at MTU 1024."""
    if predict is None:
        raise NotYet("write my_packets(length, mtu)", HINT)
    for length, mtu in CASES:
        try:
            got = predict(length, mtu)
        except NotImplementedError:
            raise NotYet("write my_packets(length, mtu)", HINT) from None
        want, where = packets_of(length, mtu), f"a WRITE of {length} bytes at MTU {mtu}"
        if not isinstance(got, (list, tuple)) or any(not (isinstance(p, (tuple, list)) and len(p) == 2) for p in got):
            raise Wrong(f"for {where} you returned {str(got)[:60]}: return a list of (kind, payload bytes) pairs, "
                        f"such as [('first', {mtu}), ...]", HINT)
        got = [tuple(p) for p in got]
        if len(got) != len(want):
            raise Wrong(f"{where} takes {len(want)} packet{'s' * (len(want) != 1)}; you predicted {len(got)}", HINT)
        bad_kind = next((i for i, (g, w) in enumerate(zip(got, want)) if g[0] != w[0]), None)
        if bad_kind is not None:
            raise Wrong(f"for {where}, packet {bad_kind + 1} of {len(want)} is '{want[bad_kind][0]}', not "
                        f"'{got[bad_kind][0]}' (the kinds are {', '.join(KINDS)})", HINT)
        bad_size = next((i for i, (g, w) in enumerate(zip(got, want)) if g[1] != w[1]), None)
        if bad_size is not None:
            raise Wrong(f"for {where}, packet {bad_size + 1} carries {want[bad_size][1]} bytes, not {got[bad_size][1]}",
                        HINT)
    return predict(10240, 1024)


@reference("on-the-wire.packets")
def _reference():
    def my_packets(length, mtu):
        n = max(1, -(-length // mtu))   # ceil(length / mtu), and a zero-length WRITE still sends one packet
        if n == 1:
            return [("only", length)]
        return [("first", mtu)] + [("middle", mtu)] * (n - 2) + [("last", length - (n - 1) * mtu)]
    return my_packets
