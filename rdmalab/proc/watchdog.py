"""Stops a cluster's processes if the process that started them dies without closing the cluster.

    python -m rdmalab.proc.watchdog CLUSTER_ID [MODULE:FUNCTION]   # started by rdmalab.allreduce.cluster.Cluster,
                                                    # before the cluster; FUNCTION(pids) reaps what they left
    python -m rdmalab.proc.watchdog --kill CLUSTER_ID   # now, on this host: what a cluster's close runs over ssh

ipyparallel starts the controller and the engines in sessions of their own, so they outlive a
notebook kernel that is killed (out of memory, a crash, kill -9), holding their registered memory
for ever. It also starts each of them with IPP_CLUSTER_ID=<the cluster's id> in its environment,
which their own children (an engine's nanny, the controller's schedulers, mpiexec's ranks) inherit:
that is how the watchdog knows them, whoever their parent is now, even those that were still
starting when the owner died. The watchdog blocks reading its stdin, a pipe whose other end only the
cluster's owner holds. A line on it (rdmalab.proc.children.stop's close) means the cluster was closed
properly: exit. End of file means the owner died (whatever the signal): SIGKILL every process of the
cluster, again until none is left, then call the reaper it was given (the cluster gives soft0's,
rdmalab.verbs.emulated:reap_when_gone, which removes the shared memory they left behind: named, so that
proc imports nothing of verbs). Engines on other
hosts it cannot see: they shut down by themselves once the controller it killed stops answering
(cluster.HEARTBEAT_MISSES), and a cluster closed properly stops them over ssh (kill_on).
"""
import importlib
import os
import signal
import sys
import time

from rdmalab.proc.procstat import stat_fields


def started(pid):
    """When process `pid` started (clock ticks since boot), or None if there is no such process."""
    try:
        return int(stat_fields(pid)[19])
    except OSError:
        return None


def descendants(pid):
    """Every living process below `pid`: children, their children, ..."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent_of[int(entry)] = int(stat_fields(entry)[1])
            except OSError:
                pass   # ended meanwhile
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parent_of.items() if pp == parent]
        found += children
        frontier += children
    return found


def members(cluster_id):
    """Pids of the living processes started with IPP_CLUSTER_ID=cluster_id (none for an empty id:
    that is any cluster's default)."""
    if not cluster_id:
        return []
    mark = f"IPP_CLUSTER_ID={cluster_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:   # empty for a zombie: it is dead already
                    if mark in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass   # ended meanwhile, or not ours to read
    return found


def kill(cluster_id, settle=0.0, timeout=10.0):
    """SIGKILL every process of the cluster, and again those found next time (one may have been
    starting another), until none is found for `settle` seconds; returns the pids killed."""
    killed, quiet_since, deadline = set(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = members(cluster_id)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if found:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle:
            break
        time.sleep(0.05)
    return sorted(killed)


def kill_on(host, cluster_id, timeout=20):
    """kill() on another host, over ssh (`python -m rdmalab.proc.watchdog --kill ID` there, with the same
    Python and checkout paths, as children.spawn starts helpers); the pids killed there, or None if the host
    could not be reached within `timeout` s or could not run it."""
    import subprocess
    from rdmalab.proc.children import SSH_ARGS, remote_command
    command = remote_command("rdmalab.proc.watchdog", "--kill", cluster_id)
    try:
        done = subprocess.run(["ssh", *SSH_ARGS, host, *command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else None


def main(args):
    if args[:1] == ["--kill"]:   # (kill_on's other end: what this host still runs of the cluster, stopped now)
        print(*kill(args[1], settle=0.5))
        return 0
    cluster_id, reaper = (args + [None])[:2]
    if sys.stdin.readline():
        return 0
    # half a second of quiet: a process the owner was starting when it died may take that to appear
    killed = kill(cluster_id, settle=0.5)
    if reaper:
        module, function = reaper.split(":")
        getattr(importlib.import_module(module), function)(killed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
