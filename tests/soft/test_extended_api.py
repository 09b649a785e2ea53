"""soft0's extended QPs and CQs where real pyverbs cannot be compared with: the misuses that crash or
hang libibverbs (a builder its send_ops_flags lack, wr_start twice, a reader its wc_flags lack)
raise PyverbsUserError naming the fix, and wr_set_inline_data_list sends its data (rxe's provider
never adds the lengths up and sends an empty message). The behaviour both share is in
tests/conformance/test_extended.py."""
import ctypes

import pytest

from rdmalab import verbs as v
from rdmalab.verbs.soft import cq as cqmod, device, enums as e, mr as mrmod, pd as pdmod, qp as qpmod, wr as wrmod
from rdmalab.verbs.route import routable_gid_index
from rdmalab.verbs.soft.pyverbs_error import PyverbsUserError

from tests.conformance.conftest import to_init, to_rtr, to_rts

# soft0's own objects throughout, connected with the conformance suite's helpers, which use the active
# provider's: on a real device (the guest) those are pyverbs', which soft0's QPs cannot take
pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="soft0's own behaviour where libibverbs crashes or "
                                "hangs (the shared behaviour is in tests/conformance/test_extended.py)")

ALL = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@pytest.fixture
def ctx():
    with device.Context(name="soft0") as c:
        yield c


def make_qp(ctx, pd, cq, ops=e.IBV_QP_EX_WITH_RDMA_WRITE, mask=None, max_inline=64):
    mask = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS if mask is None else mask
    cap = qpmod.QPCap(max_send_wr=4, max_recv_wr=4, max_inline_data=max_inline)
    return qpmod.QPEx(ctx, qpmod.QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, pd=pd,
                                              send_ops_flags=ops, comp_mask=mask))


def test_a_builder_missing_from_send_ops_flags_names_the_flag(ctx):
    pd, cq = pdmod.PD(ctx), cqmod.CQ(ctx, 8)
    qp = make_qp(ctx, pd, cq)
    qp.wr_start()
    with pytest.raises(PyverbsUserError, match="IBV_QP_EX_WITH_SEND in send_ops_flags"):
        qp.wr_send()


def test_a_qpex_without_send_ops_in_comp_mask_has_no_wr_api(ctx):
    pd, cq = pdmod.PD(ctx), cqmod.CQ(ctx, 8)
    qp = make_qp(ctx, pd, cq, mask=e.IBV_QP_INIT_ATTR_PD)
    with pytest.raises(PyverbsUserError, match="IBV_QP_INIT_ATTR_SEND_OPS_FLAGS"):
        qp.wr_start()


def test_batch_misuse_is_named(ctx):
    pd, cq = pdmod.PD(ctx), cqmod.CQ(ctx, 8)
    qp = make_qp(ctx, pd, cq)
    with pytest.raises(PyverbsUserError, match="wr_start"):
        qp.wr_rdma_write(0, 0)           # a builder outside a batch
    qp.wr_start()
    with pytest.raises(PyverbsUserError, match="builder"):
        qp.wr_set_sge(wrmod.SGE(0, 8, 0))  # a setter with no WR begun
    with pytest.raises(PyverbsUserError, match="twice"):
        qp.wr_start()
    qp.wr_abort()
    qp.wr_start()                        # after an abort, a new batch may start


def test_inline_data_list_sends_every_buffer(ctx):
    gid_index = routable_gid_index(ctx, 1)
    pd, cq = pdmod.PD(ctx), cqmod.CQ(ctx, 8)
    a, b = make_qp(ctx, pd, cq), make_qp(ctx, pd, cq)
    dst = mrmod.MR(pd, 4096, ALL)
    to_init(a)
    to_init(b)
    to_rtr(ctx, gid_index, a, b.qp_num)
    to_rtr(ctx, gid_index, b, a.qp_num)
    to_rts(a)
    to_rts(b)
    first, second = ctypes.create_string_buffer(b"first"), ctypes.create_string_buffer(b"second")
    a.wr_start()
    a.wr_id, a.wr_flags = 1, e.IBV_SEND_SIGNALED | e.IBV_SEND_INLINE
    a.wr_rdma_write(dst.rkey, dst.buf)
    a.wr_set_inline_data_list(2, [qpmod.DataBuffer(ctypes.addressof(first), 5),
                                  qpmod.DataBuffer(ctypes.addressof(second), 6)])
    a.wr_complete()
    n, wcs = cq.poll(1)
    assert n == 1 and (wcs[0].status, wcs[0].byte_len) == (e.IBV_WC_SUCCESS, 11)
    assert dst.read(12, 0) == b"firstsecond\0"


def test_cqex_misuse_is_named(ctx):
    cq = cqmod.CQEX(ctx, cqmod.CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN))
    with pytest.raises(PyverbsUserError, match="start_poll"):
        cq.poll_next()
    with pytest.raises(PyverbsUserError, match="start_poll"):
        cq.read_opcode()                 # nothing polled yet
    with pytest.raises(PyverbsUserError, match="IBV_WC_EX_WITH_IMM"):
        cq.read_imm_data()
    with pytest.raises(AttributeError, match="start_poll"):
        cq.poll(1)                       # pyverbs' CQEX has no poll()
    cq.end_poll()                        # after an ENOENT (or nothing at all): harmless
