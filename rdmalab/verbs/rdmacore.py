"""`python -m rdmalab.verbs.run --unittest DIR`: rdma-core's own tests, per test, on soft0 or real pyverbs.

rdma-core's run_tests.py loads DIR/__init__.py as the package `tests`, which imports every test
module at once, so one module that cannot import stops them all. Here `tests` is the same package
(DIR its path) without that eager import: each test_*.py is imported on its own and a failure to
import is reported against the module. DIR itself is on sys.path (base.py imports `args_parser`).
"""
import argparse
import collections
import json
import os
import signal
import sys
import time
import traceback
import types
import unittest

OUTCOMES = ("pass", "skip", "fail", "error")


class TestTimeout(Exception):
    pass


class Recorder(unittest.TestResult):
    """Keeps {test id: {"outcome", "reason", "seconds"}}; prints a line per test when verbose."""

    def __init__(self, verbose, timeout):
        super().__init__()
        self.verbose, self.timeout = verbose, timeout
        self.results = {}
        self._started = 0.0

    def startTest(self, test):
        super().startTest(test)
        self._started = time.monotonic()
        if self.timeout:
            signal.alarm(self.timeout)

    def stopTest(self, test):
        if self.timeout:
            signal.alarm(0)
        super().stopTest(test)

    def _record(self, test, outcome, reason=""):
        tid = test.id()
        self.results[tid] = {"outcome": outcome, "reason": reason,
                             "seconds": round(time.monotonic() - self._started, 3)}
        if self.verbose:
            print(f"{tid} ... {outcome}{': ' + reason.splitlines()[-1] if reason else ''}", flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "pass")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skip", str(reason))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "fail", _short(err))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", _short(err))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "fail", "unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:   # the test fails as a whole; keep the first subtest's reason
            outcome = "fail" if issubclass(err[0], test.failureException) else "error"
            self._record(test, outcome, _short(err))


def _short(err):
    """The exception's last line and where it was raised: enough to tell failures apart."""
    kind, value, tb = err
    frames = traceback.extract_tb(tb)
    where = f" [{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}]" if frames else ""
    text = "".join(traceback.format_exception_only(kind, value)).strip()
    return text[-600:] + where


def _alarm(signum, frame):
    raise TestTimeout("the test ran past --timeout")


def _options(argv):
    p = argparse.ArgumentParser(prog="python -m rdmalab.verbs.run --unittest", add_help=False)
    p.add_argument("dir")
    p.add_argument("--json")
    p.add_argument("--provider", choices=("soft", "pyverbs"), default="soft")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("-k", dest="patterns", action="append", default=[])
    return p.parse_known_args(argv)


def _package(directory):
    """The package `tests` over DIR, without running its __init__ (which imports every module)."""
    for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
        del sys.modules[name]
    package = types.ModuleType("tests")
    package.__path__ = [directory]
    package.__file__ = os.path.join(directory, "__init__.py")
    package.__package__ = "tests"
    sys.modules["tests"] = package
    return package


RDMA_TOOL = """#!/bin/sh
# iproute2's `rdma link show -j`, as it would list soft0 (port 1, its netdev); anything else: the real tool
if [ "$*" = "link show -j" ]; then
  echo '[{"ifindex":0,"ifname":"soft0","port":1,"state":"ACTIVE","physical_state":"LINK_UP"%s}]'
  exit 0
fi
PATH=${PATH#*:} exec rdma "$@"
"""


def _rdma_tool_lists_soft0():
    """rdma-core's RDMATestCase asks `rdma link show -j` for the device's netdev, then `ip -j addr show`
    for its address, which its rdma_cm tests connect to. soft0 is no kernel device, so the real tool
    does not list it (and fails where the kernel has no RDMA): a stand-in first on PATH answers that one
    question for soft0, whose netdev is the loopback interface `lo` (rdmalab.verbs.soft.cmid). Without
    iproute2's `ip` the tests could not read lo's address, so then it lists no netdev (and the rdma_cm
    tests skip, saying the device has no net interface)."""
    import atexit
    import shutil
    import tempfile
    directory = tempfile.mkdtemp(prefix="rdmalab-rdma-tool-")
    atexit.register(shutil.rmtree, directory, True)
    path = os.path.join(directory, "rdma")
    with open(path, "w") as tool:
        tool.write(RDMA_TOOL % (',"netdev":"lo"' if shutil.which("ip") else ""))
    os.chmod(path, 0o755)
    os.environ["PATH"] = directory + os.pathsep + os.environ.get("PATH", "")


def sysfs_entries():
    """What /sys/class/infiniband/soft0 would hold if soft0 were a kernel device, as rxe's entry shows
    its device (path under soft0/ -> contents), from soft0's own attributes."""
    from rdmalab.verbs.soft import device
    guid = f"{device.NODE_GUID:016x}"
    entries = {"node_type": "1: CA", "node_guid": ":".join(guid[i:i + 4] for i in range(0, 16, 4)),
               "sys_image_guid": ":".join(guid[i:i + 4] for i in range(0, 16, 4)),
               "fw_ver": device.DEVICE_ATTR["fw_version"], "node_desc": f"{device.DEVICE_NAME} (rdmalab)",
               "ports/1/state": "4: ACTIVE", "ports/1/phys_state": "5: LinkUp", "ports/1/link_layer": "Ethernet",
               "ports/1/lid": "0x0", "ports/1/sm_lid": "0x0", "ports/1/lid_mask_count": "0", "ports/1/sm_sl": "0",
               "ports/1/cap_mask": f"{device.PORT_ATTR['port_cap_flags']:#010x}", "ports/1/pkeys/0": "0xffff"}
    for index, gid in enumerate(device.GIDS):
        entries[f"ports/1/gids/{index}"] = gid
        entries[f"ports/1/gid_attrs/types/{index}"] = "RoCE v2"
        entries[f"ports/1/gid_attrs/ndevs/{index}"] = "lo"
    return entries


def _sysfs_shows_soft0():
    """rdma-core's test_get_pkey_index reads the device's P_Key table in sysfs, where the kernel shows each
    RDMA device. soft0 is no kernel device, so in a mount namespace of this process's own (the host's /sys
    untouched) an overlay adds /sys/class/infiniband/soft0 (sysfs_entries()) to /sys/class. Needs root and
    overlayfs; otherwise that test fails as before, and this says why."""
    import atexit
    import ctypes
    import shutil
    import subprocess
    import tempfile
    if os.geteuid() != 0:
        return "not root: a mount namespace needs CAP_SYS_ADMIN"
    lower = tempfile.mkdtemp(prefix="rdmalab-sysfs-")
    atexit.register(shutil.rmtree, lower, True)
    for path, text in sysfs_entries().items():
        os.makedirs(os.path.dirname(os.path.join(lower, "infiniband", "soft0", path)), exist_ok=True)
        with open(os.path.join(lower, "infiniband", "soft0", path), "w") as out:
            out.write(text + "\n")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0:   # CLONE_NEWNS: mounts from here on are this process's (and its children's)
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    def mount(*args):
        try:
            done = subprocess.run(["mount", *args], capture_output=True, text=True)
        except OSError as error:   # (no util-linux mount)
            return str(error)
        return (done.stderr.strip() or f"exit status {done.returncode}") if done.returncode else None
    failed = mount("--make-rprivate", "/")
    if failed:
        return f"mount --make-rprivate /: {failed}"
    failed = mount("-t", "overlay", "overlay", "-o", f"lowerdir={lower}:/sys/class", "/sys/class")
    if failed and os.path.isdir("/sys/class/infiniband"):
        # no overlayfs (the Soft-RoCE guest's kernel has only the modules it needs), but a kernel RDMA
        # device: a tmpfs over /sys/class/infiniband holds soft0's entry and links to the devices' own
        devices = {name: os.path.realpath(os.path.join("/sys/class/infiniband", name))
                   for name in os.listdir("/sys/class/infiniband")}
        failed = mount("-t", "tmpfs", "tmpfs", "/sys/class/infiniband")
        if not failed:
            for name, target in devices.items():
                os.symlink(target, os.path.join("/sys/class/infiniband", name))
            shutil.copytree(os.path.join(lower, "infiniband", "soft0"), "/sys/class/infiniband/soft0")
    return f"no overlayfs to add it to /sys/class ({failed})" if failed else None


def run_unittest(argv, install_soft):
    options, rest = _options(argv)
    directory = os.path.abspath(options.dir)
    if not os.path.isfile(os.path.join(directory, "args_parser.py")):
        print(f"rdmalab.verbs.run: {options.dir} is not rdma-core's tests/ directory (no args_parser.py)",
              file=sys.stderr)
        return 2
    if options.provider == "soft":
        install_soft()
        _rdma_tool_lists_soft0()
        why_not = _sysfs_shows_soft0()
        if why_not:
            print(f"rdmalab.verbs.run: no /sys/class/infiniband/soft0 for the tests that read it ({why_not})",
                  file=sys.stderr)
    sys.path.insert(0, directory)
    # rdma-core's args_parser takes --dev --port --gid -v --list-tests ... and leaves the rest in sys.argv
    sys.argv = [os.path.join(directory, "run_tests.py")] + rest
    from args_parser import parser
    parser.parse_args()
    config = parser.get_config()
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    package = _package(directory)

    loader = unittest.TestLoader()
    if options.patterns:
        loader.testNamePatterns = [p if "*" in p else f"*{p}*" for p in options.patterns]
    modules, suite = {}, unittest.TestSuite()
    wanted_modules = {n.split(".")[1] for n in names if n.startswith("tests.") and n.count(".") >= 1}
    for filename in sorted(os.listdir(directory)):
        if not (filename.startswith("test_") and filename.endswith(".py")):
            continue
        short = filename[:-3]
        if wanted_modules and short not in wanted_modules:
            continue
        name = f"tests.{short}"
        try:
            module = __import__(name, fromlist=["_"])
        except BaseException as error:   # SkipTest or SystemExit at import time count as errors too
            modules[name] = {"import_error": _short(sys.exc_info())}
            if isinstance(error, KeyboardInterrupt):
                raise
            continue
        setattr(package, short, module)
        modules[name] = {"import_error": None}
        if not names or name in names:
            suite.addTests(loader.loadTestsFromModule(module))
    for name in names:
        if name.count(".") >= 2 and name.split(".")[0] == "tests" and f"tests.{name.split('.')[1]}" in sys.modules:
            suite.addTests(loader.loadTestsFromName(name))
    if config.get("list_tests"):
        for test in _flatten(suite):
            print(test.id())
        return 0

    from rdmalab import settings
    scale = settings.time_scale()
    timeout = int(options.timeout * scale) if options.timeout > 0 else 0
    previous = signal.signal(signal.SIGALRM, _alarm) if timeout else None
    result = Recorder(verbose=bool(config.get("verbosity")), timeout=timeout)
    started = time.monotonic()
    try:
        suite.run(result)
    finally:
        if timeout:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        if options.provider == "soft":   # the tests' processes end in os._exit (multiprocessing) or are
            from rdmalab.verbs import emulated   # killed: what they held is reaped now, not at the next start
            emulated.reap_orphans()
    for test, reason in result.errors:   # setUpClass/module fixtures fail outside any test
        if test.id() not in result.results:
            result.results[test.id()] = {"outcome": "error", "reason": reason.strip().splitlines()[-1], "seconds": 0}
    report = _counts(result.results, modules)
    seconds = time.monotonic() - started
    _print_counts(report, options.provider, seconds)
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"provider": options.provider, "dir": directory, "seconds": round(seconds, 1),
                       "modules": report, "tests": result.results}, out, indent=1, sort_keys=True)
    broken = sum(m["fail"] + m["error"] for m in report.values()) + sum(bool(m["import_error"]) for m in report.values())
    return 1 if broken else 0


def _flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def _module_of(test_id):
    parts = test_id.split(".")
    if test_id.startswith("setUpClass (") or test_id.startswith("setUpModule ("):
        parts = test_id.split("(", 1)[1].rstrip(")").split(".")
    return ".".join(parts[:2])


def _counts(results, modules):
    report = {name: dict({o: 0 for o in OUTCOMES}, import_error=info["import_error"]) for name, info in modules.items()}
    for tid, info in results.items():
        report.setdefault(_module_of(tid), dict({o: 0 for o in OUTCOMES}, import_error=None))[info["outcome"]] += 1
    return report


def _print_counts(report, provider, seconds):
    total = collections.Counter()
    print(f"\nrdma-core's tests on {'soft0' if provider == 'soft' else 'the real pyverbs'}, per module:")
    print(f"{'module':34} {'pass':>5} {'skip':>5} {'fail':>5} {'error':>5}")
    for name, m in sorted(report.items()):
        if m["import_error"]:
            print(f"{name:34} does not import: {m['import_error'].splitlines()[0][:120]}")
            total["unimported"] += 1
            continue
        print(f"{name:34} {m['pass']:5} {m['skip']:5} {m['fail']:5} {m['error']:5}")
        total.update({o: m[o] for o in OUTCOMES})
    print(f"{'total':34} {total['pass']:5} {total['skip']:5} {total['fail']:5} {total['error']:5}"
          f"   ({total['unimported']} modules do not import; {seconds:.0f} s)")
