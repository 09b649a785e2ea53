"""Waiting that costs nothing when there is nothing to do.

Everywhere the lab waits (a completion on a CQ, a flag or a sequence number in registered memory)
it calls `until(ready, ...)`, which tries three things in turn:

1. **spin**: check again and again for SPIN_S. Worth it only when the peer that will answer runs
   on another CPU at the same time, so only when this process may use two CPUs or more, and only
   when the processes that wait for each other (RDMALAB_LOCAL_PEERS: an AllReduce's local ranks)
   have a CPU each: 4 ranks spinning on 2 CPUs spend their turns spinning while the rank they wait
   for waits for a CPU. On soft0's udp link the NIC processes (ours and the peer host's) must run
   too before an answer comes, so they count as well; there, with two CPUs or more but not one each,
   a waiter neither spins nor yields: it sleeps at once and leaves the CPUs to the NICs;
2. **yield**: `os.sched_yield()` between checks, a bounded number of times. With one CPU, the peer
   runs at once on ours, and answers in a few microseconds; but a yield that a CPU-bound process
   takes keeps us off the CPU for its whole slice, so that too counts as preempted (below);
3. **sleep**: block in the kernel until woken, or for at most SLEEP_CHUNK_S, then check again.
   soft0 wakes sleepers through a futex in its shared memory (rdmalab.verbs.soft.shm.Bell) when its
   NIC writes into memory or completes a receive that someone sleeps on; a woken sleeper is
   scheduled at once, ahead of CPU-bound processes. Without a bell (real pyverbs polling memory,
   where only the CPU can look) or without futexes (not Linux), it sleeps for a short, growing time.

How long to spin and yield is decided once per process from the CPUs it can really use (its
affinity and its cgroup's quota, rdmalab.proc.cpus), not os.cpu_count(): a learner on Binder or a
workshop server gets one CPU or part of one, where two peers that both spin take turns a whole
scheduler slice (about 4 ms) at a time. And it adapts to a busy machine: a spinner or yielder that
finds it was preempted (a gap in its own clock readings) stops spinning and yielding for a while and goes
straight to sleep, because on a machine with CPU-bound work a process that sleeps is woken ahead
of it, while one that spins waits for its turn. docs/emulated-nic.md explains the policy.
"""
import contextlib
import ctypes
import errno
import os
import platform
import select
import signal
import sys
import threading
import time

from rdmalab import settings
from rdmalab.proc.cpus import usable_cpus

# with two CPUs or more, and one per peer
SPIN_S = settings.number("RDMALAB_SPIN_US", 50, 0, 1e6, "a spin time in microseconds, 0 to 1000000") * 1e-6
# a collective's ranks (rdmalab.allreduce) wait for a neighbour doing the same work as they are: spin for up
# to a step's time, as MPI's and NCCL's progress engines do, where a sleep and a wake-up would cost more than
# the step (tens to hundreds of microseconds in a VM). Only while every rank has a CPU, as above.
COLLECTIVE_SPIN_S = 5e-3
PEERS_ENV = "RDMALAB_LOCAL_PEERS"   # processes on this host that wait for each other (a cluster's local ranks)
YIELDS = 100                 # with fewer than two: about 2 us each when the peer shares our CPU
SLEEP_CHUNK_S = 0.002        # a sleeper checks at least this often (a lost wake-up costs no more)
PREEMPTED_S = 200e-6         # a gap this long between two checks of a spin: another process ran
SLICE_S = 1e-3               # a yield that kept us off the CPU this long: a CPU-bound process took a slice
CALM_S = (0.5, 8.0)          # after a preempted spin, sleep at once for this long, doubling each time
FUTEX_SYSCALL = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())
FUTEX_WAIT, FUTEX_WAKE = 0, 1
# what futex_wait returns when it did its job: woken (0), the word had changed already, a signal, time up
FUTEX_SLEPT = (0, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT)
yield_cpu = getattr(os, "sched_yield", lambda: time.sleep(0))


class Policy:
    """How this process waits: spin seconds, then yields, then sleeps."""

    def __init__(self, cpus, peers=1, nic_processes=0):
        """nic_processes: processes that must run, besides the peers, before an answer comes (soft0's NIC
        processes on its udp link: ours and the peer host's)."""
        self.cpus, self.peers, self.nic_processes = cpus, peers, nic_processes
        spin = cpus >= max(2, peers + nic_processes)   # everyone who must run for an answer has a CPU of their own
        self.spin_s = SPIN_S if spin else 0.0
        if spin or nic_processes and cpus >= 2:   # (spinning or yielding would take a CPU a NIC process needs)
            self.yields = 0
        else:
            self.yields = YIELDS if cpus >= 1 else YIELDS // 10  # under a quota, each spin costs quota
        # how long off the CPU means another process had it: a spin is never off it; a yield always is,
        # for as long as the peer (or a short system task) runs, but a CPU-bound process takes a slice
        self.preempted_after = PREEMPTED_S if spin else SLICE_S
        self.sleep_only_until, self.calm, self.slow_answers = 0.0, CALM_S[0], 0

    def busy_waiting(self, now):
        """Spin and yield now? Not for a while after a spin was preempted."""
        return now >= self.sleep_only_until

    def preempted(self, now):
        self.sleep_only_until = now + self.calm
        self.calm = min(self.calm * 2, CALM_S[1])

    def answered_late(self, now):
        """A yield was answered, but only after a slice off the CPU. Once is a peer that was busy (setting
        up, say); twice in a row is a CPU-bound process taking every yield: sleep instead."""
        self.slow_answers += 1
        if self.slow_answers >= 2:
            self.preempted(now)

    def undisturbed(self):
        self.calm, self.slow_answers = CALM_S[0], 0

    def __repr__(self):
        return (f"Policy(cpus={self.cpus:g}, peers={self.peers}, NIC processes={self.nic_processes}, "
                f"spin {self.spin_s * 1e6:.0f} us, "
                f"then {self.yields} yields, then sleep)")


_policy = None
_nic_processes = 0
_this_thread = threading.local()   # .sleeps: waits in this thread skip spinning and yielding (sleeping())


@contextlib.contextmanager
def sleeping():
    """Waits in this thread sleep at once, never spin or yield, while the block runs: for a thread beside
    computation in the same process (an AllReduce overlapping backward), where a spin would take the CPU and
    Python's GIL that the computation needs. soft0's writes wake a sleeper through its bell at once."""
    before = getattr(_this_thread, "sleeps", False)
    _this_thread.sleeps = True
    try:
        yield
    finally:
        _this_thread.sleeps = before


def policy():
    global _policy
    if _policy is None:
        _policy = Policy(usable_cpus(), settings.local_peers(), _nic_processes)
    return _policy


def answers_come_through_nic_processes(count):
    """Said by soft0's udp link: every answer this process waits for needs `count` NIC processes to run
    (its host's and the peer's), so they count when deciding whether to spin (see Policy)."""
    global _policy, _nic_processes
    if count != _nic_processes:
        _policy, _nic_processes = None, count


def until(ready, timeout, what="the peer", bell=None, alive=None, busy=True, spin_s=None):
    """Return as soon as ready() is true. TimeoutError naming `what` after `timeout` seconds;
    `alive()` returning False (a dead peer) ends the wait early with the same error.
    `bell`: an object with arm() -> token, sleep(token, seconds), disarm(), whose sleep a peer can
    end early (soft0's Bell); without one, sleeps are short naps. busy=False skips spinning and
    yielding: the caller asked to sleep, as a blocking read of a completion channel does. spin_s:
    spin this long instead of SPIN_S, where the policy spins at all (COLLECTIVE_SPIN_S)."""
    if ready():
        return
    p = _policy or policy()
    clock = time.monotonic
    last = clock()
    if busy and not getattr(_this_thread, "sleeps", False) and p.busy_waiting(last):
        # yield first (one CPU or less: the peer can only answer once we let it run), then spin. Either way
        # a gap in our own clock means another process had the CPU for a while: when a yield hands the CPU
        # to a CPU-bound process it keeps it for a whole slice (about 2 ms), so go to sleep, where the
        # peer's write wakes us ahead of it
        yields, stop = p.yields, last + (p.spin_s if spin_s is None or not p.spin_s else spin_s)
        while yields or last < stop:
            if yields:
                yield_cpu()
                yields -= 1
            if ready():
                if p.yields and clock() - last > p.preempted_after:   # answered, but after another process's slice
                    return p.answered_late(clock())
                return p.undisturbed()
            now = clock()
            if now - last > p.preempted_after:
                p.preempted(now)
                break
            last = now
    deadline, nap = clock() + timeout, 20e-6
    while True:
        if bell is not None and futex_works():
            token = bell.arm()
            try:
                if ready():
                    return
                if bell.sleep(token, min(SLEEP_CHUNK_S, max(deadline - clock(), 0))) not in FUTEX_SLEPT:
                    futex_failed()   # (it returned at once: naps from now on, or this loop would spin)
            finally:
                bell.disarm()
        else:
            time.sleep(nap)
            nap = min(nap * 2, 0.001)
        if ready():
            return
        if clock() > deadline or (alive is not None and not alive()):
            raise TimeoutError(f"no answer from {what} within {timeout:.0f} s")


def poll(cq, num_entries=1, timeout=10.0, what="a completion", alive=None):
    """Wait for at least one completion on `cq` (any provider); returns the list of WCs polled."""
    n, got = cq.poll(num_entries)
    if n:
        return got

    def ready():
        n, wcs = cq.poll(num_entries)
        got.extend(wcs)
        return n > 0

    until(ready, timeout, what, bell=getattr(cq, "_bell", None), alive=alive)
    return got


def memory(ready, mr, timeout=10.0, what="the peer", alive=None, spin_s=None):
    """Wait until ready() sees what a peer wrote into `mr`'s memory. On soft0 a sleeper is woken by
    the write itself; on a real device only the CPU can look, so long waits nap."""
    until(ready, timeout, what, bell=getattr(mr, "_bell", None), alive=alive, spin_s=spin_s)


# ---------------------------------------------------------------- futexes, through ctypes

_libc = None
_warned = False


def futex_works():
    """True where futex wait/wake are available (Linux on x86-64 or arm64) and have not failed; else
    warns once."""
    global _libc, _warned
    if _libc is None:
        if sys.platform.startswith("linux") and FUTEX_SYSCALL is not None:
            _libc = ctypes.CDLL(None, use_errno=True)
        else:
            _libc = False
    if not _libc and not _warned:
        _warned = True
        print(f"rdmalab: no futex (or none that sleeps) on {sys.platform}/{platform.machine()}: waits sleep "
              f"in short naps instead (correct, a little slower to wake)", file=sys.stderr)
    return bool(_libc)


def futex_failed():
    """A futex wait refused to sleep (a sandbox without futexes on shared memory, a seccomp filter):
    use naps from now on. A wait whose sleep returns at once would spin, and on one CPU keep the peer
    it waits for off the CPU until the scheduler's next tick, message after message."""
    global _libc
    _libc = False
    futex_works()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_clib = None


def nap(seconds):
    """Sleep `seconds`, or less if a signal comes, as a blocking system call does: returns EINTR then,
    else 0. (time.sleep goes back to sleep after a signal's handler: a wait built on it would not let
    a signal end it, where the real call it stands for returns EINTR.)"""
    global _clib
    if _clib is None:
        _clib = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else False
    if not _clib:
        time.sleep(seconds)
        return 0
    ts = _Timespec(int(seconds), int((seconds % 1) * 1e9))
    return 0 if _clib.nanosleep(ctypes.byref(ts), None) == 0 else ctypes.get_errno()


_SIGNAL_PIPE = []   # [(read, write)]: this process's one pipe, made at its first wait (a forked child makes its own)
os.register_at_fork(after_in_child=_SIGNAL_PIPE.clear)
_MAIN_THREAD = threading.main_thread().ident


@contextlib.contextmanager
def signal_pipe():
    """A descriptor that becomes readable when a signal arrives, for as long as the block runs: with it in its
    select(), a wait made of several calls ends on a signal that came between them too, where a nap() sees
    only one that comes while it sleeps (signal.set_wakeup_fd). None where Python allows none: in a thread
    other than the main one (which runs the handlers), or in a program that set its own. The pipe is made once
    per process and emptied after each wait, so a wait is ready for a signal a microsecond after it starts (a
    blocking verbs call loses one that comes before it is entered: the shorter that time, the fewer lost)."""
    if threading.get_ident() != _MAIN_THREAD:
        yield None
        return
    if not _SIGNAL_PIPE:
        _SIGNAL_PIPE.append(os.pipe())
        for fd in _SIGNAL_PIPE[0]:
            os.set_blocking(fd, False)
    read, write = _SIGNAL_PIPE[0]
    previous = None
    try:
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if previous != -1:   # the program's own (asyncio's, say): give it back, and do without
            signal.set_wakeup_fd(previous)
        yield read if previous == -1 else None
    finally:
        if previous == -1:
            signal.set_wakeup_fd(-1)
        try:
            while os.read(read, 512):   # (what this wait's signals wrote: the next wait starts empty)
                pass
        except BlockingIOError:
            pass


def signalled(pipe):
    """Whether a signal came since signal_pipe() gave `pipe` (None: no pipe, so nothing to tell), without waiting."""
    return pipe is not None and bool(select.select([pipe], [], [], 0)[0])


def futex_wait(address, expected, seconds):
    """Sleep while the 32-bit word at `address` holds `expected`, for at most `seconds`. Returns 0, or
    the errno that ended the sleep (EINTR: a signal came; EAGAIN: the word had changed already)."""
    ts = _Timespec(int(seconds), int((seconds % 1) * 1e9))
    if _libc.syscall(FUTEX_SYSCALL, ctypes.c_void_p(address), FUTEX_WAIT, ctypes.c_int(expected),
                     ctypes.byref(ts), None, 0) == 0:
        return 0
    return ctypes.get_errno()


def futex_wake(address):
    """Wake every process sleeping on the 32-bit word at `address`."""
    _libc.syscall(FUTEX_SYSCALL, ctypes.c_void_p(address), FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)
