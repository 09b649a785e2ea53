"""The emulated NIC's shared memory: private to its owner, released on close, exit, exception and SIGKILL."""
import os
import signal
import stat
import subprocess
import sys
import textwrap
from errno import ENOMEM

import pytest

from rdmalab import verbs as v
from rdmalab.verbs.soft import shm

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="shared-memory segments belong to the emulated NIC")
e = v.enums
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HOLDER = textwrap.dedent("""
    import os, sys, time
    from rdmalab import verbs as v
    e = v.enums
    ctx = v.device.Context(name="soft0")
    pd = v.pd.PD(ctx)
    mrs = [v.mr.MR(pd, 1 << 16, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE) for _ in range(3)]
    cq = v.cq.CQ(ctx, 8)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
    print("ready", flush=True)
    if sys.argv[1] == "raise":
        raise RuntimeError("a failing notebook cell")
    time.sleep(60)
""")


def run_holder(mode):
    return subprocess.Popen([sys.executable, "-c", HOLDER, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": ROOT})


def test_segments_are_private_to_their_owner():
    with v.device.Context(name="soft0") as ctx:
        mr = v.mr.MR(v.pd.PD(ctx), 4096, e.IBV_ACCESS_LOCAL_WRITE)
        path = mr._segment.path
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        mr.close()
        assert not os.path.exists(path)


def test_closing_the_context_releases_everything():
    before = set(shm.leftovers(os.getpid()))
    with v.device.Context(name="soft0") as ctx:
        pd = v.pd.PD(ctx)
        mr = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)   # noqa: F841 (held, as a program holds it)
        cq = v.cq.CQ(ctx, 4)
        qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq))   # noqa: F841
        assert len(set(shm.leftovers(os.getpid())) - before) == 3  # one MR, one CQ, one QP
    assert set(shm.leftovers(os.getpid())) == before


def test_a_process_that_raises_leaves_nothing():
    holder = run_holder("raise")
    holder.wait(timeout=60)
    assert holder.returncode != 0 and "a failing notebook cell" in holder.stderr.read()
    assert shm.leftovers(holder.pid) == []


def test_sigkill_orphans_are_reaped_by_the_next_start():
    holder = run_holder("sleep")
    assert holder.stdout.readline().strip() == "ready"
    held = shm.leftovers(holder.pid)
    assert len(held) == 5  # three MRs, a CQ and a QP
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    assert shm.leftovers(holder.pid) == held  # SIGKILL runs no cleanup: they are orphans now
    starter = subprocess.run([sys.executable, "-c", "from rdmalab import verbs as v; v.device.Context(name='soft0')"],
                             env={**os.environ, "PYTHONPATH": ROOT}, timeout=60)
    assert starter.returncode == 0
    assert shm.leftovers(holder.pid) == []


def test_closing_a_pd_closes_its_mrs_and_qps_as_pyverbs_does():
    with v.device.Context(name="soft0") as ctx:
        pd = v.pd.PD(ctx)
        mr = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        cq = v.cq.CQ(ctx, 4)
        qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq))
        pd.close()
        # real pyverbs frees them too, then crashes on use; here the use is a clear error
        with pytest.raises(v.pyverbs_error.PyverbsUserError, match="MR is closed"):
            mr.read(4, 0)
        with pytest.raises(v.pyverbs_error.PyverbsUserError, match="QP is closed"):
            qp.query(e.IBV_QP_STATE)
        assert cq.poll(1) == (0, [])  # the CQ did not depend on the PD


def test_mr_write_names_the_problem_instead_of_corrupting_memory():
    with v.device.Context(name="soft0") as ctx:
        mr = v.mr.MR(v.pd.PD(ctx), 64, e.IBV_ACCESS_LOCAL_WRITE)
        with pytest.raises(v.pyverbs_error.PyverbsUserError, match="do not fit in this MR of 64 bytes"):
            mr.write(b"x" * 10, 10, 60)
        with pytest.raises(v.pyverbs_error.PyverbsUserError, match="has only 3"):
            mr.write(b"abc", 8)
        assert mr.read(64, 0) == bytes(64)  # nothing was written


def test_a_full_shared_memory_directory_is_enomem_at_registration_and_leaves_nothing(monkeypatch):
    # without the reservation, the MR "registers" and the first write into a missing page is a SIGBUS
    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    with v.device.Context(name="soft0") as ctx, v.pd.PD(ctx) as pd:
        before = set(shm.leftovers(os.getpid()))
        monkeypatch.setattr(os, "posix_fallocate", full)
        with pytest.raises(v.pyverbs_error.PyverbsRDMAError) as caught:
            v.mr.MR(pd, 128 << 20, e.IBV_ACCESS_LOCAL_WRITE)
        assert caught.value.error_code == ENOMEM
        assert "128 MiB do not fit in" in str(caught.value) and "--shm-size" in str(caught.value)
        assert set(shm.leftovers(os.getpid())) == before


def test_a_small_dev_shm_is_passed_over_for_the_temp_directory(monkeypatch, tmp_path):
    real_statvfs = os.statvfs

    def shm_of(size):
        def statvfs(path):
            st = real_statvfs(path)
            if path != "/dev/shm":
                return st
            return os.statvfs_result((st.f_bsize, 4096, size // 4096, size // 4096, size // 4096, *st[5:]))
        return statvfs

    monkeypatch.delenv("RDMALAB_SHM_DIR", raising=False)
    monkeypatch.setattr(os, "statvfs", shm_of(64 << 20))      # Docker's default
    assert shm.directory() != "/dev/shm"
    monkeypatch.setattr(os, "statvfs", shm_of(8 << 30))
    assert shm.directory() == "/dev/shm"
    monkeypatch.setenv("RDMALAB_SHM_DIR", str(tmp_path))   # a roomier directory, chosen by hand
    assert shm.directory() == str(tmp_path)
    monkeypatch.setenv("RDMALAB_SHM_DIR", "/somewhere/roomy")   # one that is not there: said, not crashed on later
    with pytest.raises(SystemExit, match="RDMALAB_SHM_DIR='/somewhere/roomy' is not a directory this user can write"):
        shm.directory()
