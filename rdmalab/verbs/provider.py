"""Which provider this machine can run, chosen once, on first use (rdmalab.verbs' lazy attributes)."""
import importlib

from rdmalab import settings
from rdmalab.errors import ProviderError

MODULES = ("device", "pd", "mr", "cq", "qp", "wr", "addr", "srq", "pyverbs_error")
# pyverbs <= 58 has the first of each pair, >= 59 the second: each stands in for the other
ENUM_PAIRS = (("enums", "libibverbs_enums"), ("cm_enums", "librdmacm_enums"))
ENUM_MODULES = tuple(name for pair in ENUM_PAIRS for name in pair)
CHOICES = ("auto", "soft", "pyverbs")


def real_pyverbs_status():
    """(usable, reason): can the installed pyverbs reach an active port?"""
    try:
        import pyverbs.device as device
    except ImportError:
        return False, ("pyverbs is not installed (on Debian/Ubuntu: apt-get install python3-pyverbs; "
                       "`make lab` links it into the lab's .venv)")
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
    choice = (choice or settings.provider() or "auto").strip().lower()
    if choice not in CHOICES:
        raise ProviderError(f"RDMALAB_PROVIDER={choice!r} is not one of {', '.join(CHOICES)}")
    if choice == "soft":
        return "soft", "RDMALAB_PROVIDER=soft asks for the emulated NIC"
    usable, why = real_pyverbs_status()
    if choice == "pyverbs":
        if not usable:
            raise ProviderError(f"RDMALAB_PROVIDER=pyverbs, but {why}. Unset it to use the emulated NIC.")
        return "pyverbs", f"RDMALAB_PROVIDER=pyverbs and {why}"
    if usable:
        return "pyverbs", why
    return "soft", f"{why}: using the emulated NIC soft0"


PROVIDED = MODULES + ("cmid",) + ENUM_MODULES + ("PROVIDER", "REASON")
_chosen = {}


def chosen():
    """Select the provider (once) and import its modules."""
    if not _chosen:
        provider, reason = select()
        package = "rdmalab.verbs.soft" if provider == "soft" else "pyverbs"
        found = {name: importlib.import_module(f"{package}.{name}") for name in MODULES}
        for name in ("cmid",) + ENUM_MODULES:   # (rdma_cm's: a pyverbs built without librdmacm has none)
            try:
                found[name] = importlib.import_module(f"{package}.{name}")
            except ImportError:
                pass
        for old, new in ENUM_PAIRS:
            if old in found or new in found:
                found[old] = found[new] = found.get(old) or found[new]
        _chosen.update(found, PROVIDER=provider, REASON=reason)
    return _chosen
