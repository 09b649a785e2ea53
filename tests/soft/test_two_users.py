"""Two Unix users on one host, each with soft0 to itself (issue 12, item 5).

Runs as root: it creates two real users (useradd, removed afterwards with their home directories,
also when a test fails) and runs tests/helpers/two_users_peer.py as each of them (setpriv), using soft0
through the pyverbs API. Each user's segments are their own (mode 0600 in a sticky directory), so
with the other user's real keys, address, QP number and expected PSN a process can neither open,
map nor delete them, nor reach them by RDMA: what a real NIC reports when nobody answers
(RETRY_EXC_ERR) or the remote key is refused (REM_ACCESS_ERR), and the victim's memory, QP state
and receive queue do not change. A killed process's segments are reaped by its own user's next
start (or root), never by the other user. A control run by the victim's own user shows the same
attack succeeding, so that it is the boundary between users that stops it. Files the other user
plants under segment names (forged segments mode 0666, a FIFO, a short file, a symlink) are neither
trusted nor able to block or break the device. Both users meanwhile use soft0 normally, and leave
no segment and no process behind.

The users cannot read this checkout, its .venv or an interpreter under /root (mode 0700), so their
processes run a copy: this checkout's rdmalab package and numpy in a world-readable temp directory,
on a Python interpreter of the same version that they can execute (a copy of this one if none).
"""
import compileall
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from rdmalab.proc.procstat import processes_of

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="needs root: it creates two Unix users (useradd) and runs processes as them (setpriv)"),
    # soft0's isolation between users: the users' processes choose RDMALAB_PROVIDER=soft, nothing here
    # touches a real device, so the Soft-RoCE guest need not run it
    pytest.mark.host_only,
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "tests", "helpers", "two_users_peer.py")
# + the pid of the test that created the user; the file's old path, so users an earlier run left are still known
COMMENT = "rdmalab tests/test_two_users.py, pid"
TOOLS_PATH = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
PROBE = "import numpy, rdmalab.verbs.soft.shm"
SEGMENT_PREFIX = "rdmalab-"


def tool(name):
    path = shutil.which(name, path=TOOLS_PATH)
    if path is None:
        pytest.fail(f"{name} is needed to run processes as other users (Debian: util-linux and passwd)")
    return path


def run(*cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr or done.stdout}"
    return done.stdout


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def segments_of(uid, directories):
    """Paths of rdmalab segments owned by `uid` in these directories."""
    found = []
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.name.startswith(SEGMENT_PREFIX) and entry.stat(follow_symlinks=False).st_uid == uid:
                    found.append(entry.path)
            except OSError:
                continue
    return sorted(found)


class User:
    def __init__(self, name):
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid, self.home = name, entry.pw_uid, entry.pw_gid, entry.pw_dir

    def __repr__(self):
        return f"{self.name} (uid {self.uid})"


def create_user(tag, homes):
    name = f"rdmalab-{tag}-{secrets.token_hex(3)}"
    run(tool("useradd"), "--create-home", "--home-dir", os.path.join(homes, name), "--user-group",
        "--shell", "/usr/sbin/nologin", "--comment", f"{COMMENT} {os.getpid()}",
        "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0", name)
    return User(name)


def remove_user(name, uid, directories):
    """Kill what the user still runs (all of it started by these tests), delete its segments, then the user."""
    for _ in range(100):
        pids = processes_of(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    for path in segments_of(uid, directories):
        os.unlink(path)
    subprocess.run([tool("userdel"), "--remove", name], capture_output=True, timeout=60)
    subprocess.run([tool("groupdel"), name], capture_output=True, timeout=60)  # if userdel left it


def remove_stale_users(directories):
    """Users left by a run of this file that was killed before its teardown (its pid is gone)."""
    for entry in pwd.getpwall():
        if entry.pw_gecos.startswith(COMMENT) and entry.pw_name.startswith("rdmalab-"):
            try:
                creator = int(entry.pw_gecos.rsplit(" ", 1)[1])
            except ValueError:
                continue
            if not pid_alive(creator):
                remove_user(entry.pw_name, entry.pw_uid, directories)


def traversable_by_everyone(path):
    path = os.path.realpath(path)
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def make_readable(top):
    for directory, _, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, stat.S_IMODE(mode) | 0o444 | (0o111 if mode & 0o111 else 0))


class Runtime:
    """What the users' processes run: an interpreter they can execute, and a world-readable copy of
    this checkout's rdmalab and of the numpy this interpreter uses (the same Python version: same ABI)."""

    def __init__(self, base, probe_user):
        import numpy

        self.base, self.site = base, os.path.join(base, "site")
        shutil.copytree(os.path.join(ROOT, "rdmalab"), os.path.join(self.site, "rdmalab"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        compileall.compile_dir(os.path.join(self.site, "rdmalab"), quiet=1)
        numpy_dir = os.path.dirname(numpy.__file__)
        for source in (numpy_dir, numpy_dir + ".libs"):   # numpy.libs: the wheel's bundled OpenBLAS
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(self.site, os.path.basename(source)),
                                ignore=shutil.ignore_patterns("tests"))
        self.peer = shutil.copy(PEER, base)
        self.library_path = None
        make_readable(base)
        self.python = self._choose_interpreter(probe_user)

    def env(self, user=None):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": self.site,
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "RDMALAB_PROVIDER": "soft",
               "OPENBLAS_NUM_THREADS": "1"}
        if user is not None:
            env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
        if self.library_path:
            env["LD_LIBRARY_PATH"] = self.library_path
        if os.environ.get("RDMALAB_SHM_DIR"):   # the host's choice, for every process of the lab
            env["RDMALAB_SHM_DIR"] = os.environ["RDMALAB_SHM_DIR"]
        return env

    def command(self, user, *args):
        return [tool("setpriv"), f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--",
                self.python, "-s", *args]

    def _choose_interpreter(self, user):
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        candidates = [os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable),
                      *(os.path.join(d, version) for d in ("/usr/local/bin", "/usr/bin", "/bin"))]
        tried = []
        for python in dict.fromkeys(candidates):
            if not os.path.isfile(python):
                continue
            self.python = python
            outcome = self._probe(user)
            if outcome.returncode == 0:
                return python
            tried.append(f"{python}: {outcome.stderr.strip().splitlines()[-1:] or outcome.returncode}")
        self.python = self._copy_interpreter(version)
        outcome = self._probe(user)
        assert outcome.returncode == 0, f"no interpreter runs as {user}: {tried}, and a copy of this one: {outcome.stderr}"
        return self.python

    def _probe(self, user):
        return subprocess.run(self.command(user, "-c", PROBE), capture_output=True, text=True, timeout=60,
                              cwd=self.base, env=self.env(user))

    def _copy_interpreter(self, version):
        """This interpreter and its standard library (not its site-packages or tests), where users can run them."""
        prefix, home = sys.base_prefix, os.path.join(self.base, "python")
        executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
        os.makedirs(os.path.join(home, "bin"))
        python = shutil.copy2(executable, os.path.join(home, "bin", version))
        shutil.copytree(os.path.join(prefix, "lib", version), os.path.join(home, "lib", version),
                        ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter", "turtledemo",
                                                      "ensurepip", "lib2to3", "config-*"))
        for name in os.listdir(os.path.join(prefix, "lib")):   # a shared libpython, if it was built so
            if name.startswith(f"lib{version}") and ".so" in name:
                shutil.copy2(os.path.join(prefix, "lib", name), os.path.join(home, "lib", name))
        self.library_path = os.path.join(home, "lib")
        make_readable(home)
        return python


class Peer:
    """tests/helpers/two_users_peer.py running as `user`, one JSON line each way."""

    def __init__(self, lab, user):
        self.lab, self.user = lab, user
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.popen = subprocess.Popen(lab.runtime.command(user, lab.runtime.peer), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self.errors, text=True,
                                      cwd=lab.runtime.base, env=lab.runtime.env(user))
        self.pid = self.popen.pid   # setpriv execs the interpreter: the same process
        self.hung = False

    def send(self, cmd, **args):
        self.popen.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.popen.stdin.flush()

    def receive(self, timeout=60):
        ready, _, _ = select.select([self.popen.stdout], [], [], timeout)
        line = self.popen.stdout.readline() if ready else ""
        self.hung = not line
        answer = json.loads(line) if line else {"error": "no answer" if ready else f"no answer within {timeout} s"}
        if "error" in answer:
            self.errors.seek(0)
            raise AssertionError(f"{self.user}'s process {self.pid}: {answer['error']}\n{self.errors.read()[-3000:]}")
        return answer

    def call(self, cmd, **args):
        self.send(cmd, **args)
        return self.receive()

    def kill(self):
        os.kill(self.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self):
        if self.hung and self.popen.poll() is None:
            self.kill()
        if self.popen.poll() is None:
            try:
                self.call("exit")
                self.popen.wait(timeout=30)
            finally:
                if self.popen.poll() is None:
                    self.kill()


class Lab:
    def __init__(self, runtime, a, b):
        self.runtime, self.a, self.b = runtime, a, b
        self.peers = []
        self.directories = {"/dev/shm", "/tmp", tempfile.gettempdir()}

    def spawn(self, *users):
        peers = [Peer(self, user) for user in users]
        self.peers += peers
        return peers

    def open(self, *users):
        """Start a process as each user, all at once; each opens soft0 and registers memory."""
        peers = self.spawn(*users)
        for peer in peers:
            peer.send("open")
        for peer in peers:
            peer.info = peer.receive()
            assert peer.info["pid"] == peer.pid and peer.info["uid"] == peer.user.uid
            self.directories.add(peer.info["dir"])
        return peers

    def stop_all(self):
        for peer in self.peers:
            peer.stop()
        self.peers = []

    def finish(self):
        """Every process exits cleanly, and neither user keeps a segment or a process."""
        self.stop_all()
        for user in (self.a, self.b):
            assert segments_of(user.uid, self.directories) == [], f"{user} left segments behind"
            deadline = time.monotonic() + 10
            while processes_of(user.uid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert processes_of(user.uid) == [], f"{user} left processes behind"


@pytest.fixture(scope="module")
def lab():
    for needed in ("useradd", "userdel", "setpriv"):
        tool(needed)
    parent = next((d for d in (tempfile.gettempdir(), "/tmp", "/var/tmp") if traversable_by_everyone(d)), None)
    assert parent, "no temp directory that other users can reach"
    base = tempfile.mkdtemp(prefix="rdmalab-two-users-", dir=parent)
    os.chmod(base, 0o755)
    homes = os.path.join(base, "home")
    os.mkdir(homes, 0o755)
    directories = {"/dev/shm", "/tmp", tempfile.gettempdir()}
    remove_stale_users(directories)
    users, the_lab = [], None
    try:
        users.append(create_user("t1", homes))
        users.append(create_user("t2", homes))
        the_lab = Lab(Runtime(base, users[0]), *users)
        yield the_lab
    finally:
        if the_lab is not None:
            for peer in the_lab.peers:
                if peer.popen.poll() is None:
                    peer.kill()
            directories |= the_lab.directories
        for user in users:
            remove_user(user.name, user.uid, directories)
        shutil.rmtree(base, ignore_errors=True)
        for user in users:
            with pytest.raises(KeyError):
                pwd.getpwnam(user.name)


@pytest.fixture
def fresh(lab):
    yield lab
    lab.stop_all()


def path_of(info, kind):
    return os.path.join(info["dir"], info[f"{kind}_name"])


def test_each_user_has_its_own_segments_mode_0600_in_one_sticky_directory(fresh):
    lab = fresh
    a, b = lab.open(lab.a, lab.b)
    assert a.info["dir"] == b.info["dir"], "both users must choose the same directory, or nothing here is tested"
    mode = os.stat(a.info["dir"]).st_mode
    assert mode & stat.S_ISVTX and mode & stat.S_IWOTH, \
        f"{a.info['dir']} must be world-writable and sticky (1777), so that users cannot delete each other's files"
    for peer in (a, b):
        for kind in ("mr", "qp"):
            st = os.stat(path_of(peer.info, kind))
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (peer.user.uid, peer.user.gid, 0o600)
            assert peer.info[f"{kind}_name"] in peer.info["segments"]
        assert sorted(os.path.basename(p) for p in segments_of(peer.user.uid, [peer.info["dir"]])) == peer.info["segments"]
    lab.finish()


def expect_nothing_reached(result):
    refused = {f"{action} {kind}": "PermissionError" for kind in ("mr", "qp")
               for action in ("read", "open", "map", "unlink")}
    refused["read /proc/<pid>/mem"] = "PermissionError"
    assert {key: result[key] for key in refused} == refused, result
    assert result["shm.attach mr"] == result["shm.attach qp"] == "refused"
    # the responder is our own QP, which finds no such key: the remote key is refused
    for op in ("WRITE", "READ", "FETCH_ADD"):
        assert result[f"{op} with its rkey, own loopback"] == "REM_ACCESS_ERR", result
    # the victim's QP is not on our device: nobody answers, the requester retries, then gives up
    for op in ("WRITE", "READ", "FETCH_ADD", "SEND"):
        assert result[f"{op} to its QP"] == "RETRY_EXC_ERR", result
    assert result["WRITE to its QP, rc.connect"] is None, result   # retry_cnt 7: retries forever, as rxe does


def test_another_users_keys_address_and_qp_number_reach_nothing(fresh):
    lab = fresh
    a1, a2, b1, b2 = lab.open(lab.a, lab.a, lab.b, lab.b)
    for x, y in ((a1, a2), (b1, b2)):
        x.call("connect", remote=y.info)
        y.call("connect", remote=x.info)
        assert y.call("write", remote=x.info, seed=1)["status"] == "SUCCESS"   # a real connection, in use
    for attacker, victim in ((b2, a1), (a2, b1)):
        before = victim.call("state")
        assert before["qp_state"] == 3 and before["completions"] == []   # RTS, 4 receives posted, none used
        result = attacker.call("attack", victim={**victim.info, "expected_psn": before["expected_psn"]}, unlink=True)
        expect_nothing_reached(result)
        assert victim.call("state") == before   # memory, QP state, expected PSN, receive queue, segments
        for kind in ("mr", "qp"):
            assert os.stat(path_of(victim.info, kind)).st_uid == victim.user.uid

    # The control: the same attack from the victim's own user does reach it, so the user boundary stopped it.
    before = a1.call("state")
    control = a2.call("attack", victim={**a1.info, "expected_psn": before["expected_psn"]}, unlink=False)
    assert control["read mr"] == control["map qp"] == control["shm.attach mr"] == "ok", control
    assert control["WRITE to its QP"] == "SUCCESS", control
    assert a1.call("state")["digest"] == control["mark digest"] != before["digest"]
    lab.finish()


def test_segments_forged_by_another_user_are_not_trusted(fresh):
    # B plants a QP and an MR segment of its own, mode 0666, laid out as valid ones: A's QP connected to
    # that QP number, with the PSN it claims to expect, must neither write into B's file nor read from it.
    lab = fresh
    a1, b1 = lab.open(lab.a, lab.b)
    for op in ("WRITE", "READ"):
        fake = b1.call("forge")
        assert a1.call("reach", remote=fake, op=op) == {"status": "RETRY_EXC_ERR", "local memory changed": False}
        assert b1.call("forged")["digest"] == fake["digest"]   # nothing of A's landed in B's file
    lab.finish()


def test_files_planted_by_another_user_block_and_break_nobody(fresh):
    # Opening soft0 reads the header of every segment-named file (to reap orphans), as `rdmalab doctor`
    # does (shm.leftovers): a FIFO must not make it wait forever for a writer, a short file or a symlink
    # must not make it fail, for the other user or for root.
    lab = fresh
    (b1,) = lab.open(lab.b)
    b1.call("plant_junk")
    (a1,) = lab.spawn(lab.a)
    a1.send("start")
    assert a1.receive(timeout=15)["pid"] == a1.pid
    root = subprocess.run([lab.runtime.python, "-s", "-c",
                           "from rdmalab.verbs.soft import shm; shm.reap_orphans(); shm.leftovers()"],
                          capture_output=True, text=True, timeout=15, env=lab.runtime.env(), cwd=lab.runtime.base)
    assert root.returncode == 0, root.stderr
    lab.finish()


def test_a_killed_process_is_reaped_by_its_own_user_only(fresh):
    lab = fresh
    a1, b1 = lab.open(lab.a, lab.b)
    orphans = {peer.user.name: [path_of(peer.info, kind) for kind in ("mr", "qp")] for peer in (a1, b1)}
    for peer in (a1, b1):
        peer.kill()   # SIGKILL: no cleanup runs
    a_orphans, b_orphans = orphans[lab.a.name], orphans[lab.b.name]
    assert all(os.path.exists(path) for path in a_orphans + b_orphans)

    (b2,) = lab.spawn(lab.b)
    b2.call("start")   # opening soft0 reaps this user's orphans
    assert not any(os.path.exists(path) for path in b_orphans)
    assert all(os.stat(path).st_uid == lab.a.uid for path in a_orphans), "B's start reaped A's segments"
    assert b2.call("reap")["reaped"] == []
    assert b2.call("unlink", paths=a_orphans) == {path: "PermissionError" for path in a_orphans}
    assert all(os.path.exists(path) for path in a_orphans)

    (a2,) = lab.spawn(lab.a)
    a2.call("start")
    assert not any(os.path.exists(path) for path in a_orphans), "A's next start did not reap A's orphans"

    # root reaps any user's orphans
    (a3,) = lab.open(lab.a)
    a3.kill()
    a3_orphans = [path_of(a3.info, kind) for kind in ("mr", "qp")]
    reaped = subprocess.run([lab.runtime.python, "-s", "-c",
                             "import json; from rdmalab.verbs.soft import shm; print(json.dumps(shm.reap_orphans()))"],
                            capture_output=True, text=True, timeout=60, env=lab.runtime.env(), cwd=lab.runtime.base)
    assert reaped.returncode == 0, reaped.stderr
    assert {os.path.basename(path) for path in a3_orphans} <= set(json.loads(reaped.stdout))
    assert not any(os.path.exists(path) for path in a3_orphans)
    lab.finish()


def test_both_users_use_soft0_at_the_same_time(fresh):
    lab = fresh
    a1, a2, b1, b2 = lab.open(lab.a, lab.a, lab.b, lab.b)
    for x, y in ((a1, a2), (b1, b2)):
        x.call("connect", remote=y.info)
        y.call("connect", remote=x.info)
    for seed in range(10):   # both users' WRITEs in flight at once, in both directions
        pairs = [(a2, a1), (b1, b2)] if seed % 2 else [(a1, a2), (b2, b1)]
        for writer, target in pairs:
            writer.send("write", remote=target.info, seed=seed)
        for writer, target in pairs:
            done = writer.receive()
            assert done["status"] == "SUCCESS"
            assert target.call("state")["digest"] == done["digest"]
    lab.finish()
