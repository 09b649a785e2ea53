"""MR(pd, length, access, address=...): registering memory the program already has (ibv_reg_mr(3) on its own
buffer; pyverbs since rdma-core 28). soft0 maps its segment over the program's pages, so the program's own
pointers see what a NIC, in this process or another, writes there, and the memory outlives the MR."""
import errno
import mmap

import numpy as np
import pytest

from rdmalab import verbs as v
from rdmalab.lessons.target import RemoteBuffer
from rdmalab.verbs import rc

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="how soft0 registers a program's memory")
e = v.enums
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@pytest.fixture
def pd():
    with v.device.Context(name=v.choose_route().device) as ctx:
        yield v.pd.PD(ctx)


def existing(length, fill=7):
    """A page-aligned buffer the program has written, and a numpy view of it."""
    memory = mmap.mmap(-1, length)
    array = np.frombuffer(memory, np.uint8)
    array[:] = fill
    return memory, array


def test_the_program_and_the_nic_see_the_same_bytes_and_the_memory_outlives_the_mr(pd):
    memory, mine = existing(10_000)
    mine[:5] = list(b"hello")
    mr = v.mr.MR(pd, 10_000, ACCESS, address=mine.ctypes.data)
    assert mr.buf == mine.ctypes.data and mr.length == 10_000 and mr.rkey == mr.lkey
    assert mr.read(5, 0) == b"hello" and mr.read(1, 9_999) == b"\x07"   # what was there stays
    mine[100:104] = list(b"abcd")                                        # the program writes, the NIC reads
    assert mr.read(4, 100) == b"abcd"
    mr.write(b"XYZ", 3, 200)                                             # and the other way
    assert bytes(mine[200:203]) == b"XYZ" and v.as_array(mr)[200] == ord("X")
    mr.close()
    assert bytes(mine[:5]) == b"hello" and bytes(mine[200:203]) == b"XYZ"   # deregistered, not freed
    again = v.mr.MR(pd, 10_000, ACCESS, address=mine.ctypes.data)           # and registered again
    assert again.read(3, 200) == b"XYZ"
    again.close()


def test_another_process_s_send_lands_in_the_programs_own_buffer():
    memory, mine = existing(4096, fill=0xFF)
    context = v.device.Context(name=v.choose_route().device)
    pd2 = v.pd.PD(context)
    cq = v.cq.CQ(context, 8)
    qp = v.qp.QP(pd2, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
    mr = v.mr.MR(pd2, 4096, ACCESS, address=mine.ctypes.data)
    target = RemoteBuffer()
    try:
        ours = rc.endpoint(context, qp, mr)
        rc.connect(context, qp, ours, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
        target.connect(ours)
        qp.post_recv(v.wr.RecvWR(wr_id=1, num_sge=1, sg=[v.wr.SGE(mr.buf + 64, 8, mr.lkey)]))
        target.start_sending(1, 0, length=8)     # 8 bytes of its memory: zeros
        target.sent_times()
        wc = rc.wait_for_completion(cq)
        assert wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV
        assert bytes(mine[64:72]) == bytes(8) and mine[63] == mine[72] == 0xFF
    finally:
        target.close()
        for obj in (qp, mr, cq, pd2, context):
            obj.close()


def test_what_soft0_cannot_register_is_refused_saying_why(pd):
    memory, mine = existing(8192)
    with pytest.raises(v.pyverbs_error.PyverbsUserError, match="from a page boundary"):
        v.mr.MR(pd, 4096, ACCESS, address=mine.ctypes.data + 16)
    mr = v.mr.MR(pd, 8192, ACCESS, address=mine.ctypes.data)
    with pytest.raises(v.pyverbs_error.PyverbsUserError, match="same pages twice"):
        v.mr.MR(pd, 4096, ACCESS, address=mine.ctypes.data + 4096)
    mr.close()
    with pytest.raises(v.pyverbs_error.PyverbsRDMAError) as unmapped:          # ibv_reg_mr's EFAULT
        v.mr.MR(pd, 4096, ACCESS, address=0x1000)
    assert unmapped.value.error_code == errno.EFAULT
    read_only = np.frombuffer(mmap.mmap(-1, 4096, prot=mmap.PROT_READ), np.uint8)
    with pytest.raises(v.pyverbs_error.PyverbsRDMAError) as writable:
        v.mr.MR(pd, 4096, ACCESS, address=read_only.ctypes.data)
    assert writable.value.error_code == errno.EFAULT
    v.mr.MR(pd, 4096, e.IBV_ACCESS_REMOTE_READ, address=read_only.ctypes.data).close()   # reading it is allowed
