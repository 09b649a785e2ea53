"""The corpus of pyverbs programs in the shapes found in the wild (tests/wild/README.md) runs unchanged.

On soft0 everywhere, through `python -m rdmalab.verbs.run`; where there is a real device (the Soft-RoCE
guest: make test-softroce), also with the real pyverbs of the program's generation (Debian's 44 for the
programs that use pyverbs <= 58's enum modules, the guest's v59 build for those that use >= 59's), and
the outcome must be the same: exit 0 and the program's own "OK NAME" line."""
import glob
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NOT_PROGRAMS = {"rdma_helpers", "cm_sync_server", "cm_sync_client"}   # a module, and the driver's two sides
PROGRAMS = sorted(p for p in glob.glob(os.path.join(HERE, "*.py"))
                  if os.path.basename(p)[:-3] not in NOT_PROGRAMS and not os.path.basename(p).startswith("test_"))
NEWER = "/opt/rdma-core"          # the guest's v59 build (softroce/vm.sh)
TIMEOUT = 60 * float(os.environ.get("RDMALAB_TIME_SCALE", "1"))


def generation(path):
    """'59' for a program that imports pyverbs >= 59's enum modules, '58' for <= 58's, 'both' for one that
    imports either (it detects the version), None for one that imports neither (judged by its import lines:
    a docstring may name both)."""
    imports = "\n".join(line for line in open(path) if line.lstrip().startswith(("import ", "from ")))
    new = "libibverbs_enums" in imports or "librdmacm_enums" in imports
    old = re.search(r"\bpyverbs\.(cm_)?enums\b|\bimport (cm_)?enums\b", imports) is not None
    return "both" if new and old else "59" if new else "58" if old else None


def outcome(command, path, env):
    name = os.path.basename(path)[:-3]
    done = subprocess.run(command + [path], capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=ROOT)
    ok = done.returncode == 0 and f"OK {name}" in done.stdout.splitlines()
    return ok, (done.stdout + done.stderr)[-1500:]


def on_device():
    return os.environ.get("RDMALAB_PROVIDER") == "pyverbs"


@pytest.mark.parametrize("path", PROGRAMS, ids=[os.path.basename(p)[:-3] for p in PROGRAMS])
def test_a_program_from_the_wild_runs_unchanged(path):
    env = {k: v for k, v in os.environ.items() if k != "RDMALAB_PROVIDER"}
    soft_ok, soft_said = outcome([sys.executable, "-m", "rdmalab.verbs.run"], path, dict(env, PYTHONPATH=ROOT))
    assert soft_ok, f"on soft0:\n{soft_said}"
    if generation(path) == "both":   # soft0 as pyverbs 44 too: the program's other path
        soft_ok, soft_said = outcome([sys.executable, "-m", "rdmalab.verbs.run"], path,
                                     dict(env, PYTHONPATH=ROOT, RDMALAB_PYVERBS="44"))
        assert soft_ok, f"on soft0 with RDMALAB_PYVERBS=44:\n{soft_said}"
    if not on_device():
        return   # (the real device's half runs in the Soft-RoCE guest: make test-softroce)
    for newer in {"59": [True], "58": [False], None: [False], "both": [False, True]}[generation(path)]:
        real = dict(env)
        if newer:
            real.update(PYTHONPATH=f"{NEWER}/python", LD_LIBRARY_PATH=f"{NEWER}/lib")
        else:
            real.pop("PYTHONPATH", None)   # Debian's python3-pyverbs 44
        real_ok, real_said = outcome(["/usr/bin/python3"], path, real)
        assert real_ok, f"soft0 ran it, the real pyverbs on the device ({'v59' if newer else '44'}) did not:\n{real_said}"
