"""The install steps make test, make image and the guest's build take (tools/need.sh), on half-installed machines.

Each test builds a machine in a folder: stand-ins for the half-installed case (a docker client whose engine does
not answer, a chromium that is a snap's shim, an npm that does not start, ...) and for apt-get, id and dpkg-query,
put first on a PATH that holds nothing else but the shell's basic commands. apt-get's stand-in records what it was
asked and "installs" a working tool. So the tests show what each step decides, as root and not, without touching
this machine's packages.
"""
import os
import shutil
import subprocess
import sys

import pytest

from rdmalab.errors import RdmalabError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEED = os.path.join(ROOT, "tools", "need.sh")
pytestmark = pytest.mark.host_only
BASICS = ["bash", "sh", "env", "date", "tail", "head", "cut", "sed", "awk", "seq", "sleep", "setsid", "pgrep",
          "timeout", "flock", "mktemp", "rm", "grep", "tr", "dirname", "cat", "touch", "chmod", "cp", "ls"]

# what apt-get's stand-in puts in place of each package: (command, its script)
WORKING = {
    "docker.io": [("dockerd", 'case "$1" in --version) echo "Docker version 20.10.24+dfsg1, build 297e128";;\n'
                              '*) echo started >> "$STATE/dockerd.log"; touch "$STATE/engine";; esac')],
    "chromium": [("chromium", 'case "$*" in *--dump-dom*) echo "<p>works</p>";; *) echo "Chromium 120";; esac')],
    "tshark": [("tshark", "echo 'TShark (Wireshark) 4.0.17'")],
    "nodejs": [("node", "echo v18.19.0")],
    "npm": [("npm", "echo 9.2.0")],
    "qemu-system-x86": [("qemu-system-x86_64", "echo 'QEMU emulator version 7.2.15'")],
    "debootstrap": [("debootstrap", "echo 'debootstrap 1.0.128'")],
}
BROKEN = 'echo "${0##*/}: error while loading shared libraries" >&2; exit 127'


class Machine:
    """A folder with bin/ (stand-ins first on PATH, then the basics) and state/ (what the stand-ins recorded)."""

    def __init__(self, tmp_path, uid=0, apt=True):
        self.bin, self.state = tmp_path / "bin", tmp_path / "state"
        basics = tmp_path / "basics"
        for folder in (self.bin, self.state, basics):
            folder.mkdir()
        for name in BASICS:
            os.symlink(shutil.which(name), basics / name)
        self.path = f"{self.bin}:{basics}"
        self.tool("id", f'[ "$1" = -u ] && echo {uid} || echo "uid={uid}"')
        self.tool("dpkg-query", "echo 1.0-standin")
        self.tool("debconf-set-selections", "cat > /dev/null")
        if apt:
            table = "\n".join(f"  {package}) {' '.join(self._writer(n, s) for n, s in tools)} ;;"
                              for package, tools in WORKING.items())
            self.tool("apt-get", f'echo "$*" >> "$STATE/apt.log"\n[ "$1" = update ] && exit 0\n'
                                 f'for p in "$@"; do case "$p" in\n{table}\n  esac; done')

    def _writer(self, name, script):
        target = self.bin / name
        body = f"#!/bin/bash\n{script}\n".replace("'", "'\\''")
        return f"printf '%s' '{body}' > {target}; chmod +x {target};"

    def tool(self, name, script):
        (self.bin / name).write_text(f"#!/bin/bash\n{script}\n")
        (self.bin / name).chmod(0o755)

    def run(self, *args, **env):
        ledger = self.state / "installed.log"
        out = subprocess.run(args, capture_output=True, text=True, timeout=120, env={
            "PATH": self.path, "STATE": str(self.state), "RDMALAB_INSTALL_LOG": str(ledger), "HOME": str(self.state),
            "CHROMIUM": str(self.bin / "chromium"), **env})
        out.apt = (self.state / "apt.log").read_text() if (self.state / "apt.log").exists() else ""
        out.ledger = ledger.read_text() if ledger.exists() else ""
        return out


def docker_without_engine(machine):
    machine.tool("docker", 'case "$1" in info) [ -e "$STATE/engine" ] && echo "Server Version: 20.10.24" && exit 0\n'
                           '  echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock" >&2; exit 1;;\n'
                           '--version) echo "Docker version 28.2.2, build e6534b4";; esac')


def test_image_sh_installs_and_starts_docker_io_where_a_client_reaches_no_engine(tmp_path):
    machine = Machine(tmp_path)
    docker_without_engine(machine)   # a static docker client, no dockerd, no docker.io: issue 45's machine
    out = machine.run(os.path.join(ROOT, "container", "image.sh"), "engine")
    assert out.returncode == 0, out.stderr
    assert "install" in out.apt and "docker.io" in out.apt, out.apt
    assert (machine.state / "dockerd.log").read_text() == "started\n"
    assert "cannot reach an engine and there is no dockerd" in out.stderr
    assert "installed docker.io 1.0-standin (apt-get)" in out.ledger and "started dockerd 20.10.24" in out.ledger


def test_a_dockerd_that_is_there_is_started_and_nothing_installed(tmp_path):
    machine = Machine(tmp_path)
    docker_without_engine(machine)
    machine.tool("dockerd", WORKING["docker.io"][0][1])
    out = machine.run(NEED, "docker")
    assert out.returncode == 0, out.stderr
    assert out.apt == "" and "started dockerd" in out.ledger and "installed" not in out.ledger


def test_an_engine_that_answers_is_left_alone(tmp_path):
    machine = Machine(tmp_path)
    docker_without_engine(machine)
    (machine.state / "engine").touch()
    out = machine.run(NEED, "docker")
    assert (out.returncode, out.apt, out.ledger) == (0, "", "")


@pytest.mark.parametrize("case, env, said", [
    ("not root", {}, "only root can install it here: run as root (sudo make test), or: sudo apt-get install docker.io"),
    ("no apt-get", {}, "this machine has no apt-get: install docker.io with its own package manager"),
    ("remote engine", {"DOCKER_HOST": "tcp://198.51.100.7:2376"},
     "DOCKER_HOST=tcp://198.51.100.7:2376 does not answer: start that engine, or unset DOCKER_HOST"),
])
def test_where_docker_cannot_be_had_the_error_says_why_and_what_to_do(tmp_path, case, env, said):
    machine = Machine(tmp_path, uid=1000 if case == "not root" else 0, apt=case != "no apt-get")
    docker_without_engine(machine)
    out = machine.run(os.path.join(ROOT, "container", "image.sh"), "engine", **env)
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert out.apt == "" and not (machine.state / "engine").exists()


@pytest.mark.parametrize("step, half_installed, packages", [
    ("chromium", {"chromium": "echo \"Command '/usr/bin/chromium' requires the chromium snap to be installed.\"; exit 1"},
     ["chromium"]),
    ("tshark", {"tshark": BROKEN}, ["tshark"]),
    ("npm", {"node": "echo v20.20.2", "npm": BROKEN}, ["nodejs", "npm"]),
    ("guest", {"qemu-system-x86_64": BROKEN, "cpio": "echo 'cpio (GNU cpio) 2.13'", "depmod": "echo 'kmod version 30'"},
     ["qemu-system-x86", "debootstrap"]),   # (no debootstrap at all)
])
def test_a_tool_on_the_path_that_does_not_run_is_installed_over(tmp_path, step, half_installed, packages):
    machine = Machine(tmp_path)
    for name, script in half_installed.items():
        machine.tool(name, script)
    out = machine.run(NEED, step)
    assert out.returncode == 0, out.stderr
    installs = [line.split() for line in out.apt.splitlines() if line.startswith("install")]
    assert [p for line in installs for p in line if p in WORKING] == packages, out.apt
    assert all(f"installed {p} 1.0-standin (apt-get)" in out.ledger for p in packages), out.ledger
    assert "does not run" in out.stderr
    if step == "guest":
        assert "there is no debootstrap: installing debootstrap" in out.stderr, out.stderr


def test_a_tool_that_works_is_not_installed_again(tmp_path):
    machine = Machine(tmp_path)
    for name, script in WORKING["chromium"] + WORKING["tshark"] + WORKING["npm"]:
        machine.tool(name, script)
    out = machine.run(NEED, "chromium", "tshark", "npm")
    assert (out.returncode, out.apt, out.ledger) == (0, "", ""), out.stderr


def test_a_tool_still_broken_after_its_install_is_an_error_with_its_output(tmp_path):
    machine = Machine(tmp_path)
    machine.tool("tshark", BROKEN)
    machine.tool("apt-get", 'echo "$*" >> "$STATE/apt.log"')   # installs nothing that works
    out = machine.run(NEED, "tshark")
    assert out.returncode == 2
    assert "tshark still does not run after installing tshark: tshark: error while loading shared libraries" in out.stderr


def test_report_lists_what_was_installed_and_each_tools_version(tmp_path):
    machine = Machine(tmp_path)
    docker_without_engine(machine)
    machine.tool("tshark", BROKEN)
    assert machine.run(NEED, "docker", "tshark").returncode == 0
    out = machine.run(NEED, "--report")
    lines = out.stdout.splitlines()
    assert sum(line.startswith("  + ") for line in lines) == 3, out.stdout   # docker.io, dockerd, tshark
    assert any(line.split()[:2] == ["docker", "engine"] and "20.10.24" in line for line in lines), out.stdout
    assert any(line.split()[0] == "tshark" and "TShark (Wireshark) 4.0.17" in line for line in lines), out.stdout


@pytest.mark.parametrize("says, works", [("HYDRA build details:\n    Version: 5.0.2", True),
                                         ("mpirun (Open MPI) 4.1.4\n\nReport bugs to ...", False)])
def test_the_mpi_reference_runs_only_under_mpichs_mpiexec(tmp_path, monkeypatch, says, works):
    from rdmalab.allreduce import mpi
    mpiexec = tmp_path / "mpiexec"
    mpiexec.write_text(f"#!/bin/sh\ncat <<'EOF'\n{says}\nEOF\n")
    mpiexec.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))   # its mpiexec is first, as a venv's is
    if works:
        assert mpi.launcher() == str(mpiexec)
    else:
        with pytest.raises(RdmalabError, match=r"is not MPICH's mpiexec \(it says: 'mpirun \(Open MPI\) 4.1.4'\).*"
                                               r"pip install mpich"):
            mpi.launcher()
