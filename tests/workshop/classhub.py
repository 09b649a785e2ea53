"""A class on this machine, for tests/workshop and benchmarks/workshop.py: real Unix users, a real JupyterHub
running workshop/jupyterhub_config.py on 127.0.0.1 (random free ports), driven through its REST API with an
admin token; lessons run cell by cell in kernels that each learner's single-user server starts (the Jupyter
server's kernels API and its websocket channels), as a browser would have them run.

The users cannot read this checkout's .venv (its interpreter may live under /root), so the class's venv is
built as workshop/setup.sh builds it, shared read-only: a venv of a Python of the same version that every
user can run, holding a copy of this .venv's packages and of this checkout's rdmalab.
"""
import asyncio
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from soft import test_two_users as two_users

from rdmalab.lessons.series import notebook, slug_of
from rdmalab.proc.procstat import processes_of

CONFIG = os.path.join(ROOT, "workshop", "jupyterhub_config.py")
LESSONS = [notebook(slug) for slug in ("welcome", "socket-path", "memory-registration", "queue-pairs", "target-cpu")]
CHP_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "rdmalab", "configurable-http-proxy")
CELL_TIMEOUT = 900   # as tests/test_notebooks.py: a cell running 15 minutes has hung


class Unavailable(Exception):
    """Something this machine lacks, with what to install: the test skips and says so."""


def proxy_command():
    """configurable-http-proxy from the npm registry, installed into ~/.cache/rdmalab (make workshop-deps)."""
    found = os.environ.get("RDMALAB_CLASS_PROXY") or os.path.join(CHP_CACHE, "node_modules", ".bin",
                                                                    "configurable-http-proxy")
    if os.path.exists(found):
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("no npm to install configurable-http-proxy: apt-get install nodejs npm (make workshop-deps)")
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", CHP_CACHE,
                           "configurable-http-proxy@5"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not os.path.exists(found):
        raise Unavailable(f"npm install configurable-http-proxy failed: {done.stderr[-500:]}")
    return found


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def build_venv(base):
    """base/venv: a venv every user can run, with this .venv's packages and this checkout's rdmalab."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    python = next((p for p in (f"/usr/bin/{version}", f"/usr/local/bin/{version}")
                   if os.path.exists(p) and two_users.traversable_by_everyone(os.path.dirname(p))), None)
    if python is None:
        raise Unavailable(f"no {version} that every user can run (/usr/bin): apt-get install {version} {version}-venv")
    venv = os.path.join(base, "venv")
    subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True, capture_output=True, timeout=120)
    site = os.path.join(venv, "lib", version, "site-packages")
    ours = next(p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages"))
    shutil.rmtree(site)
    # hard links where they can be (the same file system: fast, no space); a copy otherwise
    if subprocess.run(["cp", "-al", ours, site], capture_output=True, timeout=600, check=False).returncode != 0:
        shutil.rmtree(site, ignore_errors=True)
        subprocess.run(["cp", "-a", ours, site], check=True, timeout=600)
    for name in os.listdir(site):   # the editable install points into this checkout: a copy instead
        if name.startswith("__editable__") and "rdmalab" in name:
            os.unlink(os.path.join(site, name))
    shutil.copytree(os.path.join(ROOT, "rdmalab"), os.path.join(site, "rdmalab"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    two_users.make_readable(venv)
    return venv


class Hub:
    """workshop/jupyterhub_config.py's hub, as root, on 127.0.0.1; `api()` is its REST API with the admin token."""

    def __init__(self, base, venv, proxy, shm="256M", cpus="1"):
        self.base, self.token = base, uuid.uuid4().hex
        self.port, hub_port, proxy_api = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = os.path.join(base, "state")
        self.class_dir = os.path.join(base, "class")
        self.shm_root = os.path.join(base, "shm")
        os.mkdir(self.class_dir)
        os.chmod(self.class_dir, 0o1733)   # as setup.sh makes it: learners create files, cannot list
        self.env = {**os.environ, "RDMALAB_CLASS_VENV": venv, "RDMALAB_CLASS_LESSONS": os.path.join(ROOT, "notebooks"),
                    "RDMALAB_CLASS_STATE": self.state, "RDMALAB_CLASS_DIR": self.class_dir,
                    "RDMALAB_CLASS_SHM_ROOT": self.shm_root, "RDMALAB_CLASS_SHM": shm, "RDMALAB_CLASS_CPUS": cpus,
                    "RDMALAB_HUB_URL": self.url, "RDMALAB_HUB_API_PORT": str(hub_port),
                    "RDMALAB_PROXY_API_PORT": str(proxy_api), "RDMALAB_CLASS_PROXY": proxy,
                    "RDMALAB_HUB_ADMIN_TOKEN": self.token}
        self.log_path = os.path.join(base, "hub.log")
        self.log = open(self.log_path, "w")
        self.popen = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", CONFIG], cwd=base, env=self.env,
                                      stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("GET", "/hub/api/")
                break
            except (OSError, urllib.error.URLError):
                if self.popen.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the hub did not come up:\n{self.tail()}")
                time.sleep(0.5)

    def tail(self, n=4000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-n:]

    def api(self, method, path, body=None, timeout=60):
        request = urllib.request.Request(self.url + path, method=method, headers={
            "Authorization": f"token {self.token}", "Content-Type": "application/json"},
            data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read()
            return json.loads(text) if text else None

    def start_servers(self, names, timeout=300):
        known = {u["name"] for u in self.api("GET", "/hub/api/users")}
        if set(names) - known:
            self.api("POST", "/hub/api/users", {"usernames": sorted(set(names) - known)})
        for name in names:
            self.api("POST", f"/hub/api/users/{name}/server")
        deadline = time.monotonic() + timeout
        waiting = set(names)
        while waiting:
            for name in list(waiting):
                server = self.api("GET", f"/hub/api/users/{name}")["servers"].get("")
                if server and server.get("ready"):
                    waiting.discard(name)
            if waiting and time.monotonic() > deadline:
                raise AssertionError(f"servers of {sorted(waiting)} not ready in {timeout} s:\n{self.tail()}")
            time.sleep(0.5)

    def server_pid(self, name):
        return self.api("GET", f"/hub/api/users/{name}?include_stopped_servers")["servers"][""]["state"]["pid"]

    def stop_server(self, name, timeout=120):
        try:
            self.api("DELETE", f"/hub/api/users/{name}/server")
        except urllib.error.HTTPError as error:
            if error.code not in (400, 404):   # not running any more
                raise
        deadline = time.monotonic() + timeout
        while self.api("GET", f"/hub/api/users/{name}")["servers"].get(""):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}'s server did not stop in {timeout} s:\n{self.tail()}")
            time.sleep(0.3)

    def stop(self):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)   # cleanup_servers: the hub stops (and cleans up) every server
            try:
                self.popen.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)   # the proxy, if the hub left it
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=30)
        self.log.close()


# -- a learner's kernel, through their server ----------------------------------------------------------------

class Kernel:
    """A kernel started by a learner's single-user server; `run(code)` executes as a notebook cell does."""

    def __init__(self, hub, user):
        self.hub, self.user = hub, user
        self.base = f"{hub.url}/user/{user}"

    async def start(self, path="rdmalab-lessons"):
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect
        model = await asyncio.to_thread(self._rest, "POST", "/api/kernels", {"name": "python3", "path": path})
        self.id, self.session = model["id"], uuid.uuid4().hex
        url = f"ws://127.0.0.1:{self.hub.port}/user/{self.user}/api/kernels/{self.id}/channels"
        self.ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {self.hub.token}"},
                                                      connect_timeout=60, request_timeout=60))
        return self

    def _rest(self, method, path, body=None):
        request = urllib.request.Request(self.base + path, method=method, headers={
            "Authorization": f"token {self.hub.token}", "Content-Type": "application/json"},
            data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(request, timeout=120) as answer:
            text = answer.read()
            return json.loads(text) if text else None

    def notebook(self, name):
        """The learner's own copy of a lesson, read through their server's contents API."""
        return self._rest("GET", f"/api/contents/rdmalab-lessons/{name}")["content"]

    async def run(self, code, timeout=CELL_TIMEOUT):
        """{"status": "ok"|"error", "error": ename/evalue/traceback, "stdout": text} of one cell."""
        msg_id = uuid.uuid4().hex
        await self.ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": self.user, "session": self.session, "msg_type": "execute_request",
                       "version": "5.3", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out, reply, idle, error = [], None, False, None
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                return {"status": "timeout", "error": f"no reply within {timeout} s", "stdout": "".join(out)[-3000:]}
            raw = await asyncio.wait_for(self.ws.read_message(), left)
            if raw is None:
                return {"status": "error", "error": "the kernel's websocket closed", "stdout": "".join(out)[-3000:]}
            if isinstance(raw, bytes):
                continue
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                error = f"{msg['content']['ename']}: {msg['content']['evalue']}\n" + "\n".join(msg["content"]["traceback"])
            elif kind == "execute_reply":
                reply = msg["content"]["status"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        return {"status": reply, "error": error, "stdout": "".join(out)[-3000:]}

    async def close(self):
        self.ws.close()
        try:
            await asyncio.to_thread(self._rest, "DELETE", f"/api/kernels/{self.id}")
        except urllib.error.HTTPError:
            pass


DASHBOARD_FIGURES = """
import json as _json
_figures = {}
try:
    for _test in ("write_lat", "tcp_lat", "write_bw", "tcp_bw"):
        _row = dashboard.results[_test].rows[-1]
        _figures[_test] = {k: _row[k] for k in _row if isinstance(_row[k], (int, float, str))}
except Exception as _error:
    _figures["error"] = repr(_error)
print("RDMALAB-FIGURES " + _json.dumps(_figures))
"""


async def run_lesson(hub, user, name, extra=None):
    """One lesson, every code cell in order (QUICK = True after the parameters cell, as papermill does)."""
    kernel = await Kernel(hub, user).start()
    started = time.monotonic()
    result = {"user": user, "lesson": name, "status": "ok"}
    try:
        nb = await asyncio.to_thread(kernel.notebook, name)
        cells = []
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                cells.append(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
                if "parameters" in cell.get("metadata", {}).get("tags", []):
                    cells.append("QUICK = True")
        for code in cells + ([extra] if extra else []):
            done = await kernel.run(code)
            if done["status"] != "ok":
                result.update(status=done["status"], error=done["error"], cell=code[:300], stdout=done["stdout"])
                break
            if code is extra:
                line = next((ln for ln in done["stdout"].splitlines() if ln.startswith("RDMALAB-FIGURES ")), None)
                result["figures"] = json.loads(line.split(" ", 1)[1]) if line else None
    finally:
        result["seconds"] = time.monotonic() - started
        await kernel.close()
    return result


async def run_lessons(hub, users, lessons=LESSONS):
    """Every user runs every lesson in order, all users at once; the results, by user then lesson."""
    async def one(user):
        results = []
        for name in lessons:
            figures = DASHBOARD_FIGURES if slug_of(name) == "target-cpu" else None
            results.append(await run_lesson(hub, user, name, figures))
        return results
    return dict(zip(users, await asyncio.gather(*(one(u) for u in users))))


# -- the class: users, venv, hub, and the sweep afterwards ---------------------------------------------------

class Class:
    """N learners and their hub; `close()` leaves nothing (call it from a finalizer)."""

    def __init__(self, n, shm="256M", cpus="1"):
        for needed in ("useradd", "userdel", "setpriv"):
            two_users.tool(needed)
        self.base = tempfile.mkdtemp(prefix="rdmalab-workshop-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.homes = os.path.join(self.base, "home")
        os.mkdir(self.homes, 0o755)
        self.users, self.hub = [], None
        self.directories = {"/dev/shm", "/tmp", tempfile.gettempdir()}
        two_users.remove_stale_users(self.directories)
        try:
            proxy = proxy_command()
            self.venv = build_venv(self.base)
            for i in range(n):
                self.users.append(two_users.create_user(f"w{i}", self.homes))
            self.hub = Hub(self.base, self.venv, proxy, shm=shm, cpus=cpus)
        except BaseException:
            self.close()
            raise

    @property
    def names(self):
        return [u.name for u in self.users]

    def shm_dir(self, user):
        return os.path.join(self.hub.shm_root, user.name)

    def leftovers(self):
        """{user: {"processes": [...], "segments": [...], "mounts": [...]}} for what anyone left."""
        mounts = mounts_under(self.base)
        out = {}
        for user in self.users:
            dirs = self.directories | {self.shm_dir(user)}
            left = {"processes": processes_of(user.uid), "segments": two_users.segments_of(user.uid, dirs),
                    "mounts": [m for m in mounts if self.hub and m == self.shm_dir(user)]}
            if any(left.values()):
                out[user.name] = left
        return out

    def close(self):
        try:
            if self.hub is not None:
                self.hub.stop()
        finally:
            for user in self.users:
                dirs = self.directories | ({self.shm_dir(user)} if self.hub else set())
                two_users.remove_user(user.name, user.uid, dirs)
            for _ in range(10):   # the learners' tmpfs, if the hub could not unmount them (stacked ones too)
                mounts = mounts_under(self.base)
                if not mounts:
                    break
                for path in mounts:
                    subprocess.run(["umount", "-l", path], check=False, capture_output=True, timeout=30)
            for cg in ("cpu", "memory", "pids", ""):   # what the hub could not remove (v1 hierarchies, or v2)
                for user in self.users:
                    path = os.path.join("/sys/fs/cgroup", cg, "rdmalab-class", user.name)
                    for _ in range(50):
                        try:
                            os.rmdir(path)
                            break
                        except FileNotFoundError:
                            break
                        except OSError:   # busy until its last process is reaped
                            time.sleep(0.1)
            shutil.rmtree(self.base, ignore_errors=True)


def mounts_under(top):
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(top.rstrip("/") + "/")]


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)
