"""soft0's port counters, named as Linux's rxe names its hw_counters (/sys/class/infiniband/rxe0/ports/1/
hw_counters), for what a learner looks at when a connection breaks: resends, sequence errors, RNR NAKs.

On the shared-memory link the NIC is the program's own process (the requester and, for a peer in this
process or another, the responder run in it), so the counters are kept per process, and only these
error counters: counting every packet would put a store on the data path. On the udp link the NIC
process counts every packet (link/nic.py's COUNTERS: link.doorbell.nic_counters() reads them).
"""

from rdmalab.errors import RXE_ERROR_COUNTERS as NAMES   # rxe's names, each explained there

_counts = dict.fromkeys(NAMES, 0)

# soft0's own count, which no rxe counter keeps: payload bytes this process's CPU copied from one memory
# into another for the NIC (a WRITE's into the target's memory, a READ's back into ours, a message into a
# receive, several SGEs gathered into one message). On the shared-memory link the NIC's work runs in the
# program's process, whose CPU stands in for a NIC's DMA engine: so the lab counts copies per byte on soft0
# rather than stating them (rxe's kernels and a NIC's DMA engines count none). One add per copy, not per
# packet (`counters.copied_bytes += n` where the copy is; a UD receive's 40-byte GRH counts too, as bytes the
# NIC writes). Read it with rdmalab.verbs.emulated.copied_bytes(). (Threads of one process posting at once may
# lose an add now and then: it is a measurement's count, not a lock's.)
copied_bytes = 0


def count(name, n=1):
    _counts[name] += n


def read():
    """The counters now, as a dict."""
    return dict(_counts)
