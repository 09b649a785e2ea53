"""Programs written for the pyverbs learners have (Debian 12's 44, Ubuntu 24.04's 50, PyPI's 59) run on soft0:
the enum modules of each, and pyverbs' fixed fields, which turn a misspelt attribute into an error."""
import os
import subprocess
import sys

import pytest

from rdmalab.verbs import run
from rdmalab.verbs.soft import addr, qp, wr


@pytest.fixture
def pyverbs():
    run.install()
    import pyverbs
    yield pyverbs
    run.uninstall()   # (later tests of this session must see the pyverbs this machine has, if any, and the
    #                    next one may import the other generation's enum modules: the program's choice is undone)


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


# ---------------------------------------------------------------- one generation per program (issue 33, 6 and 7)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What a program meets: each attribute that pyverbs reads from a C field of an enum type (rdma-core v59's
# pyverbs/*.pyx return those fields as they are, and Cython 3 makes the class's member of the value), printed
# as [type, name or None, value]; then which enum modules import. argv[1] says how it imports its enums first.
PROGRAM = """
import importlib, json, sys
how = sys.argv[1]
if how == "detect":
    try:
        import pyverbs.libibverbs_enums as e
    except ImportError:
        import pyverbs.enums as e
elif how.startswith("from:"):
    exec(f"from pyverbs import {how[5:]} as e")
elif how != "none":
    e = importlib.import_module("pyverbs." + how)
import pyverbs.cq as c, pyverbs.device as d, pyverbs.fork as f, pyverbs.mr as m, pyverbs.pd as p, pyverbs.qp as q
import pyverbs.wr as w
ctx = d.Context(name="soft0")
pd, cq = p.PD(ctx), c.CQ(ctx, 4)
mr = m.MR(pd, 64, 1)
qp = q.QP(pd, q.QPInitAttr(qp_type=2, scq=cq, rcq=cq, cap=q.QPCap(2, 2)))
qp.to_init(q.QPAttr())
qp.post_recv(w.RecvWR(wr_id=7, num_sge=1, sg=[w.SGE(mr.buf, 8, mr.lkey)]))
err = q.QPAttr()
err.qp_state = 6   # IBV_QPS_ERR: the receive is flushed
qp.modify(err, 1)
wc = cq.poll()[1][0]
attr, init = qp.query(0x1fffff)
port = ctx.query_port(1)
seen = {"wc.status": wc.status, "wc.opcode": wc.opcode, "WC(status=10).status": c.WC(status=10).status,
        "qp.qp_state": qp.qp_state, "qp.qp_type": qp.qp_type, "attr.qp_state": attr.qp_state,
        "attr.path_mtu": attr.path_mtu, "init.qp_type": init.qp_type, "port.state": port.state,
        "port.active_mtu": port.active_mtu, "atomic_caps": ctx.query_device().atomic_caps,
        "is_fork_initialized()": f.is_fork_initialized(), "MW.type": m.MW(pd, 2).type}
out = {k: [type(v).__name__, getattr(v, "name", None), int(v)] for k, v in seen.items()}
imports = {}
for name in ("enums", "cm_enums", "libibverbs_enums", "librdmacm_enums"):
    try:
        importlib.import_module("pyverbs." + name)
        imports[name] = "ok"
    except ImportError as ex:
        imports[name] = type(ex).__name__
out["imports"] = imports
if imports["libibverbs_enums"] == "ok":
    classes = importlib.import_module("pyverbs.libibverbs_enums")
    out["isinstance"] = all(isinstance(v, getattr(classes, type(v).__name__, ())) for v in seen.values())
print(json.dumps(out))
"""

NEW = {"wc.status": ["ibv_wc_status", "IBV_WC_WR_FLUSH_ERR", 5],
       "wc.opcode": ["ibv_wc_opcode", "IBV_WC_SEND", 0],   # (rxe leaves a flushed receive's opcode 0)
       "WC(status=10).status": ["ibv_wc_status", "IBV_WC_REM_ACCESS_ERR", 10],
       "qp.qp_state": ["ibv_qp_state", "IBV_QPS_ERR", 6], "qp.qp_type": ["ibv_qp_type", "IBV_QPT_RC", 2],
       "attr.qp_state": ["ibv_qp_state", "IBV_QPS_ERR", 6], "attr.path_mtu": ["ibv_mtu", "IBV_MTU_1024", 3],
       "init.qp_type": ["ibv_qp_type", "IBV_QPT_RC", 2], "port.state": ["ibv_port_state", "IBV_PORT_ACTIVE", 4],
       "port.active_mtu": ["ibv_mtu", "IBV_MTU_1024", 3], "atomic_caps": ["ibv_atomic_cap", "IBV_ATOMIC_HCA", 1],
       "is_fork_initialized()": ["ibv_fork_status", "IBV_FORK_UNNEEDED", 2], "MW.type": ["ibv_mw_type", "IBV_MW_TYPE_2", 2]}
OLD = {k: ["int", None, value] for k, (_, _, value) in NEW.items()}
ONLY_NEW = {"enums": "ModuleNotFoundError", "cm_enums": "ModuleNotFoundError", "libibverbs_enums": "ok",
            "librdmacm_enums": "ok"}
ONLY_OLD = {"enums": "ok", "cm_enums": "ok", "libibverbs_enums": "ModuleNotFoundError",
            "librdmacm_enums": "ModuleNotFoundError"}


def run_program(tmp_path, how, **env):
    import json
    (tmp_path / "prog.py").write_text(PROGRAM)
    done = subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", str(tmp_path / "prog.py"), how],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("how", ["libibverbs_enums", "librdmacm_enums", "from:libibverbs_enums", "detect"])
def test_a_program_of_pyverbs_59_reads_enum_members_and_has_no_pyverbs_enums(tmp_path, how):
    """pyverbs v59 (Cython 3.1): wc.status, qp.qp_state, port state ... are members of the classes in
    pyverbs.libibverbs_enums (`.name` works), and pyverbs.enums / cm_enums are gone."""
    seen = run_program(tmp_path, how)
    assert {k: v for k, v in seen.items() if k in NEW} == NEW
    assert seen["isinstance"] is True and seen["imports"] == ONLY_NEW


@pytest.mark.parametrize("how", ["enums", "cm_enums", "from:enums"])
def test_a_program_of_pyverbs_58_reads_plain_ints_and_has_no_libibverbs_enums(tmp_path, how):
    seen = run_program(tmp_path, how)
    assert {k: v for k, v in seen.items() if k in OLD} == OLD
    assert seen["imports"] == ONLY_OLD


@pytest.mark.parametrize("version, how, expected", [
    ("44", "detect", ONLY_OLD), ("58", "none", ONLY_OLD), ("59", "none", ONLY_NEW), ("64", "detect", ONLY_NEW)])
def test_rdmalab_pyverbs_chooses_the_generation_before_any_import(tmp_path, version, how, expected):
    """RDMALAB_PYVERBS=44: the version-detecting program takes the <= 58 path, as on Debian 12's pyverbs."""
    seen = run_program(tmp_path, how, RDMALAB_PYVERBS=version)
    assert seen["imports"] == expected
    assert seen["wc.status"] == (OLD if expected is ONLY_OLD else NEW)["wc.status"]


def test_rdmalab_pyverbs_takes_a_version_only(tmp_path):
    (tmp_path / "prog.py").write_text("import pyverbs.enums\n")
    done = subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", str(tmp_path / "prog.py")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "RDMALAB_PYVERBS": "new"})
    assert done.returncode != 0 and "RDMALAB_PYVERBS='new' is not a pyverbs version" in done.stderr, done.stderr


def test_until_a_program_imports_an_enum_module_nothing_is_decided_nor_converted(tmp_path):
    """A program that has imported no enum module yet reads soft0's values as they are (plain ints), and may
    still import either generation: its first enum import decides."""
    seen = run_program(tmp_path, "none")
    assert seen["wc.status"] == OLD["wc.status"] and seen["imports"] == ONLY_OLD   # (the first import was enums)


def test_the_lab_itself_uses_both_enum_modules_and_reads_plain_ints():
    """rdmalab.verbs (v.enums, flat names) reaches soft0 as rdmalab.verbs.soft, not through `pyverbs`: nothing
    is decided, both modules import, completions and states are plain ints."""
    from rdmalab import verbs as v
    from rdmalab.verbs.soft import cm_enums, enums, libibverbs_enums, librdmacm_enums, pyverbs_generation  # noqa: F401
    if v.PROVIDER != "soft":
        pytest.skip("soft0's own code")
    e = v.enums
    assert e.IBV_ACCESS_LOCAL_WRITE == 1 and e.IBV_QPT_RC == 2
    ctx = v.device.Context(name="soft0")
    cq = v.cq.CQ(ctx, 4)
    cq.push(3, 0, 0x80, 8, 1)
    wc = cq.poll()[1][0]
    assert type(wc.status) is int and type(wc.opcode) is int and pyverbs_generation.chosen is None
    assert type(ctx.query_port(1).state) is int
    cq.close()
    ctx.close()
