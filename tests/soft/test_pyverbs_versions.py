"""Programs written for the pyverbs learners have (Debian 12's 44, Ubuntu 24.04's 50, PyPI's 59) run on soft0:
the enum modules of each, and pyverbs' fixed fields, which turn a misspelt attribute into an error."""
import os
import subprocess
import sys

import pytest

from rdmalab.verbs import run
from rdmalab.verbs.soft import addr, qp, wr


@pytest.fixture(scope="module")
def pyverbs():
    run.install()
    import pyverbs
    yield pyverbs
    run.uninstall()   # (later tests of this session must see the pyverbs this machine has, if any)


def test_the_enum_modules_up_to_58_are_int_enums_with_flat_names(pyverbs):
    import pyverbs.cm_enums as ce
    import pyverbs.enums as e
    assert [f.name for f in e.ibv_create_cq_wc_flags][:2] == ["IBV_WC_EX_WITH_BYTE_LEN", "IBV_WC_EX_WITH_IMM"]
    assert e.IBV_ACCESS_REMOTE_WRITE is e.ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
    assert e.IBV_WR_RDMA_READ.value == 4 and e.IBV_WR_RDMA_READ.name == "IBV_WR_RDMA_READ"
    assert e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE == 3
    assert ce.RDMA_PS_TCP == 0x106 and ce.rdma_port_space(0x106) is ce.RDMA_PS_TCP and ce.RAI_PASSIVE == 1


def test_the_enum_modules_from_59_are_int_flags(pyverbs):
    import pyverbs.libibverbs_enums as e
    import pyverbs.librdmacm_enums as ce
    assert e.ibv_access_flags.IBV_ACCESS_REMOTE_READ == e.IBV_ACCESS_REMOTE_READ == 4
    assert isinstance(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE, e.ibv_access_flags)
    assert ce.rdma_port_space.RDMA_PS_UDP == 0x111


@pytest.mark.parametrize("make, typo", [
    (lambda: qp.QPAttr(), "timout"), (lambda: qp.QPAttr(), "qp_acces_flags"), (lambda: qp.QPCap(), "max_send_wrs"),
    (lambda: wr.SGE(0, 8, 1), "lenght"), (lambda: wr.SendWR(num_sge=1, sg=[wr.SGE(0, 8, 1)]), "send_flag"), (lambda: wr.RecvWR(), "wrid"),
    (lambda: qp.QPInitAttr(), "qp_typ"), (lambda: addr.AHAttr(), "is_globl"), (lambda: addr.GlobalRoute(), "sgid_idx"),
    (lambda: qp.QPInitAttrEx(), "comp_msk"),
])
def test_a_misspelt_field_is_an_attribute_error_as_in_pyverbs(make, typo):
    obj = make()
    with pytest.raises(AttributeError, match=typo):
        setattr(obj, typo, 14)


def test_the_fields_themselves_can_be_set():
    attr, sge = qp.QPAttr(), wr.SGE(0, 8, 1)
    attr.timeout, attr.qp_access_flags, sge.length = 14, 7, 16
    init = qp.QPInitAttr()
    init.max_send_wr = 9   # (pyverbs exposes the caps flat too)
    assert (attr.timeout, attr.qp_access_flags, sge.length, init.cap.max_send_wr) == (14, 7, 16, 9)


def test_a_receive_without_sges_is_a_receive_of_nothing(pyverbs):
    """pyverbs' RecvWR() takes no SGE (a WRITE_WITH_IMM's notification consumes one such receive)."""
    empty = wr.RecvWR(wr_id=7)
    assert empty.num_sge == 0 and empty.wr_id == 7


def test_a_program_imports_the_module_beside_it(tmp_path):
    """`python3 prog.py` puts prog.py's folder first on sys.path; the runner does too."""
    (tmp_path / "helpers_beside.py").write_text("ANSWER = 42\n")
    (tmp_path / "prog.py").write_text("import helpers_beside\nimport pyverbs.device\nprint('got', helpers_beside.ANSWER)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", str(tmp_path / "prog.py")],
                            capture_output=True, text=True, timeout=120, cwd=root)
    assert result.returncode == 0 and "got 42" in result.stdout, result.stderr


@pytest.mark.skipif(__import__("rdmalab").verbs.PROVIDER != "soft", reason="soft0's NIC's own route cache")
def test_a_buffer_deregistered_as_soon_as_its_message_arrived_fails_nothing(monkeypatch):
    """A peer that closes (or drops a reg_msgs() MR) right after a SEND or WRITE landed: the completion is
    the sender's outcome; the NIC's note of the route must not raise in post_send (it did: AttributeError
    on None, where pyverbs raises nothing once the request was accepted)."""
    from rdmalab.verbs.soft import requester
    from rdmalab.verbs.soft.constants import IBV_WC_SUCCESS
    from rdmalab.verbs import rc
    from rdmalab import verbs as v
    e = v.enums
    ctx = v.device.Context(name="soft0")
    pd = v.pd.PD(ctx)
    cq = v.cq.CQ(ctx, 16)
    init = v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4))
    a, b = v.qp.QP(pd, init), v.qp.QP(pd, init)
    src = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    for opcode in (e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE):
        dst = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
        a_end, b_end = rc.endpoint(ctx, a), rc.endpoint(ctx, b, dst)
        if opcode == e.IBV_WR_SEND:
            rc.connect(ctx, a, a_end, b_end)
            rc.connect(ctx, b, b_end, a_end)
            b.post_recv(v.wr.RecvWR(wr_id=5, num_sge=1, sg=[v.wr.SGE(dst.buf, 64, dst.lkey)]))
        real = requester.respond

        def respond_then_deregister(*args, real=real, dst=dst):
            answer = real(*args)
            dst.close()                     # the peer lets go of the buffer at once
            return answer
        monkeypatch.setattr(requester, "respond", respond_then_deregister)
        wr = v.wr.SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[v.wr.SGE(src.buf, 8, src.lkey)])
        if opcode == e.IBV_WR_RDMA_WRITE:
            wr.set_wr_rdma(b_end["rkey"], b_end["addr"])
        a.post_send(wr)                     # raised AttributeError before the fix
        monkeypatch.setattr(requester, "respond", real)
        statuses = [wc.status for wc in cq.poll(4)[1]]
        assert statuses and all(s == IBV_WC_SUCCESS for s in statuses)
    for obj in (a, b, src, cq, pd, ctx):
        obj.close()


def test_a_process_the_program_starts_gets_soft0s_pyverbs_too(tmp_path):
    """A driver that starts its server with [sys.executable, "server.py"] (rdma_cm examples do): on rxe the
    child imports the installed pyverbs; under the runner it must get soft0's."""
    (tmp_path / "server.py").write_text("import pyverbs.device as d\nprint(d.get_device_list()[0].name.decode())\n")
    (tmp_path / "driver.py").write_text(
        "import os, subprocess, sys\n"
        "here = os.path.dirname(os.path.abspath(__file__))\n"
        "out = subprocess.run([sys.executable, os.path.join(here, 'server.py')], capture_output=True, text=True)\n"
        "print('child:', out.stdout.strip(), out.stderr.strip()[-200:])\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", str(tmp_path / "driver.py")],
                            capture_output=True, text=True, timeout=120, cwd=root)
    assert "child: soft0" in result.stdout, (result.stdout, result.stderr)
