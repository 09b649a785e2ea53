"""Fetch rdma-core's own test suite (its tests/ directory) from PyPI, cached; print where it is.

    python tests/rdmacore/fetch.py            -> prints .../rdma-core/tests
    python tests/rdmacore/fetch.py --source   -> prints the rdma-core source tree (to build pyverbs)
    python tests/rdmacore/fetch.py --sdist    -> prints the sdist's path

The tests are never copied into this repository: PyPI's `pyverbs` sdist is all of rdma-core (its
pyproject builds rdma-core with cmake), tests/ included. `pip download` gets it once into
~/.cache/rdmalab/rdma-core/ (RDMALAB_CACHE overrides ~/.cache/rdmalab; RDMALAB_RDMA_CORE_VERSION
the version, 59.0). Debian 12's matching 44.0 orig tarball is not served by its mirrors.
"""
import os
import subprocess
import sys
import tarfile

VERSION = os.environ.get("RDMALAB_RDMA_CORE_VERSION", "59.0")
CACHE = os.path.join(os.environ.get("RDMALAB_CACHE") or os.path.expanduser("~/.cache/rdmalab"), "rdma-core")


def sdist():
    path = os.path.join(CACHE, f"pyverbs-{VERSION}.tar.gz")
    if not os.path.isfile(path):
        os.makedirs(CACHE, exist_ok=True)
        # the host's pip settings may point at wheels only or constrain versions: ask PyPI plainly
        env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_NO_INDEX")}
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "--dest", CACHE, f"pyverbs=={VERSION}"], check=True, env=env, stdout=sys.stderr)
    return path


def source():
    """rdma-core's source tree, unpacked once next to the sdist."""
    root = os.path.join(CACHE, f"pyverbs-{VERSION}")
    tree = os.path.join(root, "rdma-core")
    if not os.path.isfile(os.path.join(tree, "tests", "run_tests.py")):
        archive = sdist()
        partial = root + ".partial"
        if os.path.isdir(partial):
            import shutil
            shutil.rmtree(partial)
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(partial)
        (inner,) = os.listdir(partial)   # pyverbs-59.0/
        if os.path.isdir(root):
            import shutil
            shutil.rmtree(root)
        os.rename(os.path.join(partial, inner), root)
        os.rmdir(partial)
    return tree


def tests():
    return os.path.join(source(), "tests")


def main(argv):
    what = argv[0] if argv else "--tests"
    chosen = {"--tests": tests, "--source": source, "--sdist": sdist}.get(what)
    if chosen is None:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(chosen())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
