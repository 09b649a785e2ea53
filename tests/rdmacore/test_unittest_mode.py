"""`python -m rdmalab.verbs.run --unittest DIR` on a small directory shaped like rdma-core's tests/:
each module imported on its own, outcomes per test in JSON, counts per module."""
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ARGS_PARSER = '''
import argparse, sys
class ArgsParser:
    args = None
    def get_config(self):
        return self.args
    def parse_args(self):
        p = argparse.ArgumentParser()
        p.add_argument("--dev")
        p.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=2)
        p.add_argument("--list-tests", action="store_true", default=False)
        ns, rest = p.parse_known_args()
        self.args = vars(ns)
        sys.argv[1:] = rest
parser = ArgsParser()
'''

TEST_SOFT0 = '''
import errno, unittest
import pyverbs.device as d
from pyverbs.pyverbs_error import PyverbsRDMAError
from args_parser import parser

class Soft0(unittest.TestCase):
    def test_device_list(self):
        assert parser.get_config() is not None
        self.assertEqual(d.get_device_list()[0].name, b"soft0")
    def test_unsupported_is_a_skip(self):
        try:
            d.Context(name="soft0").query_rt_values_ex()
        except PyverbsRDMAError as ex:
            if ex.error_code == errno.EOPNOTSUPP:
                raise unittest.SkipTest("real time values are not supported")
            raise
    def test_fails(self):
        self.assertEqual(1, 2)
    def test_errors(self):
        raise RuntimeError("boom")
'''


def test_unittest_mode_reports_each_test_and_module(tmp_path):
    (tmp_path / "args_parser.py").write_text(ARGS_PARSER)
    (tmp_path / "__init__.py").write_text("raise RuntimeError('the package __init__ is not run')\n")
    (tmp_path / "test_soft0.py").write_text(textwrap.dedent(TEST_SOFT0))
    (tmp_path / "test_vendor.py").write_text("import pyverbs.no_such_module\n")
    out = tmp_path / "result.json"
    result = subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", "--unittest", str(tmp_path), "--json", str(out)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env=dict(os.environ, PYTHONPATH=ROOT, RDMALAB_PROVIDER="soft"))
    assert result.returncode == 1, result.stdout + result.stderr   # a failure, an error, an unimportable module
    report = json.loads(out.read_text())
    outcomes = {test.rsplit(".", 1)[1]: info["outcome"] for test, info in report["tests"].items()}
    assert outcomes == {"test_device_list": "pass", "test_unsupported_is_a_skip": "skip", "test_fails": "fail",
                        "test_errors": "error"}
    assert "AssertionError" in report["tests"]["tests.test_soft0.Soft0.test_fails"]["reason"]
    assert report["modules"]["tests.test_soft0"] == {"pass": 1, "skip": 1, "fail": 1, "error": 1, "import_error": None}
    assert "no_such_module" in report["modules"]["tests.test_vendor"]["import_error"]
    assert "tests.test_soft0" in result.stdout and "does not import" in result.stdout


TEST_VIEW = '''
import json, os, shutil, subprocess, unittest

class View(unittest.TestCase):
    def test_sysfs_shows_soft0(self):
        pkey = subprocess.check_output(["cat", "/sys/class/infiniband/soft0/ports/1/pkeys/0"], text=True)
        gid = subprocess.check_output(["cat", "/sys/class/infiniband/soft0/ports/1/gids/1"], text=True)
        self.assertEqual((pkey, gid), ("0xffff\\n", "0000:0000:0000:0000:0000:ffff:7f00:0001\\n"))

    def test_netdev_is_lo(self):
        rows = json.loads(subprocess.check_output(["rdma", "link", "show", "-j"]))
        self.assertEqual([(r["ifname"], r["port"], r.get("netdev")) for r in rows],
                         [("soft0", 1, "lo" if shutil.which("ip") else None)])
'''


def test_the_runner_shows_soft0_as_the_kernel_would_to_its_tests_only(tmp_path):
    """rdma-core's tests find a device's netdev with `rdma link` and its P_Key table in sysfs: the runner
    answers both for soft0 (as root, sysfs in a mount namespace of its own), and the host keeps its /sys."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("the sysfs view needs root (a mount namespace)")
    (tmp_path / "args_parser.py").write_text(ARGS_PARSER)
    (tmp_path / "test_view.py").write_text(TEST_VIEW)
    out = tmp_path / "result.json"
    result = subprocess.run([sys.executable, "-m", "rdmalab.verbs.run", "--unittest", str(tmp_path), "--json", str(out)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env=dict(os.environ, PYTHONPATH=ROOT, RDMALAB_PROVIDER="soft"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert {t: i["outcome"] for t, i in json.loads(out.read_text())["tests"].items()} == {
        "tests.test_view.View.test_sysfs_shows_soft0": "pass", "tests.test_view.View.test_netdev_is_lo": "pass"}
    assert not os.path.exists("/sys/class/infiniband/soft0")
