"""A class on one server: the settings jupyterhub_config.py reads, and the spawner that gives each learner
their lessons, their limits and their own room for soft0's memory, and takes it all back at stop.

Each learner's single-user server (JupyterHub's LocalProcessSpawner: a process of the learner's Unix user):
- lessons: at the first start, a copy of the lessons in ~/rdmalab-lessons (never overwritten later:
  it holds the learner's work);
- soft0's room: a tmpfs of RDMALAB_CLASS_SHM bytes mounted for the learner alone (mode 0700) at
  RDMALAB_CLASS_SHM_ROOT/<user>, and RDMALAB_SHM_DIR pointing at it: registered memory, QPs and CQs
  live there, so a learner who registers too much gets soft0's ENOMEM ("do not fit in ... register
  less, close what you no longer use") and nobody else notices. Without the right to mount (a
  container without CAP_SYS_ADMIN), a directory of the learner's own, mode 0700, with no size cap;
- CPU, memory and tasks: a cgroup per learner (v2 cpu.max, memory.max, pids.max; or cgroup v1's cpu,
  memory and pids hierarchies), where the hierarchy is writable; the server and all it starts (kernels,
  lessons' helper processes) belong to it. Otherwise the limits are logged as not enforced;
- at stop (asked for, or the server died): every process left in the learner's cgroup (without a
  cgroup: every process of the learner's user) is killed, the tmpfs is unmounted, so no segment and
  no process outlives the server.
"""
import os
import pwd
import shutil
import signal
import subprocess
import time

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Unicode

from rdmalab.proc.procstat import processes_of

GiB = 1 << 30
MiB = 1 << 20


def size(text):
    """'512M', '2G', '1048576' -> bytes."""
    text = str(text).strip().upper().rstrip("B").rstrip("I")
    units = {"K": 1 << 10, "M": MiB, "G": GiB}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


class Settings:
    """Everything a class can change, from the environment (workshop/README.md lists them)."""

    def __init__(self, env=os.environ):
        get = env.get
        self.prefix = get("RDMALAB_CLASS_PREFIX", "/opt/rdmalab")
        self.venv = get("RDMALAB_CLASS_VENV", os.path.join(self.prefix, "venv"))
        self.lessons = get("RDMALAB_CLASS_LESSONS", os.path.join(self.prefix, "src", "notebooks"))
        self.state = get("RDMALAB_CLASS_STATE", "/var/lib/rdmalab-hub")
        self.class_dir = get("RDMALAB_CLASS_DIR", "")            # the instructor's view; empty: off
        self.shm_root = get("RDMALAB_CLASS_SHM_ROOT", "/run/rdmalab-class")
        self.shm = size(get("RDMALAB_CLASS_SHM", "512M"))         # soft0's room per learner
        self.memory = size(get("RDMALAB_CLASS_MEMORY", "2G"))     # all of a learner's processes, tmpfs included
        self.cpus = float(get("RDMALAB_CLASS_CPUS", "1"))         # CPUs' worth of time per learner
        self.tasks = int(get("RDMALAB_CLASS_TASKS", "1024"))      # processes and threads per learner
        self.group = get("RDMALAB_CLASS_GROUP", "rdmalab-class")  # who may log in
        self.admins = [n for n in get("RDMALAB_CLASS_ADMINS", "").split(",") if n]
        self.url = get("RDMALAB_HUB_URL", "http://0.0.0.0:8000")
        self.hub_port = int(get("RDMALAB_HUB_API_PORT", "8081"))
        self.proxy_api_port = int(get("RDMALAB_PROXY_API_PORT", "8001"))
        self.proxy = get("RDMALAB_CLASS_PROXY", "") or shutil.which("configurable-http-proxy") or \
            os.path.join(self.prefix, "node_modules", ".bin", "configurable-http-proxy")
        self.admin_token = get("RDMALAB_HUB_ADMIN_TOKEN", "")


def tool(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin:/bin") or name


class Cgroup:
    """One learner's cgroup: v2 (unified) if /sys/fs/cgroup is, else v1's cpu, memory and pids
    hierarchies. `files` are the cgroup.procs files a new process writes its pid into."""

    ROOT = "/sys/fs/cgroup"

    def __init__(self, user, root=ROOT):
        self.user, self.dirs = user, []
        if os.path.exists(os.path.join(root, "cgroup.controllers")):   # v2
            parent = os.path.join(root, "rdmalab-class")
            self.v2 = True
            self.plan = {parent: {}, os.path.join(parent, user): {}}
        else:
            self.v2 = False
            self.plan = {os.path.join(root, c, "rdmalab-class", user): {} for c in ("cpu", "memory", "pids")
                         if os.path.isdir(os.path.join(root, c))}

    def create(self, cpus, memory, tasks):
        """Make the cgroup and set its limits; what was enforced (a list of words), [] if nothing."""
        enforced = []
        try:
            if self.v2:
                parent, mine = list(self.plan)
                os.makedirs(mine, exist_ok=True)
                for where in (os.path.dirname(parent), parent):
                    _write(os.path.join(where, "cgroup.subtree_control"), "+cpu +memory +pids", quiet=True)
                self.dirs = [mine]
                enforced += _set(mine, "cpu.max", f"{int(cpus * 100000)} 100000", "cpu")
                enforced += _set(mine, "memory.max", str(memory), "memory")
                enforced += _set(mine, "memory.swap.max", "0", None)
                enforced += _set(mine, "pids.max", str(tasks), "tasks")
            else:
                for mine in self.plan:
                    os.makedirs(mine, exist_ok=True)
                    self.dirs.append(mine)
                    controller = os.path.basename(os.path.dirname(os.path.dirname(mine)))
                    if controller == "cpu":
                        enforced += _set(mine, "cpu.cfs_period_us", "100000", None)
                        enforced += _set(mine, "cpu.cfs_quota_us", str(int(cpus * 100000)), "cpu")
                    elif controller == "memory":
                        enforced += _set(mine, "memory.limit_in_bytes", str(memory), "memory")
                    elif controller == "pids":
                        enforced += _set(mine, "pids.max", str(tasks), "tasks")
        except OSError:
            pass
        return enforced

    @property
    def files(self):
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def pids(self):
        found = set()
        for path in self.files:
            try:
                with open(path) as f:
                    found |= {int(line) for line in f if line.strip()}
            except OSError:
                continue
        return found

    def kill_all(self, timeout=10):
        return _kill_until_gone(self.pids, timeout)

    def remove(self):
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        self.dirs = []


def _write(path, value, quiet=False):
    try:
        with open(path, "w") as f:
            f.write(value)
        return True
    except OSError:
        if not quiet:
            raise
        return False


def _set(directory, name, value, word):
    ok = _write(os.path.join(directory, name), value, quiet=True)
    return [word] if ok and word else []


def _kill_until_gone(pids_now, timeout):
    """SIGKILL what `pids_now()` lists until it lists nothing (new children included); True if it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = pids_now()
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    return not pids_now()


def is_mount(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


class ClassSpawner(LocalProcessSpawner):
    """LocalProcessSpawner, plus the learner's lessons, soft0 room, limits, and a clean stop."""

    lessons_dir = Unicode("rdmalab-lessons", config=True, help="where, in the learner's home, the lessons go")

    @property
    def settings(self):
        return Settings()

    @property
    def shm_dir(self):
        return os.path.join(self.settings.shm_root, self.user.name)

    def user_env(self, env):
        env = super().user_env(env)
        s = self.settings
        env.update(RDMALAB_SHM_DIR=self.shm_dir, RDMALAB_PROVIDER="soft",
                   PATH=f"{s.venv}/bin:/usr/local/bin:/usr/bin:/bin",
                   # one thread per library: several learners share a few cores
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        if s.class_dir:
            env["RDMALAB_CLASS_DIR"] = s.class_dir
        return env

    async def start(self):
        s, entry = self.settings, pwd.getpwnam(self.user.name)
        self.clean_up(entry)                 # what an earlier server (or a crashed hub) left
        self.deliver_lessons(entry, s.lessons)
        room = self.make_room(entry, s.shm)
        self.cgroup = Cgroup(self.user.name)
        enforced = self.cgroup.create(s.cpus, s.memory, s.tasks)
        self.log.info("%s: soft0's room %s; limits enforced: %s", self.user.name, room,
                      ", ".join(enforced) or "none (no writable cgroup hierarchy)")
        return await super().start()

    def make_preexec_fn(self, name):
        then = super().make_preexec_fn(name)
        files = list(self.cgroup.files) if getattr(self, "cgroup", None) else []

        def preexec():
            for path in files:   # still root: join the learner's cgroup, then become the learner
                with open(path, "w") as f:
                    f.write(str(os.getpid()))
            then()
        return preexec

    async def stop(self, now=False):
        try:
            await super().stop(now=now)
        finally:
            self.clean_up(pwd.getpwnam(self.user.name))

    def run_post_stop_hook(self):
        # the hub calls this after every stop, also when it found the server dead (and then calls no stop())
        self.clean_up(pwd.getpwnam(self.user.name))
        return super().run_post_stop_hook()

    def deliver_lessons(self, entry, source):
        """A copy of the lessons at the first start, owned by the learner; later starts keep theirs."""
        target = os.path.join(entry.pw_dir, self.lessons_dir)
        if os.path.lexists(target) or not os.path.isdir(source):
            return
        scratch = os.path.join(entry.pw_dir, f".{self.lessons_dir}.{os.getpid()}")
        shutil.copytree(source, scratch, ignore=shutil.ignore_patterns(".*", "__pycache__"), symlinks=False)
        for d, _, files in os.walk(scratch):
            os.chown(d, entry.pw_uid, entry.pw_gid)
            for name in files:
                os.chown(os.path.join(d, name), entry.pw_uid, entry.pw_gid)
        os.rename(scratch, target)

    def make_room(self, entry, shm):
        """A tmpfs of `shm` bytes for the learner's soft0 segments (or a plain private directory)."""
        os.makedirs(self.settings.shm_root, mode=0o755, exist_ok=True)
        path = self.shm_dir
        os.makedirs(path, mode=0o700, exist_ok=True)
        options = f"size={shm},mode=0700,uid={entry.pw_uid},gid={entry.pw_gid},nosuid,nodev"
        done = subprocess.run([tool("mount"), "-t", "tmpfs", "-o", options, f"rdmalab-{self.user.name}", path],
                              capture_output=True, text=True, timeout=30, check=False)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        os.chmod(path, 0o700)
        if done.returncode == 0:
            return f"{path}: tmpfs of {shm >> 20} MiB"
        self.log.warning("could not mount a tmpfs for %s (%s): soft0's room is a plain directory, no size cap",
                         self.user.name, done.stderr.strip())
        return f"{path}: a directory, no size cap"

    def clean_up(self, entry):
        """No process, no segment, no mount of this learner's is left."""
        cgroup = getattr(self, "cgroup", None) or Cgroup(self.user.name)
        if not cgroup.dirs:
            cgroup.dirs = [d for d in (list(cgroup.plan)[-1:] if cgroup.v2 else cgroup.plan) if os.path.isdir(d)]
        if cgroup.dirs:
            cgroup.kill_all()
        # what escaped the cgroup, or everything when there is none: the learner's user is the class's
        if not _kill_until_gone(lambda: processes_of(entry.pw_uid), 10):
            self.log.warning("%s: processes would not die: %s", self.user.name, processes_of(entry.pw_uid))
        cgroup.remove()
        path = self.shm_dir
        if os.path.isdir(path):
            for attempt in range(5):   # a mount left by a crashed hub may lie under a newer one
                if not is_mount(path):
                    break
                lazy = ["-l"] if attempt >= 2 else []
                subprocess.run([tool("umount"), *lazy, path], check=False, capture_output=True, timeout=30)
            shutil.rmtree(path, ignore_errors=True)
        self.log.info("%s: cleaned up (processes, cgroup, soft0's room)", self.user.name)
