"""The lab's container image (container/Dockerfile), as a learner with Docker Desktop meets it: built from a fresh
clone by container/image.sh (make image), `docker run -p 127.0.0.1:PORT:8888 --shm-size=1g` serves lesson 00
with the URL it prints, lesson 05 runs to its end in Chromium against it, the packages are binder's pins,
a /dev/shm left at Docker's 64 MiB is said with its fix, an instructor's class report reads what a lesson
recorded in it, and a container stopped mid-lesson stops on
SIGTERM and leaves nothing behind. At the end the image is removed: no container, image or /dev/shm
segment is left of the test.

Needs a Docker engine (container/image.sh starts Debian's dockerd as root) and the base image, which
container/base.sh makes with debootstrap where no registry is reachable. Skips, saying why, where there is
no docker; RDMALAB_CONTAINER_TEST=1 (CI: make test-image) makes that a failure.
"""
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)   # (tests.browser's lesson pages, shared)
TAG = "rdmalab:test-image"
pytestmark = [pytest.mark.host_only, pytest.mark.container]


def docker(*args, timeout=120, check=True):
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return out.stdout


def what_docker_holds():
    return {"containers": set(docker("ps", "-aq").split()), "images": set(docker("images", "-aq").split()),
            "volumes": set(docker("volume", "ls", "-q").split())}


def shm_segments():
    return {n for n in os.listdir("/dev/shm") if n.startswith("rdmalab-")} if os.path.isdir("/dev/shm") else set()


@pytest.fixture(scope="module")
def image():
    reachable = shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    if not reachable and (os.geteuid() != 0 or not shutil.which("apt-get")):   # (root: image.sh installs, starts it)
        why = "the container test needs a Docker engine (as root, container/image.sh installs and starts Debian's docker.io)"
        if os.environ.get("RDMALAB_CONTAINER_TEST") == "1":
            pytest.fail(f"RDMALAB_CONTAINER_TEST=1 but {why}")
        pytest.skip(why)
    held = what_docker_holds() if reachable else None   # (before the build: its base and layers are the test's too)
    started = time.monotonic()
    built = subprocess.run([os.path.join(ROOT, "container", "image.sh"), "build", TAG], capture_output=True,
                           text=True, timeout=1800)
    assert built.returncode == 0, built.stderr[-3000:]
    size = int(docker("image", "inspect", "-f", "{{.Size}}", TAG))
    print(f"\nimage {TAG}: built in {time.monotonic() - started:.0f} s, {size / 1e6:.0f} MB")
    held = held or {"containers": set(), "images": set(), "volumes": set()}
    shm_before = shm_segments()
    yield {"tag": TAG, "size": size}
    for name in docker("ps", "-aq", "--filter", f"ancestor={TAG}").split():
        docker("rm", "-f", name, check=False)
    docker("rmi", TAG)
    base = docker("images", "-q", "rdmalab-base:bookworm").strip()   # container/base.sh's import, if this test made it
    if base and not any(base in i for i in held["images"]):
        docker("rmi", "rdmalab-base:bookworm")
    after = what_docker_holds()
    assert after == held, f"left behind: {({k: after[k] - held[k] for k in after})}"
    assert shm_segments() <= shm_before, shm_segments() - shm_before


def started(tag, *options):
    """A container serving the lab on a free port of 127.0.0.1, as the README runs it: (name, port, token, log)."""
    from tests.browser.test_jupyterlab import free_port
    port = free_port()
    name = docker("run", "-d", "-p", f"127.0.0.1:{port}:8888", *options, tag).strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        log = logs(name)
        found = re.search(r"open (http://localhost:8888/\S+\?token=(\w+))", log)
        if found:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={found[2]}", timeout=5).read()
                return name, port, found[2], log
            except OSError:
                pass
        time.sleep(1)
    raise AssertionError(f"the container printed no URL, or serves none on port {port}:\n{log[-3000:]}")


def logs(name):
    out = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    return out.stdout + out.stderr


def test_the_image_installs_binders_pinned_packages(image):
    pinned = {line.strip().lower() for line in open(os.path.join(ROOT, "binder", "requirements.txt"))
              if line.strip() and not line.startswith("#")}
    frozen = {line.strip().lower() for line in docker("run", "--rm", image["tag"], "pip", "freeze",
                                                      "--exclude-editable").splitlines() if line.strip()}
    assert frozen == pinned, f"in the image only: {sorted(frozen - pinned)}; pinned only: {sorted(pinned - frozen)}"


def test_docker_run_serves_lesson_00_at_the_url_it_prints(image):
    name, port, token, log = started(image["tag"], "--shm-size=1g")
    try:
        assert "this is a container" in log and "ssh -L" not in log, log
        lesson = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/00-welcome.ipynb?token={token}"))
        assert lesson["type"] == "notebook" and lesson["writable"], "the learner may edit and save the lessons"
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/tree/00-welcome.ipynb?token={token}").read().decode()
        assert "JupyterLab" in page
        doctor = docker("exec", name, "rdmalab", "doctor", "--json")
        report = json.loads(doctor)
        assert report["provider"] == "soft" and report["soft_memory"]["directory"] == "/dev/shm", report
        assert not report["soft_memory"]["small_dev_shm"]
    finally:
        docker("rm", "-f", name)


def test_a_dev_shm_left_at_dockers_64_mib_is_said_with_its_fix_and_the_lab_still_runs(image):
    """Without --shm-size, soft0 keeps memory in /tmp: the doctor says so, and an AllReduce on 2 ranks still runs."""
    out = docker("run", "--rm", image["tag"], "sh", "-c",
                 "rdmalab doctor --json && rdmalab allreduce --ranks 2 --size 64K --iters 2", timeout=300)
    report, _ = json.JSONDecoder().raw_decode(out)   # (the doctor's JSON, then the AllReduce's table)
    assert report["soft_memory"]["directory"] == "/tmp", report["soft_memory"]
    assert "/dev/shm holds only 64 MiB" in report["soft_memory"]["small_dev_shm"]
    assert "docker run --shm-size=1g" in " ".join(report["next_steps"])
    assert re.search(r"^\s+65536\s+16384\s+float\s+sum\b.*\b0\s*$", out, re.M), out[-2000:]
    mpi = docker("run", "--rm", image["tag"], "python", "-c", "from rdmalab.allreduce import report; "
                 "print(report.mpi_allreduce(2, [1 << 18], 'float32', 2)['rows'][0]['wrong'])", timeout=300)
    assert mpi.split()[-1] == "0", mpi   # MPICH's large messages, which Docker's seccomp profile would refuse


def quick_copy(port, token, slug):
    """The lesson of `slug` in the container, its parameters cell set to QUICK = True (the learner's own copy)."""
    from tests.browser.test_jupyterlab import name_of
    url = f"http://127.0.0.1:{port}/api/contents/{name_of(slug)}.ipynb?token={token}"
    notebook = json.load(urllib.request.urlopen(url))["content"]
    for cell in notebook["cells"]:
        if "parameters" in cell["metadata"].get("tags", []):
            cell["source"] = "QUICK = True\n"
    urllib.request.urlopen(urllib.request.Request(url, method="PUT", headers={"Content-Type": "application/json"},
                                                  data=json.dumps({"type": "notebook", "content": notebook}).encode()))
    return name_of(slug)


@contextlib.contextmanager
def browser_on(name, port, token, log_path):
    """lesson_page's `lab` for the container's JupyterLab (tests/browser), its log the container's."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        log_path.write_text("")
        try:
            yield {"url": f"http://127.0.0.1:{port}/lab/workspaces/{{0}}/tree/{{0}}.ipynb?reset&token={token}",
                   "log": str(log_path), "browser": browser}
        finally:
            log_path.write_text(logs(name))
            browser.close()


def test_the_dashboard_lesson_runs_to_its_end_in_chromium_against_the_container(image, tmp_path):
    from tests.browser.test_jupyterlab import the_target_cpu_lesson_runs
    name, port, token, _ = started(image["tag"], "--shm-size=1g")
    try:
        quick_copy(port, token, "target-cpu")
        shot = os.path.join(ROOT, ".ci", "artifacts", "container-lesson-06.png")
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        with browser_on(name, port, token, tmp_path / "container.log") as lab:
            the_target_cpu_lesson_runs(lab, shot)
    finally:
        docker("rm", "-f", name)


def test_a_container_stopped_mid_lesson_stops_on_sigterm_and_leaves_nothing(image, tmp_path):
    """docker stop while lesson 09's ranks run (in the browser): tini hands JupyterLab the SIGTERM, and it
    stops its kernels (docker's SIGKILL after the grace period would be exit 137); nothing is left."""
    from tests.browser.test_jupyterlab import lesson_page
    before = shm_segments()
    name, port, token, _ = started(image["tag"], "--shm-size=1g")
    try:
        lesson = quick_copy(port, token, "allreduce")
        with browser_on(name, port, token, tmp_path / "container.log") as lab:
            with lesson_page(lab, lesson, str(tmp_path / "06.png")):
                deadline = time.monotonic() + 300
                while "ipyparallel.engine" not in (inside := docker("top", name, "-eo", "pid,args")):
                    assert time.monotonic() < deadline, f"no rank started in 300 s:\n{inside}"
                    time.sleep(1)
                docker("stop", "-t", "20", name, timeout=60)
        code = int(docker("inspect", "-f", "{{.State.ExitCode}}", name))
        assert code != 137, f"docker had to SIGKILL the container (exit {code}):\n{logs(name)[-2000:]}"
    finally:
        docker("rm", "-f", name)
    assert name not in docker("ps", "-aq", "--no-trunc")
    assert shm_segments() <= before


def test_an_instructors_class_report_works_inside_the_image(image):
    """A learner's lesson records into the class directory, and `rdmalab class report` reads it (workshop/)."""
    out = docker("run", "--rm", "-e", "RDMALAB_CLASS_DIR=/tmp/class", image["tag"], "sh", "-c",
                 "mkdir /tmp/class && papermill -p QUICK True --no-progress-bar notebooks/00-welcome.ipynb /tmp/00.ipynb "
                 "> /tmp/papermill.log 2>&1 || cat /tmp/papermill.log; rdmalab class report --json /tmp/class", timeout=300)
    table = json.loads(out[out.index("{"):])
    assert table["learners"] == ["learner"], out[-2000:]
    assert table["stuck"]["learner"] or table["passed"]["learner"], table   # lesson 00's exercise, attempted
