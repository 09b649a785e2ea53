"""`make lab` for whoever runs it: root gets --allow-root and is told why, a headless machine or an SSH
session gets no browser but the URL and the `ssh -L` command with the port JupyterLab really serves on."""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from rdmalab import lab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.host_only   # JupyterLab, not the RDMA device (the Soft-RoCE guest has no JupyterLab)

DESKTOP = {"DISPLAY": ":0"}
HEADLESS = {}
SSH = {"DISPLAY": "localhost:10.0", "SSH_CONNECTION": "192.0.2.7 51000 198.51.100.3 22"}   # ssh -X: still remote


def plan(euid, env, args=("notebooks/",)):
    return lab.plan(list(args), euid, env, pick_port=lambda: 8890, address=lambda: "203.0.113.5")


def test_root_gets_allow_root_and_is_told_why():
    command, said = plan(0, DESKTOP)
    assert "--allow-root" in command
    assert len(said) == 2 and "running as root, so passing --allow-root" in said[0] and "refuses" in said[0]


def test_a_normal_user_gets_neither_allow_root_nor_a_word_about_it():
    command, said = plan(1000, DESKTOP)
    assert "--allow-root" not in command and len(said) == 1 and said[0].startswith("open http://localhost:8890/")
    assert command[1:3] == ["-m", "jupyterlab"] and command[-1] == "notebooks/"


def test_the_lab_opens_the_first_lesson_quietly_and_says_the_one_url_to_open():
    """No Launcher, no news question, warnings only in the terminal, and the URL (its token in it) printed once."""
    command, said = plan(1000, DESKTOP)
    assert "--LabApp.default_url=/lab/tree/00-welcome.ipynb" in command and "--LabApp.news_url=None" in command
    assert "--log-level=WARN" in command
    token = next(a for a in command if a.startswith("--IdentityProvider.token=")).split("=", 1)[1]
    assert said[-1].startswith(f"open http://localhost:8890/lab/tree/00-welcome.ipynb?token={token}")
    mine, _ = plan(1000, DESKTOP, ["notebooks/", "--IdentityProvider.token=secret"])
    assert [a for a in mine if "token" in a] == ["--IdentityProvider.token=secret"]   # a token given is kept


@pytest.mark.parametrize("env", [HEADLESS, SSH], ids=["no-display", "ssh"])
def test_headless_opens_no_browser_and_says_how_to_reach_the_lab_over_ssh(env):
    command, said = plan(1000, env)
    assert "--no-browser" in command and "--ServerApp.port=8890" in command
    text = "\n".join(said)
    assert "http://localhost:8890/lab" in text
    host = "198.51.100.3" if env is SSH else "203.0.113.5"   # over SSH, the address the learner used; else this host's
    assert f"ssh -L 8890:localhost:8890 {lab.getpass.getuser()}@{host}" in text
    unknown, _ = lab.plan(["notebooks/"], 1000, HEADLESS, pick_port=lambda: 8890, address=lambda: None)
    assert "@<this machine> (put the address you use to reach this machine there)" in "\n".join(_)


def test_in_the_container_no_browser_and_no_ssh_hint_but_the_published_port():
    command, said = plan(1000, {"RDMALAB_CONTAINER": "1", "DISPLAY": ":0"}, ["--port=8888", "notebooks/"])
    text = "\n".join(said)
    assert "--no-browser" in command and "ssh -L" not in text
    assert "docker run -p 127.0.0.1:8888:8888" in text and "open http://localhost:8888/lab/tree/00-welcome.ipynb?token=" in text


@pytest.mark.parametrize("args", [["--port=9123"], ["--port", "9123"], ["--ServerApp.port=9123"]])
def test_a_port_asked_for_is_the_port_in_the_hint(args):
    command, said = plan(1000, HEADLESS, args)
    assert "ssh -L 9123:localhost:9123" in "\n".join(said)
    # JupyterLab refuses a port given twice, even the same one ("port only accepts one value")
    assert [a for a in command if a.split("=")[0] in ("--port", "--ServerApp.port")] == args[:1]


def test_make_lab_goes_through_the_launcher():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "$(PY) -m rdmalab.lab notebooks/" in recipe and "jupyter" not in recipe


def test_the_launcher_starts_jupyterlab_where_its_hint_says(tmp_path):
    """The real thing, as `make lab` runs it here over SSH: as root this only starts with --allow-root."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "JUPYTER_PORT")}
    env.update(HOME=str(home), PYTHONPATH=ROOT, SSH_CONNECTION="192.0.2.7 51000 198.51.100.3 22")
    log_path = tmp_path / "lab.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "rdmalab.lab", f"--ServerApp.root_dir={tmp_path}"],
                                  stdout=log, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            text = log_path.read_text()
            hint = re.search(r"ssh -L (\d+):localhost:\1 ", text)
            if hint:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{hint.group(1)}/api", timeout=2) as reply:
                        assert "version" in reply.read().decode()   # Jupyter Server's own answer
                    break
                except OSError:
                    pass
            assert server.poll() is None and time.monotonic() < deadline, f"JupyterLab is not serving:\n{text[-3000:]}"
            time.sleep(0.3)
        assert ("running as root, so passing --allow-root" in text) == (os.geteuid() == 0)
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_configure_quiets_kernels_and_the_unused_cluster_panel_once(tmp_path):
    lab.configure(prefix=str(tmp_path))
    assert (tmp_path / "etc" / "ipython" / "ipython_kernel_config.py").read_text() == 'c.IPKernelApp.log_level = "ERROR"\n'
    page = tmp_path / "etc" / "jupyter" / "labconfig" / "page_config.json"
    assert "ipyparallel-labextension" in page.read_text()
    page.write_text("{}\n")          # someone's own settings are left alone
    lab.configure(prefix=str(tmp_path))
    assert page.read_text() == "{}\n"


def test_configure_rewrites_its_own_server_settings(tmp_path):
    ours = tmp_path / lab.OURS
    ours.parent.mkdir(parents=True)
    ours.write_text('{"ServerApp": {"tornado_settings": {}}}\n')   # an earlier version
    lab.configure(prefix=str(tmp_path))
    assert json.loads(ours.read_text()) == {"ServerApp": {"jpserver_extensions": {"ipyparallel": False}}}


def test_the_kernels_websockets_get_no_keepalive_pings_unless_given():
    command, _ = plan(1000, DESKTOP)
    setting = [a for a in command if a.startswith("--ServerApp.tornado_settings=")]
    assert len(setting) == 1 and json.loads(setting[0].partition("=")[2]) == {"ws_ping_interval": 0}
    mine, _ = plan(1000, DESKTOP, ["notebooks/", '--ServerApp.tornado_settings={"x": 1}'])
    assert [a for a in mine if "tornado_settings" in a] == ['--ServerApp.tornado_settings={"x": 1}']


def test_the_folder_served_is_found_as_an_argument_or_a_root_dir():
    assert lab.served_folder(["notebooks/", "--no-browser"]) == "notebooks/"
    assert lab.served_folder(["--no-browser", "--ServerApp.root_dir=/srv/lessons"]) == "/srv/lessons"
    assert lab.served_folder(["--notebook-dir", "/srv/x"]) == "/srv/x"
    assert lab.served_folder(["--no-browser"]) is None
    assert lab.first_lesson([f"--ServerApp.root_dir={os.path.join(ROOT, 'notebooks')}"]) == "00-welcome.ipynb"


def test_the_lessons_are_trusted_once_so_the_server_does_not_warn_of_each(tmp_path):
    from nbformat.sign import NotebookNotary
    import nbformat
    notary = NotebookNotary(data_dir=str(tmp_path), db_file=str(tmp_path / "signatures.db"))
    lessons = os.path.join(ROOT, "notebooks")
    count = len([n for n in os.listdir(lessons) if n.endswith(".ipynb")])
    assert lab.trust_lessons(lessons, notary) == count
    assert all(notary.check_signature(nbformat.read(os.path.join(lessons, n), as_version=4))
               for n in os.listdir(lessons) if n.endswith(".ipynb"))
    assert lab.trust_lessons(lessons, notary) == 0   # already trusted: nothing signed again
