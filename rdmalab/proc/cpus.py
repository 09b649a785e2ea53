"""How many CPUs this process can really use (its affinity, its cgroup's CPU quota), and running on one."""
import contextlib
import math
import os


@contextlib.contextmanager
def pinned_to_one_cpu():
    """This process, and every process it starts meanwhile, on its first CPU only (as `taskset -c N` does):
    where many learners are (a VM with one vCPU, a busy laptop). Yields that CPU's number."""
    keep = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(keep)})
    try:
        yield min(keep)
    finally:
        os.sched_setaffinity(0, keep)


@contextlib.contextmanager
def pinned_to(count):
    """This process, and every process it starts meanwhile, on its first `count` CPUs only (all of them if it has
    fewer). Yields the CPUs' numbers."""
    keep = os.sched_getaffinity(0)
    chosen = sorted(keep)[:max(1, count)]
    os.sched_setaffinity(0, chosen)
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, keep)


def usable_cpus(cgroup_root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup"):
    """min(CPUs in our affinity mask, cgroup quota / period), as a float (0.5 = half a CPU)."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except AttributeError:   # not Linux
        return float(os.cpu_count() or 1)
    quota = _cgroup_quota(cgroup_root, proc_cgroup)
    return min(cpus, quota) if quota else cpus


def _cgroup_quota(root, proc_cgroup):
    try:
        lines = open(proc_cgroup).read().splitlines()
    except OSError:
        return None
    best = math.inf
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":        # cgroup v2: cpu.max "quota period" or "max period", in every ancestor
            while True:
                best = min(best, _read_v2(os.path.join(root, path.lstrip("/"), "cpu.max")))
                if path in ("/", ""):
                    break
                path = os.path.dirname(path)
        elif "cpu" in controllers.split(","):
            base = os.path.join(root, controllers, path.lstrip("/"))
            best = min(best, _read_v1(base))
    return None if best == math.inf else best


def _read_v2(path):
    try:
        quota, period = open(path).read().split()
        return math.inf if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return math.inf


def _read_v1(base):
    try:
        quota = int(open(os.path.join(base, "cpu.cfs_quota_us")).read())
        period = int(open(os.path.join(base, "cpu.cfs_period_us")).read())
        return math.inf if quota <= 0 else quota / period
    except (OSError, ValueError):
        return math.inf
