"""What the lab starts on other hosts over ssh (a lesson's helper, a cluster's ranks, the cleanup after them),
tested on this one with a stand-in `ssh` on PATH that runs the command here as ssh runs it there: the
options and the host dropped, the command through a shell. The real thing, two kernels and a wire, is
tests/twohost (make test-two-hosts)."""
import os
import subprocess
import sys
import time

import pytest

from rdmalab import sockets
from rdmalab.allreduce.cluster import Cluster, ssh_options
from rdmalab.errors import RequestError
from rdmalab.proc import watchdog
from rdmalab.proc.children import SSH_ARGS
from rdmalab.proc.procstat import pid_alive


@pytest.fixture
def ssh_here(tmp_path, monkeypatch):
    """A stand-in ssh; returns the file where it writes each host it was asked to reach. Like sshd, it gives the
    command a fresh environment: what the command needs of this one, it must carry itself."""
    hosts = tmp_path / "hosts"
    ssh = tmp_path / "ssh"
    ssh.write_text(f'#!/bin/sh\nwhile [ "$1" = -o ]; do shift 2; done\necho "$1" >> {hosts}\nshift\n'
                   f'exec env -i PATH="$PATH" HOME="$HOME" sh -c "$*"\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return hosts


def test_a_target_on_another_host_says_its_own_pid_takes_the_settings_and_ends_with_the_session(ssh_here, monkeypatch):
    from rdmalab import verbs as v
    from rdmalab.lessons.target import RemoteBuffer
    from rdmalab.verbs import rc
    e = v.enums
    monkeypatch.setenv("RDMALAB_TIME_SCALE", "1.5")   # a setting the target must receive
    res = rc.Resources(mr_sizes=[4096], access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    try:
        with RemoteBuffer(host="127.0.0.1") as target:
            with open(f"/proc/{target.pid}/cmdline", "rb") as f:   # the pid it says it runs under there
                assert b"rdmalab.lessons.target" in f.read()
            with open(f"/proc/{target.pid}/environ", "rb") as f:
                environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            assert b"RDMALAB_HELPER_PARENT" not in environ   # (a pid of this host means nothing there)
            assert environ[b"RDMALAB_TIME_SCALE"] == b"1.5"
            res.connect(target.endpoint)
            target.connect(res.endpoint(mr=res.mr))
            res.mr.write(b"over ssh", 8)
            w = v.wr.SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[v.wr.SGE(res.mr.buf, 8, res.mr.lkey)])
            w.set_wr_rdma(target.endpoint["rkey"], target.endpoint["addr"])
            res.qp.post_send(w)
            rc.wait_for_completion(res.cq, timeout=30)
            assert target.read(8) == b"over ssh"
            pid = target.pid
    finally:
        res.close()
    assert ssh_here.read_text().split() == ["127.0.0.1"]
    deadline = time.monotonic() + 10
    while pid_alive(pid):
        assert time.monotonic() < deadline, "the target outlived its ssh session"
        time.sleep(0.1)


def test_a_clusters_leftovers_on_another_host_are_killed_over_ssh(ssh_here):
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, IPP_CLUSTER_ID="test-other-hosts"))
    try:
        assert watchdog.kill_on("node7", "test-other-hosts") == [stray.pid]
        assert stray.wait(timeout=10) == -9
    finally:
        stray.kill()
        stray.wait()
    assert ssh_here.read_text().split() == ["node7"]


def test_ranks_on_other_hosts_are_asked_for_plainly():
    with pytest.raises(RequestError, match="hosts go with launcher=\"ssh\""):
        Cluster(ranks=2, hosts={"10.0.0.1": 1, "10.0.0.2": 1}, start=False)
    with pytest.raises(RequestError, match="must add up to ranks=4"):
        Cluster(ranks=4, launcher="ssh", hosts={"10.0.0.1": 1, "10.0.0.2": 1}, start=False)


def test_engines_over_ssh_are_configured_as_docs_cluster_md_says(monkeypatch):
    asked = []   # (where the controller listens: this machine's address toward the first other host; no route is needed here)
    monkeypatch.setattr(sockets, "address_toward", lambda host: asked.append(host) or "10.9.8.7")
    options = ssh_options({"127.0.0.1": 2, "root@192.0.2.7:22": 2},
                          {"RDMALAB_PROVIDER": "pyverbs", "OPENBLAS_NUM_THREADS": "1"})   # (as a Cluster passes it)
    launcher = options["config"].SSHEngineSetLauncher
    assert launcher.engines == {"127.0.0.1": 2, "root@192.0.2.7:22": 2} and launcher.remote_python == sys.executable
    assert launcher.environment["RDMALAB_PROVIDER"] == "pyverbs"
    assert "BatchMode=yes" in options["config"].SSHLauncher.ssh_args and list(SSH_ARGS) == options["config"].SSHLauncher.ssh_args
    assert asked == ["192.0.2.7"] and options["controller_ip"] == "10.9.8.7"
