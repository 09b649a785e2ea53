"""`rdmalab doctor`: what it reports here (soft0) or on a real device, and its advice."""
import json
import os
import re
import resource
import subprocess
import sys

import pytest

from rdmalab.doctor import collect, doctor, memlock   # (the package attribute rdmalab.doctor is the function)
from rdmalab import verbs as v
from rdmalab.errors import CompletionError, check, explain_error, explain_status
from rdmalab.verbs import link_pyverbs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_doctor(*args, **env):
    return subprocess.run([sys.executable, "-m", "rdmalab", "doctor", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT, **env), timeout=60, cwd=ROOT)


def test_doctor_json_names_the_provider_its_reason_the_device_and_a_next_step():
    out = run_doctor("--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["provider"] == v.PROVIDER and report["reason"] == v.REASON
    route = report["route"]
    port = report["devices"][0]["ports"][0]
    assert port["state"] == "ACTIVE" and port["active_mtu"] == 1024
    chosen = [g for g in port["gids"] if g["index"] == route["gid_index"]]
    assert chosen and chosen[0]["type"] == "RoCE v2" and chosen[0]["gid"].startswith(v.IPV4_MAPPED_PREFIX)
    assert route["path_mtu"] == 1024
    assert report["next_steps"]
    if v.PROVIDER == "soft":
        assert report["devices"][0]["name"] == "soft0"
        assert "emulated NIC" in report["next_steps"][0]
        from rdmalab.verbs.soft import shm
        assert report["soft_memory"]["directory"] == shm.directory() and report["soft_memory"]["free_bytes"] > 0
    else:
        assert "soft_memory" not in report
        assert report["devices"][0]["name"].startswith("rxe") and "real RDMA" in report["next_steps"][0]


def test_doctor_text_has_the_table_and_the_next_steps():
    out = run_doctor()
    assert out.returncode == 0, out.stderr
    assert re.search(rf"^provider +{v.PROVIDER}: {re.escape(v.REASON)}$", out.stdout, re.M), out.stdout
    assert "Next steps:" in out.stdout and "memlock" in out.stdout


@pytest.mark.skipif(v.PROVIDER != "soft", reason="checks the advice given where pyverbs is missing")
def test_without_pyverbs_the_advice_says_how_to_install_it_and_make_a_device():
    report = collect()
    if report["pyverbs"] is not None:
        pytest.skip("pyverbs is installed here")
    steps = " ".join(report["next_steps"])
    assert "apt-get install python3-pyverbs" in steps and "rdma link add rxe0 type rxe netdev" in steps
    assert "linux-modules-extra-$(uname -r)" in steps


def test_a_provider_that_cannot_run_is_one_clear_line_and_exit_1():
    out = run_doctor(RDMALAB_PROVIDER="infiniband")
    assert out.returncode == 1
    assert out.stderr.strip() == "rdmalab: RDMALAB_PROVIDER='infiniband' is not one of auto, soft, pyverbs"


def test_the_notebook_view_is_an_html_table():
    page = doctor()._repr_html_()
    assert page.startswith("<div>") and "<table>" in page and f"<code>{v.PROVIDER}</code>" in page


def test_a_low_memlock_limit_is_flagged_with_the_fix(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(resource, "getrlimit", lambda what: (64 << 10, 64 << 10))
    m = memlock()
    assert not m["ok"] and "64 KiB is too little" in m["note"] and "--ulimit memlock=-1" in m["note"]
    monkeypatch.setattr(resource, "getrlimit", lambda what: (resource.RLIM_INFINITY,) * 2)
    assert memlock() == {"soft_bytes": None, "hard_bytes": None, "ok": True, "note": "enough"}


def test_completion_errors_explain_themselves():
    wc = type("WC", (), {"status": 12})()
    with pytest.raises(CompletionError, match=r"status 12 \(RETRY_EXC_ERR\): .*IPv4-mapped RoCE v2 GID"):
        check(wc, "the RDMA WRITE")
    ok = type("WC", (), {"status": 0})()
    assert check(ok) is ok
    assert explain_status(10).startswith("10 (REM_ACCESS_ERR): the peer's rkey")
    assert "ulimit -l" in explain_error(type("E", (), {"error_code": 12})())
    assert explain_error(ValueError()) == ""


def test_link_pyverbs_links_only_pyverbs_from_a_matching_system_python(tmp_path, monkeypatch):
    system = tmp_path / "dist-packages"
    (system / "pyverbs").mkdir(parents=True)
    (system / "pyverbs" / "__init__.py").write_text("WHERE = 'system'\n")
    (system / "unrelated_package.py").write_text("")
    site = tmp_path / "venv-site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(system))     # what the stand-in system Python sees
    if v.PROVIDER == "pyverbs":
        pytest.skip("pyverbs is importable here already")
    message = link_pyverbs.link(site=str(site), system_python=sys.executable)
    assert message == f"linked the system's pyverbs ({system / 'pyverbs'}) into {site}"
    probe = ("import site, sys; site.addsitedir(sys.argv[1]); import pyverbs; print(pyverbs.WHERE)\n"
             "try:\n    import unrelated_package\nexcept ImportError:\n    print('only pyverbs')")
    out = subprocess.run([sys.executable, "-c", probe, str(site)], capture_output=True, text=True,
                         env={k: val for k, val in os.environ.items() if k != "PYTHONPATH"})
    assert out.stdout.split() == ["system", "only", "pyverbs"], out.stderr


def test_link_pyverbs_refuses_a_pyverbs_built_for_another_python(monkeypatch, tmp_path):
    if v.PROVIDER == "pyverbs":
        pytest.skip("pyverbs is importable here already")
    monkeypatch.setattr(link_pyverbs, "system_pyverbs", lambda python: ("3.9", "/usr/lib/python3/dist-packages/pyverbs"))
    message = link_pyverbs.link(site=str(tmp_path))
    assert "built for Python 3.9" in message and "make lab PYTHON=/usr/bin/python3" in message
    assert os.listdir(tmp_path) == []


def test_the_gid_table_reads_as_show_gids_and_names_the_gid_index_nccl_wants():
    assert v.ipv4_of("0000:0000:0000:0000:0000:ffff:0a0a:0001") == "10.10.0.1"
    assert v.ipv4_of("fe80:0000:0000:0000:0202:c9ff:fe5a:b000") == ""
    report = doctor()
    text, route = str(report), report.data["route"]
    assert f"NCCL_IB_GID_INDEX={route['gid_index']} on this device" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("GID")]
    assert any(row[1] == str(route["gid_index"]) and row[3].count(".") == 3 for row in rows)   # its IPv4 address


@pytest.mark.skipif(v.PROVIDER != "soft" or not os.path.isdir("/dev/shm"), reason="soft0's choice of /dev/shm")
def test_a_small_dev_shm_is_passed_over_and_the_doctor_says_how_to_give_it_room(monkeypatch):
    """A container's /dev/shm is 64 MiB unless run with --shm-size: soft0 keeps memory in the temp directory
    then, and the doctor says why and how to give /dev/shm room. Here /dev/shm is made "small" by asking for
    one byte more than it holds."""
    from rdmalab.verbs.soft import shm
    import tempfile
    fs = os.statvfs("/dev/shm")
    size = fs.f_blocks * fs.f_frsize
    monkeypatch.delenv("RDMALAB_SHM_DIR", raising=False)
    monkeypatch.setattr(shm, "ENOUGH_SHM", size + 1)
    assert shm.directory() == tempfile.gettempdir()
    steps = " ".join(collect()["next_steps"])
    assert f"/dev/shm holds only {size >> 20} MiB" in steps and "docker run --shm-size=1g" in steps, steps
    monkeypatch.setattr(shm, "ENOUGH_SHM", size)
    assert shm.directory() == "/dev/shm" and shm.small_dev_shm() is None
    assert "--shm-size" not in " ".join(collect()["next_steps"])


def test_in_the_container_the_doctor_points_to_a_linux_machine_not_to_installing_pyverbs():
    out = run_doctor("--json", RDMALAB_CONTAINER="1")
    steps = " ".join(json.loads(out.stdout)["next_steps"])
    if v.PROVIDER == "soft":
        assert "container image, which has no pyverbs" in steps and "apt-get install python3-pyverbs" not in steps
    assert "ulimit -l" not in steps
