"""pyverbs' modules, from the provider this machine can run.

    from rdmalab.verbs import device, pd, mr, cq, qp, wr, addr, enums as e

`RDMALAB_PROVIDER` chooses: `soft` (the emulated NIC), `pyverbs` (the real bindings over a real
device: an HCA or Soft-RoCE), or `auto` (the default): pyverbs when it imports and a device with an
active port exists, else soft. `PROVIDER` says which was taken and `REASON` why.
"""
import importlib
import os

MODULES = ("device", "pd", "mr", "cq", "qp", "wr", "addr", "pyverbs_error")
ENUM_MODULES = ("enums", "libibverbs_enums")  # pyverbs <= 58 has the first, >= 59 the second
CHOICES = ("auto", "soft", "pyverbs")


class ProviderError(RuntimeError):
    """The provider asked for cannot run here; the message says what to do."""


def _real_pyverbs_status():
    """(usable, reason): can the installed pyverbs reach an active port?"""
    try:
        import pyverbs.device as device
    except ImportError:
        return False, ("pyverbs is not installed (on Debian/Ubuntu: apt-get install python3-pyverbs, "
                       "then create the venv with --system-site-packages)")
    try:
        names = [d.name.decode() for d in device.get_device_list()]
    except Exception:  # pyverbs raises 'Failed to get devices list' when there is no RDMA device at all
        names = []
    if not names:
        return False, ("pyverbs is installed but there is no RDMA device (for Soft-RoCE: modprobe rdma_rxe; "
                       "rdma link add rxe0 type rxe netdev <interface>)")
    for name in names:
        try:
            with device.Context(name=name) as ctx:
                if ctx.query_port(1).state == 4:
                    return True, f"pyverbs found {name} with an active port"
        except Exception:
            continue
    return False, f"pyverbs found {', '.join(names)} but no active port"


def select(choice=None):
    """Returns (provider, reason) for RDMALAB_PROVIDER (or `choice`)."""
    choice = (choice or os.environ.get("RDMALAB_PROVIDER") or "auto").strip().lower()
    if choice not in CHOICES:
        raise ProviderError(f"RDMALAB_PROVIDER={choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "soft":
        return "soft", "RDMALAB_PROVIDER=soft asks for the emulated NIC"
    usable, why = _real_pyverbs_status()
    if choice == "pyverbs":
        if not usable:
            raise ProviderError(f"RDMALAB_PROVIDER=pyverbs, but {why}. Unset it to use the emulated NIC.")
        return "pyverbs", f"RDMALAB_PROVIDER=pyverbs and {why}"
    if usable:
        return "pyverbs", why
    return "soft", f"{why}: using the emulated NIC soft0"


PROVIDER, REASON = select()
_package = "rdmalab.verbs.soft" if PROVIDER == "soft" else "pyverbs"
for _name in MODULES:
    globals()[_name] = importlib.import_module(f"{_package}.{_name}")
# The enums: `enums` (flat names, pyverbs <= 58) and `libibverbs_enums` (IntEnum classes plus flat
# names, pyverbs >= 59). Whichever exists stands in for the other, so `enums.IBV_...` always works.
_found = {}
for _name in ENUM_MODULES:
    try:
        _found[_name] = importlib.import_module(f"{_package}.{_name}")
    except ImportError:
        pass
enums = _found.get("enums") or _found["libibverbs_enums"]
libibverbs_enums = _found.get("libibverbs_enums", enums)

def as_array(mr, dtype="uint8"):
    """A numpy array over an MR's buffer: writes to it are what the NIC reads, and vice versa."""
    import numpy as np
    if PROVIDER == "soft":
        return mr.data.view(dtype)
    import ctypes
    raw = (ctypes.c_char * mr.length).from_address(mr.buf)
    return np.frombuffer(raw, dtype=dtype)


IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"


def routable_gid_index(ctx, port=1):
    """The GID index to use on RoCE: the IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d).

    A link-local or RoCE v1 GID gives RETRY_EXC_ERR (status 12) on Soft-RoCE; InfiniBand ports
    have no IPv4-mapped GID and use index 0.
    """
    table_len = ctx.query_port(port).gid_tbl_len
    for index in range(min(table_len, 16)):
        try:
            if str(ctx.query_gid(port, index)).startswith(IPV4_MAPPED_PREFIX):
                return index
        except Exception:
            continue
    return 0
