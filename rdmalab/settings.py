"""The lab's RDMALAB_* settings, read from the environment and checked in one place: a value that is not
one the setting takes stops the program with a message naming the variable, what it takes and how to get
the default back, never a traceback from deep inside the lab. Each is read when it is needed, never at
import (a program that does not use a setting runs whatever it says). soft0 reads its link and host once,
as it loads (hardware.LINK and HOST: set them before a program starts); a cluster reads them again for the
ranks it starts, which inherit them.

    time_scale()    RDMALAB_TIME_SCALE   how much slower this machine is (5 under CPU emulation): every
                                         "the peer is silent, so it is dead" wait stretches by it
    local_peers()   RDMALAB_LOCAL_PEERS  processes on this host that wait for each other (set by a cluster)
    soft_link()     RDMALAB_SOFT_LINK    soft0's link: shm (shared memory) or udp (RoCEv2 packets)
    soft_host()     RDMALAB_SOFT_HOST    this process's host address on soft0's udp link
    pyverbs_version() RDMALAB_PYVERBS    the pyverbs soft0 answers a program run by `python -m
                                         rdmalab.verbs.run` as: 44 (any up to 58) or 59 (or later); unset,
                                         the program's first import of an enum module decides
    device()        RDMALAB_DEVICE       the RDMA device to use (unset: the first with an active port); on
                                         soft0 a Soft-RoCE name (rxe0, ...) is one soft0 answers to as well
    provider()      RDMALAB_PROVIDER     auto, soft or pyverbs, as set: rdmalab.verbs.provider checks it, as it
                                         checks a command's --provider (a ProviderError names the choices)
    shm_dir()       RDMALAB_SHM_DIR      where soft0 keeps registered memory (unset: soft.shm.directory() chooses)
    soft_capture()  RDMALAB_SOFT_CAPTURE the pcap file soft0's udp NICs write (a file per host; set by `rdmalab
                                         capture`), and soft_seed() RDMALAB_SOFT_SEED, their faults' seed
    in_container()  RDMALAB_CONTAINER    set by container/Dockerfile: the lab runs in its image (soft0 only)
The others (RDMALAB_SPIN_US, RDMALAB_ENGINE_TIMEOUT, RDMALAB_SOFT_LOSS, ...) are read with number() where they
are used; the lessons' two (RDMALAB_LEARNER_DIR, RDMALAB_CLASS_DIR) in rdmalab.lessons.evidence and classroom.
"""
import ipaddress
import math
import os
import re


def number(name, default, low=0.0, high=math.inf, what="a number", environ=os.environ):
    """The setting `name` as a float, `default` when it is unset or empty."""
    text = environ.get(name, "")
    if not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:   # (NaN is never in range)
        raise SystemExit(f"rdmalab: {name}={text!r} is not {what}: set it to one, or unset it for the "
                         f"default ({default:g})")
    return value


def time_scale():
    return number("RDMALAB_TIME_SCALE", 1, 0.01, 1000, "a factor between 0.01 and 1000")


def local_peers():
    return int(number("RDMALAB_LOCAL_PEERS", 1, 1, 1 << 16, "a whole number of processes, at least 1"))


LINKS = ("shm", "udp")


def soft_link():
    chosen = os.environ.get("RDMALAB_SOFT_LINK", "").strip() or "shm"
    if chosen not in LINKS:
        raise SystemExit(f"rdmalab: RDMALAB_SOFT_LINK={chosen!r} is not one of soft0's links: 'shm' (shared memory, "
                         f"the default) or 'udp' (RoCEv2 packets between NIC processes); set one, or unset it")
    return chosen


def pyverbs_version():
    """RDMALAB_PYVERBS: the pyverbs version (an rdma-core release, 22 or later: pyverbs came with 22) soft0
    answers a program as, or None. 58 and before have pyverbs.enums and give plain ints, 59 and later have
    pyverbs.libibverbs_enums and give enum members (rdmalab/verbs/soft/pyverbs_generation.py)."""
    text = os.environ.get("RDMALAB_PYVERBS", "").strip()
    if not text:
        return None
    parts = text.lstrip("vV").split(".")
    if not all(part.isdigit() for part in parts) or not 22 <= int(parts[0]) <= 999:
        raise SystemExit(f"rdmalab: RDMALAB_PYVERBS={text!r} is not a pyverbs version: set one (44 for pyverbs "
                         f"<= 58, as Debian 12's; 59 for >= 59, as PyPI's), or unset it to let the program's "
                         f"first import of pyverbs.enums or pyverbs.libibverbs_enums decide")
    return int(parts[0])


def soft_host():
    text = os.environ.get("RDMALAB_SOFT_HOST", "").strip() or "127.0.0.1"
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise SystemExit(f"rdmalab: RDMALAB_SOFT_HOST={text!r} is not an IPv4 address: give this host's address "
                         f"(e.g. 127.0.0.2), or unset it for the default (127.0.0.1)") from None


def device():
    """RDMALAB_DEVICE: the name of the RDMA device to use, or None. A device's name is at most 63 characters of
    letters, digits, '_', '-' and '.' (IB_DEVICE_NAME_MAX); another text names none and stops the program."""
    text = os.environ.get("RDMALAB_DEVICE", "").strip()
    if text and not re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", text):
        raise SystemExit(f"rdmalab: RDMALAB_DEVICE={text!r} is not an RDMA device's name (e.g. mlx5_0, rxe0, soft0): "
                         f"set one, or unset it to use the first device with an active port")
    return text or None


def provider():
    return os.environ.get("RDMALAB_PROVIDER", "")


def shm_dir():
    chosen = os.environ.get("RDMALAB_SHM_DIR")
    if chosen and not (os.path.isdir(chosen) and os.access(chosen, os.W_OK | os.X_OK)):
        raise SystemExit(f"rdmalab: RDMALAB_SHM_DIR={chosen!r} is not a directory this user can write, "
                         f"where the emulated NIC would keep registered memory: create it (the same for "
                         f"every process of the lab), or unset it for /dev/shm")
    return chosen or None


def soft_capture(environ=os.environ):
    """A NIC process reads the settings of the program that started it (`environ`)."""
    return environ.get("RDMALAB_SOFT_CAPTURE") or None


def soft_seed(environ=os.environ):
    return environ.get("RDMALAB_SOFT_SEED", "0")


def in_container(environ=os.environ):
    return bool(environ.get("RDMALAB_CONTAINER", "").strip())
