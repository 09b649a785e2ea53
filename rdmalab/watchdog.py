"""Stops a cluster's processes if the process that started them dies without closing the cluster.

    python -m rdmalab.watchdog PID:STARTED ...      # started by rdmalab.cluster.Cluster

ipyparallel starts the controller and the engines in sessions of their own, so they outlive a
notebook kernel that is killed (out of memory, a crash, kill -9), holding their registered memory
for ever. The watchdog blocks reading its stdin, a pipe whose other end only the cluster's owner
holds. A line on it (rdmalab.children.stop's close) means the cluster was closed properly: exit.
End of file means the owner died: SIGKILL every listed process that is still the one listed (same
start time, so a reused pid is left alone), then remove the shared memory they left behind.
"""
import os
import signal
import sys

from .procstat import stat_fields


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


def kill(processes):
    """SIGKILL each {pid: start time} that is still that process; returns the pids killed."""
    killed = []
    for pid, start in processes.items():
        if started(pid) == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def main(listed):
    if sys.stdin.readline():
        return 0
    from .verbs.soft import shm
    shm.reap_when_gone(kill(dict(map(int, item.split(":")) for item in listed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
