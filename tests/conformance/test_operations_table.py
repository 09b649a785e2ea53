"""soft0's table of operations (rdmalab/verbs/soft/operations.py), judged by a device: every operation
that goes to a peer, posted on an RC and on a UC QP, completes as the table says (its completion opcode
where the QP type carries it out, LOC_QP_OP_ERR where it does not), and a QPEx accepts exactly the
IBV_QP_EX_WITH_* bits the table gives its type. On soft0 this checks that the code carries out what the
table says (a row without its code fails); in the Soft-RoCE guest the same test runs on rxe0, which
judges the table itself.
"""
import pytest

from rdmalab import verbs as v
from rdmalab.verbs.soft.operations import REMOTE, SEND_OPS, TABLE

from .conftest import e, poll, recv_wr, send_wr
from .test_datagrams import uc  # noqa: F401 (the UC pair, a fixture)
from .test_extended import qp_ex

POSTED = [op for op in TABLE if op.opcode in REMOTE]


@pytest.fixture(params=["RC", "UC"])
def connected(request, make_pair):
    """Two connected QPs of the type asked for (a, b, their CQs, src and dst memory), a receive posted on b."""
    pair = make_pair() if request.param == "RC" else request.getfixturevalue("uc")
    pair.b.post_recv(recv_wr(pair.dst, 64, wr_id=90))
    return {"RC": e.IBV_QPT_RC, "UC": e.IBV_QPT_UC}[request.param], pair


def name(opcode):
    """The IBV_WR_* name this pyverbs gives `opcode`, or None: rdma-core before 45 (Debian 12's 44) has
    no FLUSH or ATOMIC_WRITE."""
    return next((n for n in dir(e) if n.startswith("IBV_WR_") and getattr(e, n) == opcode), None)


@pytest.mark.parametrize("op", POSTED, ids=[name(op.opcode) for op in POSTED])
def test_each_operation_completes_as_the_table_says_on_rc_and_uc(connected, op):
    qp_type, pair = connected
    w = send_wr(pair.src, 8, op.opcode, wr_id=7, imm=0x1234 if op.imm else 0)
    if op.message == "ATOMIC":
        w.set_wr_atomic(pair.dst.rkey, pair.dst.buf + 64, 0, 1)
    elif op.message != "SEND":
        w.set_wr_rdma(pair.dst.rkey, pair.dst.buf + 64)
    if op.inv:
        w.imm_data = 0x12345   # a key that is no window's: the sender's SEND still completes (rxe)
    pair.a.post_send(w)
    [wc] = poll(pair.cq_a)
    if qp_type in op.qp_types:
        assert (wc["status"], wc["opcode"]) == (e.IBV_WC_SUCCESS, op.completion)
    else:
        assert wc["status"] == e.IBV_WC_LOC_QP_OP_ERR


@pytest.mark.parametrize("qp_type", [e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD], ids=["RC", "UC", "UD"])
def test_a_qpex_accepts_the_send_ops_the_table_gives_its_type(ctx, pd, qp_type):
    with v.cq.CQ(ctx, 8) as cq:
        for op in TABLE:
            try:
                qp_ex(ctx, pd, cq, ops=op.ex_flag, qp_type=qp_type).close()
                accepted = True
            except v.pyverbs_error.PyverbsRDMAError:
                accepted = False
            # an operation newer than this rdma-core: its provider lets no QPEx ask for it
            expected = bool(SEND_OPS[qp_type] & op.ex_flag) and name(op.opcode) is not None
            assert accepted == expected, name(op.opcode) or f"opcode {op.opcode}, which this pyverbs does not name"
