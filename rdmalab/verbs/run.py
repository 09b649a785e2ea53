"""Run an unmodified pyverbs program on the emulated NIC:

    python -m rdmalab.verbs.run program.py [args...]

Its `import pyverbs...` lines resolve to rdmalab.verbs.soft, whose modules carry pyverbs' names.
"""
import importlib
import os
import runpy
import sys

from rdmalab.verbs import ENUM_MODULES, MODULES

SOFT = "rdmalab.verbs.soft"


def install():
    """Make `pyverbs` and its modules name the emulated NIC in this interpreter."""
    sys.modules["pyverbs"] = importlib.import_module(SOFT)
    for name in MODULES + ENUM_MODULES:
        sys.modules[f"pyverbs.{name}"] = importlib.import_module(f"{SOFT}.{name}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if not os.path.isfile(argv[0]):
        print(f"rdmalab.verbs.run: no such program: {argv[0]}", file=sys.stderr)
        return 2
    install()
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
