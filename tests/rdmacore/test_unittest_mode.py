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
from pyverbs.cmid import CMEventChannel
from args_parser import parser

class Soft0(unittest.TestCase):
    def test_device_list(self):
        assert parser.get_config() is not None
        self.assertEqual(d.get_device_list()[0].name, b"soft0")
    def test_rdma_cm_is_a_gap(self):
        try:
            CMEventChannel()
        except PyverbsRDMAError as ex:
            if ex.error_code == errno.EOPNOTSUPP:
                raise unittest.SkipTest("rdma_cm is not supported")
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
    assert outcomes == {"test_device_list": "pass", "test_rdma_cm_is_a_gap": "skip", "test_fails": "fail",
                        "test_errors": "error"}
    assert "AssertionError" in report["tests"]["tests.test_soft0.Soft0.test_fails"]["reason"]
    assert report["modules"]["tests.test_soft0"] == {"pass": 1, "skip": 1, "fail": 1, "error": 1, "import_error": None}
    assert "no_such_module" in report["modules"]["tests.test_vendor"]["import_error"]
    assert "tests.test_soft0" in result.stdout and "does not import" in result.stdout
