"""pyverbs' modules, from the provider this machine can run.

    from rdmalab.verbs import device, pd, mr, cq, qp, wr, addr, enums as e

`RDMALAB_PROVIDER` chooses: `soft` (the emulated NIC), `pyverbs` (the real bindings over a real
device: an HCA or Soft-RoCE), or `auto` (the default): pyverbs when it imports and a device with an
active port exists, else soft. `PROVIDER` says which was taken and `REASON` why.

Importing this package probes nothing: the provider is chosen the first time one of its modules (or
PROVIDER, REASON) is used. The rule of the package: rdmalab.verbs imports rdmalab.errors, rdmalab.proc
and rdmalab.settings only; everything else of the lab reaches a NIC through it, and soft0's own state
through emulated.py (nothing else outside soft/ imports it but the provider switch). route.py picks the
port, GID and MTU that work; rc.py connects RC queue pairs; run.py runs an unmodified pyverbs program on soft0.
"""
from rdmalab.errors import ProviderError
from rdmalab.proc import children as _children
from rdmalab.verbs.provider import CHOICES, ENUM_MODULES, MODULES, PROVIDED, chosen, select  # noqa: F401


def _reap_orphans():
    """What a killed helper left of soft0 (its shared segments), removed: registered with rdmalab.proc.children,
    which imports nothing of verbs. (Loads soft0's segment code only then, whatever the provider.)"""
    from rdmalab.verbs import emulated
    emulated.reap_orphans()


_children.reap_with(_reap_orphans)


def __getattr__(name):
    if name in PROVIDED:
        try:
            return chosen()[name]
        except KeyError:   # (only rdma_cm's modules may be missing)
            raise ProviderError(f"this pyverbs has no {name} module: it was built without librdmacm "
                                f"(Debian and Ubuntu's python3-pyverbs have it)") from None
    raise AttributeError(f"module 'rdmalab.verbs' has no attribute {name!r}")


def as_array(mr, dtype="uint8"):
    """A numpy array over an MR's buffer: writes to it are what the NIC reads, and vice versa."""
    import numpy as np
    if chosen()["PROVIDER"] == "soft":
        mr.check_open()   # (a closed MR's buffer is gone: PyverbsUserError, not an AttributeError)
        return mr._data.view(dtype)
    import ctypes
    raw = (ctypes.c_char * mr.length).from_address(mr.buf)
    return np.frombuffer(raw, dtype=dtype)




from rdmalab.verbs.route import (GID_TYPE_NAMES, IPV4_MAPPED_PREFIX, Route, choose_route,  # noqa: E402,F401
                                 ipv4_of, routable_gid_index, route_of)
