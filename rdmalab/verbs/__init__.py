"""pyverbs' modules, from the provider this machine can run.

    from rdmalab.verbs import device, pd, mr, cq, qp, wr, addr, enums as e

`RDMALAB_PROVIDER` chooses: `soft` (the emulated NIC), `pyverbs` (the real bindings over a real
device: an HCA or Soft-RoCE), or `auto` (the default): pyverbs when it imports and a device with an
active port exists, else soft. `PROVIDER` says which was taken and `REASON` why.
"""
import importlib
import os

from rdmalab.errors import ProviderError

MODULES = ("device", "pd", "mr", "cq", "qp", "wr", "addr", "pyverbs_error")
ENUM_MODULES = ("enums", "libibverbs_enums")  # pyverbs <= 58 has the first, >= 59 the second
CHOICES = ("auto", "soft", "pyverbs")


def _real_pyverbs_status():
    """(usable, reason): can the installed pyverbs reach an active port?"""
    try:
        import pyverbs.device as device
    except ImportError:
        return False, ("pyverbs is not installed (on Debian/Ubuntu: apt-get install python3-pyverbs; "
                       "`make lab` links it into the lab's .venv)")
    try:
        names = [d.name.decode() for d in device.get_device_list()]  # noqa: F821 (`device` is set above, per provider)
    except Exception:  # pyverbs raises 'Failed to get devices list' when there is no RDMA device at all
        names = []
    if not names:
        return False, ("pyverbs is installed but there is no RDMA device (for Soft-RoCE: modprobe rdma_rxe; "
                       "rdma link add rxe0 type rxe netdev <interface>)")
    for name in names:
        try:
            with device.Context(name=name) as ctx:  # noqa: F821
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
GID_TYPE_NAMES = {0: "IB/RoCE v1", 1: "RoCE v2"}   # what ibv_query_gid_type reports (sysfs' names)


def routable_gid_index(ctx, port=1):
    """The GID index to use on RoCE: the IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d).

    A link-local or RoCE v1 GID gives RETRY_EXC_ERR (status 12) on Soft-RoCE; InfiniBand ports
    have no IPv4-mapped GID and use index 0.
    """
    mapped = []
    for index in range(min(ctx.query_port(port).gid_tbl_len, 64)):
        try:
            if str(ctx.query_gid(port, index)).startswith(IPV4_MAPPED_PREFIX):
                mapped.append(index)
        except Exception:   # an empty entry: ENODATA on rxe
            continue
    for index in mapped:    # rxe lists each address twice, RoCE v1 then v2: take v2
        try:
            if ctx.query_gid_type(port, index) == 1:
                return index
        except Exception:
            pass
    return mapped[0] if mapped else 0


class Route:
    """Where to send from: device, active port, GID index and path MTU, chosen to avoid the traps.

    Only an ACTIVE port; the IPv4-mapped RoCE v2 GID (others give status 12 on RoCE); a path MTU
    no larger than the port's active MTU (a larger one is rejected by modify(RTR) or drops packets).
    """

    def __init__(self, device, port, gid_index, gid, path_mtu, link_layer):
        self.device, self.port, self.gid_index, self.gid = device, port, gid_index, gid
        self.path_mtu, self.link_layer = path_mtu, link_layer

    def __repr__(self):
        mtu = 128 << self.path_mtu
        return (f"Route(device={self.device!r}, port={self.port}, gid_index={self.gid_index}, "
                f"gid={self.gid!r}, path_mtu={mtu})")


def route_of(ctx, device_name, port=None):
    """The Route through an open Context: its first active port unless `port` is given."""
    ports = [port] if port else range(1, ctx.query_device().phys_port_cnt + 1)
    for p in ports:
        attr = ctx.query_port(p)
        if attr.state != enums.IBV_PORT_ACTIVE:
            continue
        index = routable_gid_index(ctx, p)
        return Route(device_name, p, index, str(ctx.query_gid(p, index)),
                     min(attr.active_mtu, enums.IBV_MTU_4096), attr.link_layer)
    raise ProviderError(f"{device_name} has no active port{'' if port is None else f' {port}'}: "
                        "check the cable or link (ibv_devinfo shows PORT_ACTIVE when it is up)")


def choose_route(device_name=None):
    """The Route to use on this machine: the named device (RDMALAB_DEVICE) or the first with an active port."""
    wanted = device_name or os.environ.get("RDMALAB_DEVICE")
    names = [d.name.decode() for d in device.get_device_list()]  # noqa: F821 (`device` is set above, per provider)
    if wanted and wanted not in names:
        raise ProviderError(f"no RDMA device {wanted!r}; this machine has {', '.join(names) or 'none'}")
    problems = []
    for name in [wanted] if wanted else names:
        with device.Context(name=name) as ctx:  # noqa: F821
            try:
                return route_of(ctx, name)
            except ProviderError as error:
                problems.append(str(error))
    raise ProviderError("; ".join(problems) or "no RDMA device")
