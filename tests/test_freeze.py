"""Freeze the target (rdmalab.lessons.freeze): a stopped process's memory is reached by RDMA, never by TCP.

The experiment's claim holds on every device, so the test runs on soft0 here and on rxe0 in the
Soft-RoCE guest (make test-softroce), where the kernel, not the initiator, serves the operations."""
import os

import pytest

from rdmalab import verbs as v
from rdmalab.lessons import freeze
from rdmalab.lessons.target import RemoteBuffer
from rdmalab.proc import procstat
from rdmalab.verbs import rc

e = v.enums


@pytest.fixture
def pair():
    ctx = v.device.Context(name=v.choose_route().device)
    pd = v.pd.PD(ctx)
    cq = v.cq.CQ(ctx, 64)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(64, 4), sq_sig_all=0))
    local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    target = RemoteBuffer()
    mine = rc.endpoint(ctx, qp, local)
    rc.connect(ctx, qp, mine, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
    target.connect(mine)
    yield qp, cq, local, target
    target.close()
    for obj in (qp, local, cq, pd, ctx):
        obj.close()


def test_rdma_reaches_a_stopped_process_and_tcp_stalls_on_it(pair):
    qp, cq, local, target = pair
    result = freeze.experiment(qp, cq, local, target).data
    assert result["target_state"] == "stopped"
    assert result["target_cpu_s_while_stopped"] == 0
    assert [op["status"] for op in result["rdma"]] == [0, 0, 0, 0]      # WRITE, READ, two atomics
    assert result["read_returned_pattern"] and result["fetch_and_add_olds"][1] == result["fetch_and_add_olds"][0] + 1
    assert result["tcp_stalled"] and 0 < result["tcp_bytes_before_stall"] < 256 << 20
    # continued, the target finds what RDMA left, and every byte TCP had held back
    assert result["target_found_pattern"] and result["counter_after"] == result["counter_before"] + 2
    assert result["tcp_bytes_received"] == result["tcp_bytes_sent"]
    assert "stopped throughout" in str(freeze.FreezeResult(result))


def test_a_failure_inside_the_freeze_leaves_the_target_running(pair):
    qp, cq, local, target = pair
    with pytest.raises(ZeroDivisionError):
        with freeze.frozen(target.pid):
            assert procstat.stat_fields(target.pid)[0] == "T"
            1 / 0
    assert procstat.stat_fields(target.pid)[0] != "T"
    assert target.read(4) is not None          # it answers: it runs again
    assert os.path.exists(f"/proc/{target.pid}")
