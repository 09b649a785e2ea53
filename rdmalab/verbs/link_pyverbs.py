"""Make the distribution's pyverbs importable from the lab's venv.

pyverbs ships with rdma-core (Debian/Ubuntu: python3-pyverbs), not on PyPI, and a venv does not
see the system's packages. This links only pyverbs in (a .pth file naming a directory that holds a
symlink to it), and only when the system's Python has the same version as the venv's: pyverbs is
compiled for one. `make lab` and `make test` run it; it is harmless where there is no pyverbs.

    python -m rdmalab.verbs.link_pyverbs
"""
import os
import subprocess
import sys
import sysconfig

SYSTEM_PYTHON = "/usr/bin/python3"
LINK_DIR_NAME = "rdmalab-system-pyverbs"


def system_pyverbs(python=SYSTEM_PYTHON):
    """(python version, pyverbs directory) of the system Python, or None when it has no pyverbs."""
    probe = "import os, sys, pyverbs; print('%d.%d' % sys.version_info[:2]); print(os.path.dirname(pyverbs.__file__))"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    if out.returncode != 0:
        return None
    version, path = out.stdout.split()
    return version, path


def link(site=None, system_python=SYSTEM_PYTHON):
    """Links the system's pyverbs into `site` (this interpreter's site-packages); returns what it did."""
    try:
        import pyverbs  # noqa: F401
        return f"pyverbs already importable ({os.path.dirname(pyverbs.__file__)})"
    except ImportError:
        pass
    found = system_pyverbs(system_python)
    if found is None:
        return "no system pyverbs: the lab runs on the emulated NIC (rdmalab doctor says how to get real RDMA)"
    version, path = found
    mine = "%d.%d" % sys.version_info[:2]
    if version != mine:
        return (f"the system's pyverbs is built for Python {version}, this venv runs {mine}: create the venv "
                f"with {SYSTEM_PYTHON} (make clean; make lab PYTHON={SYSTEM_PYTHON})")
    site = site or sysconfig.get_paths()["purelib"]
    link_dir = os.path.join(site, LINK_DIR_NAME)
    os.makedirs(link_dir, exist_ok=True)
    target = os.path.join(link_dir, "pyverbs")
    if not os.path.islink(target):
        os.symlink(path, target)
    with open(os.path.join(site, LINK_DIR_NAME + ".pth"), "w") as pth:
        pth.write(link_dir + "\n")
    return f"linked the system's pyverbs ({path}) into {site}"


if __name__ == "__main__":
    print("rdmalab:", link())
