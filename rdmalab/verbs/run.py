"""Run an unmodified pyverbs program, or rdma-core's own test suite, on the emulated NIC:

    python -m rdmalab.verbs.run program.py [args...]
    python -m rdmalab.verbs.run --unittest DIR [--json FILE] [--provider soft|pyverbs]
                                [--timeout S] [rdma-core's options: --dev --port --gid -v ...] [TEST ...] [-k PAT]

A program's `import pyverbs...` lines resolve to rdmalab.verbs.soft, whose modules carry pyverbs'
names; a module soft0 does not have (pyverbs.providers.mlx5, ...) fails to import as it would where
pyverbs was built without it.

--unittest runs rdma-core's tests/ directory DIR (tests/rdmacore/fetch.py fetches it) as its
run_tests.py does, DIR on sys.path and its args_parser taking its options, except that each test
module is imported on its own: one that cannot import is reported (as an error of that module) and
the others run. TEST names a module, class or test (tests.test_cq.CQTest), -k a pattern, as unittest
takes them. It prints one line per test with -v, and the counts per module; --json FILE writes
{"tests": {test id: {"outcome": pass|skip|fail|error, "reason": ...}}, "modules": {...}}.
--provider pyverbs runs them on the real pyverbs found on sys.path instead (in the Soft-RoCE guest),
for softroce/compare_rdma_core.py to compare. --timeout (default 120 s, times RDMALAB_TIME_SCALE)
ends a test that hangs, as an error.
"""
import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys
import types

from rdmalab import settings
from rdmalab.verbs import ENUM_MODULES, MODULES
from rdmalab.verbs.soft import pyverbs_generation

SOFT = "rdmalab.verbs.soft"
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyverbs_shim")


class _SoftPyverbs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of `pyverbs` and `pyverbs.X.Y` get rdmalab.verbs.soft and rdmalab.verbs.soft.X.Y; those of
    the enum modules only if they are of the program's pyverbs generation (soft/pyverbs_generation.py)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "pyverbs" and not fullname.startswith("pyverbs."):
            return None
        if not pyverbs_generation.admit(fullname[len("pyverbs."):]):
            raise pyverbs_generation.refusal(fullname[len("pyverbs."):])
        soft_name = SOFT + fullname[len("pyverbs"):]
        try:
            found = importlib.util.find_spec(soft_name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} (the emulated NIC soft0 has no such module)",
                                      name=fullname)
        return importlib.util.spec_from_loader(fullname, self, is_package=found.submodule_search_locations is not None)

    def create_module(self, spec):
        return importlib.import_module(SOFT + spec.name[len("pyverbs"):])

    def exec_module(self, module):
        pass


def install():
    """Make `pyverbs` and its modules name the emulated NIC in this interpreter. The enum modules are left
    for the finder, which admits one generation's (RDMALAB_PYVERBS's, else that of the first imported)."""
    if not any(isinstance(f, _SoftPyverbs) for f in sys.meta_path):
        sys.meta_path.insert(0, _SoftPyverbs())
    if not isinstance(sys.modules.get("pyverbs"), _Pyverbs):
        sys.modules["pyverbs"] = _Pyverbs(importlib.import_module(SOFT))
    for name in MODULES:
        sys.modules[f"pyverbs.{name}"] = importlib.import_module(f"{SOFT}.{name}")
    version = settings.pyverbs_version()
    if version is not None:
        pyverbs_generation.decide(pyverbs_generation.generation_of(version), f"RDMALAB_PYVERBS={version}")


class _Pyverbs(types.ModuleType):
    """The package `pyverbs` as a program sees it: rdmalab.verbs.soft under pyverbs' name, so that `from
    pyverbs import enums` asks the finder for pyverbs.enums (and the rule of the program's generation), as
    an install would; with soft0's package itself, Python would find rdmalab.verbs.soft.enums instead."""

    def __init__(self, soft):
        super().__init__("pyverbs", soft.__doc__)
        self.__path__, self.__file__, self._soft = soft.__path__, soft.__file__, soft

    def __getattr__(self, name):   # (only for names not set yet: a submodule not imported through pyverbs.X)
        if name.startswith("_"):
            return getattr(self._soft, name)
        try:
            return importlib.import_module(f"pyverbs.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module 'pyverbs' has no attribute {name!r}") from None


def uninstall():
    """Undo install(): `pyverbs` is the installed one again, if any (tests that install for a while)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _SoftPyverbs)]
    for name in [n for n in sys.modules if n == "pyverbs" or n.startswith("pyverbs.")]:
        del sys.modules[name]
    pyverbs_generation.reset()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--unittest":
        from rdmalab.verbs.rdmacore import run_unittest
        return run_unittest(argv[1:], install)
    if not os.path.isfile(argv[0]):
        print(f"rdmalab.verbs.run: no such program: {argv[0]}", file=sys.stderr)
        return 2
    install()
    # processes the program starts with sys.executable get soft0's pyverbs too (pyverbs_shim/)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM, os.environ.get("PYTHONPATH")) if p)
    sys.argv = list(argv)
    # as `python3 program.py` does: the program's own folder first, so a module beside it imports
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
