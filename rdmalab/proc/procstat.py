"""What a process spent, read from the kernel: CPU time, read/write syscalls, context switches, bytes,
and how long it waited for a CPU while it could have run (schedstat's run delay: the sign of a
machine that cannot run everything that wants to run).

    before = procstat.snapshot(pid); ...; spent = procstat.since(before)

Syscalls are the read-like and write-like calls of /proc/<pid>/io (syscr, syscw: read, readv, write
and friends; not recv()/send(), which is why rdmalab.sockets uses read() and write()), and
rchar/wchar the bytes they moved. For this process, CPU time and context switches come from
getrusage(), which is exact at any moment; for another process, from /proc/<pid>/task/*/schedstat
and status, which are exact while it is blocked (the kernel updates them when a task is switched
out: a process measured from outside while it runs shows up to a scheduler tick too little).
A process measuring itself also counts the reads of /proc that measuring takes; since() subtracts
that (measured once, `self_overhead()`), so a loop that makes no syscall shows 0. Linux only.

Why not psutil: it gives the read/write syscall counts (io_counters) and context switches, but
another process's CPU time only in clock ticks (10 ms) and no run delay at all; the lab measures
loops of a few milliseconds from outside the process that runs them, so it reads schedstat's
nanoseconds itself. (benchmarks/idle.py, which watches whole process trees for seconds, uses psutil.)
"""
import os
import resource
import time

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def _fields(path):
    with open(path) as f:
        return dict(line.split(":", 1) for line in f if ":" in line)


def stat_fields(pid):
    """The fields of /proc/<pid>/stat after the command name: [0] state, [1] parent pid, [11] utime,
    [12] stime, [19] start time (clock ticks since boot). OSError if there is no such process."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def pid_exists(pid):
    """Is there a process `pid` (a zombie, killed but not yet waited for, included)? One kill(pid, 0):
    no file is read, so a data path may ask now and then without a read or write system call."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid):
    """Is process `pid` still there, holding memory? (A zombie, killed but not yet waited for, is not.)"""
    if not pid_exists(pid):
        return False
    try:
        return stat_fields(pid)[0] != "Z"
    except OSError:
        return True


def processes_of(uid):
    """Pids of every process with `uid` as its real, effective or saved user id, in order."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:4]
        except (OSError, StopIteration):
            continue
        if str(uid) in uids:
            found.append(int(entry))
    return sorted(found)


def snapshot(pid=None):
    """Counters of process `pid` (default: this one), summed over its threads."""
    own = pid is None or pid == os.getpid()
    if own and _overhead is None and not _calibrating:
        self_overhead()   # measured before any snapshot it will be subtracted from
    pid = os.getpid() if own else pid
    base = f"/proc/{pid}"
    io = {k: int(v) for k, v in _fields(f"{base}/io").items()}   # first: the reads below count next time
    snap = {"pid": pid, "syscr": io["syscr"], "syscw": io["syscw"], "rchar": io["rchar"], "wchar": io["wchar"],
            "wall": time.monotonic()}
    run_ns = delay_ns = voluntary = involuntary = 0
    for task in os.listdir(f"{base}/task"):
        try:
            with open(f"{base}/task/{task}/schedstat") as f:
                ran, waited = f.read().split()[:2]
            run_ns, delay_ns = run_ns + int(ran), delay_ns + int(waited)
            if own:
                continue
            status = _fields(f"{base}/task/{task}/status")
        except (FileNotFoundError, ProcessLookupError):
            continue   # a thread that ended meanwhile
        voluntary += int(status["voluntary_ctxt_switches"])
        involuntary += int(status["nonvoluntary_ctxt_switches"])
    snap["run_delay"] = delay_ns / 1e9
    if own:
        r = resource.getrusage(resource.RUSAGE_SELF)
        snap.update(user_s=r.ru_utime, system_s=r.ru_stime, voluntary=r.ru_nvcsw, involuntary=r.ru_nivcsw)
        return snap
    stat = stat_fields(pid)
    utime, stime = int(stat[11]), int(stat[12])
    user_share = utime / (utime + stime) if utime + stime else 1.0   # ticks only say how to split it
    snap.update(user_s=run_ns / 1e9 * user_share, system_s=run_ns / 1e9 * (1 - user_share),
                voluntary=voluntary, involuntary=involuntary)
    return snap


HOST_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def host_cpu():
    """This host's CPU time since it booted, all CPUs together, by what it went to (seconds, /proc/stat's
    cpu line): "softirq" is the kernel's deferred interrupt work (where a software NIC such as rxe handles
    arriving packets: without IRQ time accounting it is charged to whichever task it interrupted, with it,
    CONFIG_IRQ_TIME_ACCOUNTING, to no task), "system" kernel
    code run for processes and kernel threads (rxe's kworkers too)."""
    with open("/proc/stat") as f:
        ticks = f.readline().split()[1:1 + len(HOST_CPU_FIELDS)]
    return {name: int(t) / TICKS_PER_SECOND for name, t in zip(HOST_CPU_FIELDS, ticks)}


def waited_for_cpu():
    """Seconds the calling thread has waited for a CPU while it could have run, since it started (its
    schedstat's run delay): what a timed loop lost to other work. 0.0 where the kernel keeps no such count."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


_overhead = None
_calibrating = False


def self_overhead():
    """(read syscalls, bytes read) that one snapshot of this process adds to its own counters."""
    global _overhead, _calibrating
    if _overhead is None:
        _calibrating = True
        a = snapshot()
        b = snapshot()
        _calibrating = False
        _overhead = (b["syscr"] - a["syscr"], b["rchar"] - a["rchar"])
    return _overhead


def since(before, after=None):
    """What the process spent between two snapshots (the second taken now if not given)."""
    reads, read_bytes = self_overhead() if before["pid"] == os.getpid() else (0, 0)
    after = after or snapshot(before["pid"])
    d = {k: after[k] - before[k] for k in before if k != "pid"}
    user, system = max(d["user_s"], 0.0), max(d["system_s"], 0.0)
    return {"cpu_s": user + system, "user_s": user, "system_s": system, "wall_s": d["wall"],
            "waited_for_cpu_s": max(d["run_delay"], 0.0),
            "read_syscalls": d["syscr"] - reads, "write_syscalls": d["syscw"],
            "bytes_read": d["rchar"] - read_bytes, "bytes_written": d["wchar"],
            "voluntary_switches": d["voluntary"], "involuntary_switches": d["involuntary"]}
