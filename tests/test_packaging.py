"""The setup promises: the README's commands, the guest's Python packages, the VM harness's errors."""
import os
import re
import shutil
import subprocess
import tempfile
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def names(requirements):
    return {re.split(r"[<>=!~\[ ;]", r.strip(), maxsplit=1)[0].lower() for r in requirements
            if r.strip() and not r.strip().startswith("#")}


def test_readme_opens_with_the_two_commands():
    readme = open(os.path.join(ROOT, "README.md")).read()
    first_block = readme.split("```")[1]
    assert "make lab" in first_block and "make test" in first_block
    assert "make test-softroce" in readme


def test_the_guest_has_every_package_the_tests_and_lessons_need():
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    # JupyterLab and the browser test's Playwright run on the host only (papermill runs the lessons there);
    # hypothesis generates the fuzzer's programs on the host (tests/fuzz/generate.py), the guest only runs them
    needed = names(project["dependencies"] + project["optional-dependencies"]["test"]) - {"jupyterlab", "playwright",
                                                                                         "hypothesis"}
    guest = names(open(os.path.join(ROOT, "softroce", "requirements-guest.txt")).read().splitlines())
    assert needed <= guest, f"add {sorted(needed - guest)} to softroce/requirements-guest.txt"


def test_ci_runs_both_suites_and_fails_on_no_tests():
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert "make test;" in ci.replace("run make test;", "make test;") and "make test-softroce" in ci
    assert '"$rc" -eq 5' in ci


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to run the harness as an unprivileged user")
def test_building_the_guest_without_root_says_so_and_fails():
    # The unprivileged user runs a copy of softroce/ (vm.sh and the files it reads): the clone may sit where
    # only root can enter (/root is 0700), and so may pytest's tmp_path (/tmp/pytest-of-root is 0700).
    # /tmp itself is open to everyone; the cache there is empty, so the guest would have to be built.
    with tempfile.TemporaryDirectory(prefix="rdmalab-vm-test-", dir="/tmp") as scratch:
        shutil.copytree(os.path.join(ROOT, "softroce"), os.path.join(scratch, "softroce"))
        for folder, _, files in os.walk(scratch):   # readable by anyone, whatever umask the clone had
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        cache = os.path.join(scratch, "cache")
        os.mkdir(cache)
        os.chmod(cache, 0o777)
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash",
                              os.path.join(scratch, "softroce", "vm.sh"), "true"], cwd=scratch,
                             env=dict(os.environ, RDMALAB_VM_DIR=cache, HOME=scratch),
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "needs root" in out.stderr and "sudo make test-softroce" in out.stderr


def conda_names(path):
    names, in_deps = set(), False
    for line in open(path):
        stripped = line.strip()
        if stripped.startswith("dependencies:"):
            in_deps = True
        elif in_deps and stripped.startswith("- ") and not stripped.startswith("- pip") and not stripped.startswith("- -e"):
            names.add(re.split(r"[<>=!~ ]", stripped[2:], maxsplit=1)[0].lower())
    return names


def test_the_conda_environment_names_every_dependency(env="environment.yml"):
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    needed = names(project["dependencies"])
    have = conda_names(os.path.join(ROOT, env))
    assert needed <= have, f"add {sorted(needed - have)} to {env}"


def test_binder_installs_rdmalab_itself():
    post = open(os.path.join(ROOT, "binder", "postBuild")).read()
    assert "pip install" in post and "-e ." in post and os.access(os.path.join(ROOT, "binder", "postBuild"), os.X_OK)


def test_binder_and_the_image_install_the_same_pinned_packages():
    """binder/requirements.txt pins every package (one version each) and names every dependency; the image
    installs that very file (tests/container compares the image's pip freeze with it)."""
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    lines = [l.strip() for l in open(os.path.join(ROOT, "binder", "requirements.txt")) if l.strip() and not l.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", l) for l in lines), \
        [l for l in lines if "==" not in l]
    assert names(project["dependencies"]) <= names(lines), f"pin {sorted(names(project['dependencies']) - names(lines))}"
    dockerfile = open(os.path.join(ROOT, "container", "Dockerfile")).read()
    assert "COPY binder/requirements.txt" in dockerfile and "pip install --quiet -r /tmp/build/requirements.txt" in dockerfile
    assert open(os.path.join(ROOT, "binder", "runtime.txt")).read().strip() == "python-3.11"   # Debian 12's, the image's
