"""What only soft0, the emulated NIC, can tell: the one door to it for the rest of the lab.

A real NIC keeps its queues, counters and memory to itself (pyverbs shows what query() returns); soft0's
are Python objects and shared-memory files a process can read. No module of the lab imports
rdmalab.verbs.soft but this one and the provider switch (provider.py; run.py and rdmacore.py, which run a
program's `import pyverbs` on soft0), so importing any of it loads no emulator (tests/test_layout.py).

On the provider this process runs on (rdmalab.verbs.PROVIDER), None on a real device:
    link()                soft0's link: 'shm' (shared memory) or 'udp' (RoCEv2 packets)
    memory()              where soft0 keeps registered memory, and how much is free there
    counters()            its port counters (rxe's names; the udp link's NIC process counts its own)
    copied_bytes()        payload bytes this process's CPU copied for soft0's shared-memory link (its
                          stand-in for DMA: counted, where rxe and hardware count nothing); None on the udp
                          link (its NIC processes copy) and on a real device
    look(qp), walk(qp, wr)  what its NIC holds for a QP, and what it would do with a WR (glassbox.look, glassbox.walk)
    verdicts(qp, opcode, sges, ...)  every check its NIC makes of such a WR, run now without posting it
                          (glassbox.verdicts: checks.every), each (check, Verdict or None)
    rules()               the names its verdicts carry (checks.Check): `verdict.check is rules().PSN`
    memory_regions()      this process's MRs as its NIC holds them: (lkey, rkey, address, length)
Whatever the provider, choosing none (soft0's segments outlive their processes; its link is a setting):
    rank_hosts(ranks)     each local rank's host on soft0's udp link (a NIC each, as nodes have); None on shm
    nic_counters(host)    the port counters of the udp link's NIC process on `host`, None if none runs
    reap_orphans()        remove the shared segments of processes that are gone; their names
    reap_when_gone(pids)  the same, once these just-killed processes have exited
"""
import os

from rdmalab import settings
from rdmalab.verbs.provider import chosen


def _on_soft0():
    return chosen()["PROVIDER"] == "soft"


def link():
    return settings.soft_link() if _on_soft0() else None


def memory():
    if not _on_soft0():
        return None
    from rdmalab.verbs.soft import shm
    fs = os.statvfs(shm.directory())
    return {"directory": shm.directory(), "free_bytes": fs.f_bavail * fs.f_frsize, "small_dev_shm": shm.small_dev_shm()}


def counters():
    if not _on_soft0():
        return None
    from rdmalab.verbs.soft import counters, hardware
    if hardware.LINK == "udp":   # the NIC process counts every packet
        return nic_counters() or {}
    return counters.read()


def copied_bytes():
    if link() != "shm":
        return None
    from rdmalab.verbs.soft import counters
    return counters.copied_bytes


def look(qp):
    if not _on_soft0():
        return None
    from rdmalab.verbs.soft.glassbox import look
    return look(qp)


def walk(qp, wr):
    if not _on_soft0():
        return None
    from rdmalab.verbs.soft.glassbox import walk
    return walk(qp, wr)


def rules():
    """The rules soft0's verdicts name (checks.Check), to compare a verdict's rule with, never its text."""
    from rdmalab.verbs.soft.checks import Check
    return Check


def verdicts(qp, opcode, sges, rkey=0, remote_addr=0, imm=0, flags=0):
    if not _on_soft0():
        return None
    from rdmalab.verbs.soft.glassbox import verdicts
    return verdicts(qp, opcode, sges, rkey, remote_addr, imm, flags)


def memory_regions():
    if not _on_soft0():
        return None
    from rdmalab.verbs.soft.mr import REGISTERED
    return [(m.lkey, m.rkey, m.buf, m.length) for m in list(REGISTERED.values())]


def rank_hosts(ranks):
    if settings.soft_link() != "udp":
        return None
    from rdmalab.verbs.soft.link import hosts_from
    return hosts_from(settings.soft_host(), ranks)


def nic_counters(host=None):
    from rdmalab.verbs.soft.link.doorbell import nic_counters
    return nic_counters(host)


def reap_orphans():
    from rdmalab.verbs.soft import shm
    return shm.reap_orphans()


def reap_when_gone(pids, timeout=10):
    from rdmalab.verbs.soft import shm
    return shm.reap_when_gone(pids, timeout)
