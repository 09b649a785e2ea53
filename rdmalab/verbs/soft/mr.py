"""Memory regions: a buffer the NIC may touch, named by its keys.

MR(pd, length, access) allocates a page-aligned buffer in a shared-memory segment `rdmalab-mr-<lkey>`
and registers it; MR(pd, length, access, address=...) registers the program's own pages from `address`
(a page boundary), mapping the segment over them (shm.Segment.create_over). What real rxe does, this does:
- lkey == rkey when any remote access is granted; rkey is 0 otherwise;
- REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is refused (EINVAL), as are length 0 and the
  access flags Linux 6.1's rxe does not know (FLUSH_GLOBAL, FLUSH_PERSISTENT);
- the header holds what a NIC's memory translation table holds for the key: valid, access, length,
  the owner's address of the buffer and the PD. A peer NIC checks them on every access.

MW(pd, type) is a memory window: a remote key for a part of an MR with MW_BIND access, which a work
request binds (type 1 through qp.bind_mw(), type 2 through a BIND_MW send WR) and a type 2 window's
LOCAL_INV or a peer's SEND_WITH_INV invalidates. Each binding is a segment of its own under the key's
name, `rdmalab-mr-<rkey>`, holding the window in the MR's words (and layout.M_MR, M_MW_TYPE, M_QP): a
peer's NIC finds it as it finds an MR, and sees it die (M_VALID 0) when it is invalidated or rebound.
"""
import errno
import random
from operator import index

from . import shm
from .base import Fixed, Resource, absent, not_supported, readonly, typed
from .layout import M_ACCESS, M_ADDR, M_LENGTH, M_MR, M_MW_TYPE, M_PD, M_QP, M_VALID
from .constants import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_MW_BIND, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
                               IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_ZERO_BASED, IBV_MW_TYPE_1, IBV_MW_TYPE_2)
from .pd import PD
from .libibverbs_enums import ibv_mw_type
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .pyverbs_generation import returns
from .utils import field_lines

REMOTE_ACCESS = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
# access bits 8-19 (FLUSH_GLOBAL, FLUSH_PERSISTENT, ...) came after Linux 6.1, whose kernel refuses them
UNKNOWN_TO_LINUX_6_1 = 0xFFF00
EINVAL, ENOMEM = errno.EINVAL, errno.ENOMEM

REGISTERED = {}  # lkey -> MR, for this process: the local half of the key table
SEGMENTS = {}    # lkey -> its shared segment, for this process's NIC (and a bound window's rkey -> its Window)
WINDOW_KEY = 1 << 31   # set in a memory window's keys, never in an MR's (rxe tells them apart by index range)


ATTACHED = {}     # key -> segment of another process's MR (or Window), as this process's NIC found it


def segment_name(key):
    return f"mr-{key:08x}"


def find(key):
    """The segment behind a key, wherever its MR lives (a window's binding as a Window, over its MR's bytes),
    as a NIC finds it in its translation table; None if no valid MR or window has that key."""
    seg = SEGMENTS.get(key)
    if seg is not None:
        return seg
    seg = ATTACHED.get(key)
    if seg is not None:
        if seg.header[M_VALID]:
            return seg
        del ATTACHED[key]
        seg.close()
    seg = shm.Segment.attach(segment_name(key)) if key else None
    if seg is None or not seg.header[M_VALID]:
        return None
    if seg.header[M_MR]:   # a memory window's binding: its words, over the bytes of the MR it is bound in
        mr = find(seg.header[M_MR])
        if mr is None:
            return None
        seg = Window(seg, mr)
    ATTACHED[key] = seg
    return seg


# MR(cmid, length, access): pyverbs registers through rdma_reg_msgs, rdma_reg_write or rdma_reg_read by the access
# asked for, each adding local write; any other access registers nothing
CMID_ACCESS = {IBV_ACCESS_LOCAL_WRITE: IBV_ACCESS_LOCAL_WRITE,
               IBV_ACCESS_REMOTE_WRITE: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
               IBV_ACCESS_REMOTE_READ: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ}


class MR(Resource):
    """A registered buffer. pyverbs' names are read-only (buf, length, lkey, rkey, handle); what the NIC
    reads besides is soft0's own: _pd, _access, _memory (the buffer as a memoryview), _data (numpy's view of
    it: rdmalab.verbs.as_array), _bell (what a sleeper on it waits on) and _windows (MWs bound in it)."""
    buf, length, lkey, rkey = readonly("_buf"), readonly("_length"), readonly("_lkey"), readonly("_rkey")

    def __init__(self, creator, length=0, access=0, address=None, implicit=False, **kwargs):
        super().__init__()
        cm_id = creator if hasattr(typed(creator, object, "creator", none=False), "reg_msgs") else None
        if cm_id is not None:   # a CM id (known by what it does: cmid imports this module): rdma_reg_msgs, _read or
            # _write, in the id's PD, and the MR closes with the id, as pyverbs' does
            creator, access = (cm_id._pd, CMID_ACCESS[access]) if access in CMID_ACCESS else (None, access)
        if not isinstance(creator, PD):   # (pyverbs registers nothing, and raises what its failed C call set)
            raise PyverbsRDMAError(f"Failed to register a MR. length: {length}, access flags: {access} (an MR is "
                                   f"registered in a PD, MR(pd, ...), or a CM id's)", EINVAL)
        creator.check_open()
        if implicit:
            raise PyverbsUserError("The emulated NIC registers no implicit MR (the whole address space): register "
                                   "a buffer, MR(pd, length, access) or MR(pd, length, access, address=...)")
        length = index(length)   # (pyverbs passes it to C as a size_t: 1.5 bytes is a TypeError there too)
        needs_local_write = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)
        if length <= 0 or (needs_local_write and not access & IBV_ACCESS_LOCAL_WRITE) or access & UNKNOWN_TO_LINUX_6_1:
            raise PyverbsRDMAError(
                f"Failed to register a MR. length: {length}, access flags: {access}", EINVAL)
        self._pd, self._length, self._access = creator, int(length), int(access)
        self._segment, self._lkey = _new_segment(self._length, address, access)
        self._rkey = self._lkey if access & REMOTE_ACCESS else 0
        self._buf = self._segment.address if address is None else index(address)
        self._data = self._segment.data  # numpy uint8 view of the buffer
        self._bell = self._segment.bell  # rdmalab.proc.waiting sleeps on it; a peer's write wakes it
        self._memory = self._segment.bytes  # the buffer as a memoryview: what the NIC copies from and to
        self._windows = set()  # MWs bound to it: it cannot be deregistered while one is
        if address is None:
            self._data[::4096] = 0  # registering pins every page: the kernel faults each one in; so do we
        words = self._segment.words
        words[M_ACCESS], words[M_LENGTH], words[M_ADDR], words[M_PD] = access, self._length, self._buf, creator.handle
        words[M_VALID] = 1
        REGISTERED[self._lkey], SEGMENTS[self._lkey] = self, self._segment
        self._depend_on(creator)
        if cm_id is not None:
            cm_id._mrs.append(self)

    @readonly
    def handle(self):
        """The MR's handle (the kernel's number for it, which ibv_import_mr takes): soft0's key serves."""
        return self._lkey

    def __str__(self):
        return "MR:\n" + field_lines((("lkey", self.lkey), ("rkey", self.rkey), ("length", self.length),
                                      ("buf", self.buf), ("handle", self.handle)))

    def write(self, data, length, offset=0):
        """Copy `length` bytes of `data` into the buffer at `offset`."""
        self.check_open()
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, (bytes, bytearray)):   # (pyverbs casts it to char *, which takes no other type)
            raise TypeError(f"expected bytes, {type(data).__name__} found")
        self._check_range(length, offset)
        source = memoryview(data)
        if len(source) < length:
            raise PyverbsUserError(f"write() asked for {length} bytes but the data has only {len(source)}")
        self._data[offset:offset + length] = source[:length]

    def read(self, length, offset):
        """Return `length` bytes from the buffer at `offset`."""
        self.check_open()
        self._check_range(length, offset)
        return self._data[offset:offset + length].tobytes()

    def rereg(self, flags, pd=None, addr=0, length=0, access=0):
        """ibv_rereg_mr: EOPNOTSUPP, as rxe (Linux 6.1) answers it."""
        self.check_open()
        raise not_supported("Re-registering an MR (ibv_rereg_mr)")

    def _check_range(self, length, offset):
        # Real pyverbs does not check and silently corrupts memory; a learner deserves an error.
        if offset < 0:
            raise PyverbsUserError(f"Invalid offset {offset}")
        if length < 0 or offset + length > self.length:
            raise PyverbsUserError(
                f"{length} bytes at offset {offset} do not fit in this MR of {self.length} bytes")

    def close(self):
        """Deregister. While a memory window is bound to it, rxe refuses (EINVAL), and so does this."""
        if not self._closed and any(mw._bound_to(self) for mw in self._windows):
            raise PyverbsRDMAError("Failed to dereg MR: a memory window is bound to it (close or invalidate "
                                   "the window first)", EINVAL)
        super().close()

    def _release(self):
        REGISTERED.pop(self._lkey, None)
        SEGMENTS.pop(self._lkey, None)
        self._segment.words[M_VALID] = 0  # peers holding a mapping see the key die at once
        self._data = self._memory = None
        self._segment.close()


def _new_segment(length, address=None, access=0):
    """A segment for a new MR and its key: fresh memory, or the program's own at `address` (MR(..., address=)),
    which must begin on a page, as the buffers pyverbs allocates and mmap's do (ibv_reg_mr takes any address:
    soft0 maps whole pages over the program's)."""
    if address is not None and index(address) % shm.PAGE:
        raise PyverbsUserError(f"The emulated NIC registers memory of yours only from a page boundary, and "
                               f"{index(address):#x} is {index(address) % shm.PAGE} bytes past one: allocate it "
                               f"with mmap.mmap(-1, length) (or let MR(pd, length, access) allocate it)")
    while True:
        key = random.getrandbits(31) or 1   # (WINDOW_KEY clear)
        try:
            if address is None:
                return shm.Segment.create(segment_name(key), length), key
            writable = bool(access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC
                                      | IBV_ACCESS_MW_BIND))
            return shm.Segment.create_over(segment_name(key), index(address), length, writable), key
        except FileExistsError:
            continue
        except OSError as error:
            if error.errno == errno.EFAULT:   # what ibv_reg_mr says of memory the process cannot use so
                raise PyverbsRDMAError(f"Failed to register a MR: {error.strerror}", errno.EFAULT) from None
            if error.errno == errno.EBUSY:
                raise PyverbsUserError(f"The emulated NIC cannot register the same pages twice ({error.strerror}): "
                                       "a real device can; register them once, with the access both need")
            if error.errno != errno.ENOSPC:
                raise
            # a real device says ENOMEM when it cannot pin the pages
            raise PyverbsRDMAError(f"Failed to register a MR: {shm.no_room(length)}", ENOMEM) from None


class MWBindInfo(Fixed):
    """ibv_mw_bind_info: which MR range a memory window is bound to, with which access."""
    addr, length, mw_access_flags = readonly("_addr"), readonly("_length"), readonly("_mw_access_flags")

    def __init__(self, mr, addr, length, mw_access_flags):
        self._mr, self._addr, self._length = typed(mr, MR, "mr", none=False), addr, length
        self._mw_access_flags = mw_access_flags

    def close(self):
        """pyverbs' MWBindInfo is closed like its other objects; there is nothing to free."""

    def __str__(self):
        return "MWBindInfo:\n" + field_lines((("Addr", self.addr), ("Length", self.length),
                                              ("MW access flags", self.mw_access_flags)))


class MWBind(Fixed):
    """ibv_mw_bind: a bind_mw() request (pyverbs' has no readable names)."""

    def __init__(self, info, send_flags, wr_id=0):
        self._bind_info, self._send_flags, self._wr_id = typed(info, MWBindInfo, "info", none=False), send_flags, wr_id

    def close(self):
        """pyverbs' MWBind is closed like its other objects; there is nothing to free."""

    def __str__(self):
        return "MWBind:\n" + field_lines((("WR id", self._wr_id), ("Send flags", self._send_flags)))


class MW(Resource):
    """A memory window (ibv_alloc_mw), type 1 or 2. `rkey` is libibverbs' copy of its key, which only
    qp.bind_mw() updates (a type 2 window's new key is the BIND_MW WR's, wr.rkey); the NIC's own copy
    (_nic_key) changes with every bind. A type 1 window is valid from the start (with nothing in it); a
    type 2 window is free until a bind on a QP of its PD, which it then serves alone."""
    handle, rkey, type = readonly("_handle"), readonly("_rkey"), readonly("_type")

    def __init__(self, pd, mw_type):
        super().__init__()
        typed(pd, PD, "pd", none=False).check_open()
        if mw_type not in (IBV_MW_TYPE_1, IBV_MW_TYPE_2):
            raise PyverbsRDMAError(f"Failed to allocate MW of type {mw_type} (rxe has types 1 and 2)", EINVAL)
        self._pd, self._type = pd, mw_type
        self._reservation, index = _reserve_window_index()
        self._rkey = self._nic_key = WINDOW_KEY | index << 8 | random.getrandbits(8)
        self._handle = index
        self._window = None   # the current binding (a Window), or None
        self._depend_on(pd)

    def _bound_to(self, mr):
        """True while a binding of this window opens part of `mr` (and nobody invalidated it)."""
        return self._window is not None and self._window.mr is mr and bool(self._window.header[M_VALID])

    def _bind(self, qp_num, new_key, info):
        """The NIC binds the window (rxe_bind_mw), once checks.BIND has passed the WR (a refusal completes it
        with MW_BIND_ERR, changing nothing). A length of 0 unbinds a type 1 window."""
        mr, addr, length, access = info._mr, info.addr, info.length, info.mw_access_flags
        self._unbind()
        self._nic_key = self._nic_key & ~0xFF | new_key & 0xFF
        if length:
            self._window = Window.bind(self, mr, addr, access, qp_num if self._type == IBV_MW_TYPE_2 else 0)
        return True

    def _unbind(self):
        if self._window is not None:
            SEGMENTS.pop(self._nic_key, None)
            self._window.mr._windows.discard(self)
            self._window.header[M_VALID] = 0   # peers holding it see the key die
            self._window.close()
            self._window = None

    def _release(self):
        self._unbind()
        self._reservation.close()

    def __str__(self):
        return "MW:\n" + field_lines((("Rkey", self._rkey), ("Handle", self._handle), ("MW Type", mwtype2str(self._type))))


returns(MW, type=ibv_mw_type)   # (an enum member in pyverbs >= 59: pyverbs_generation.py)


def mwtype2str(mw_type):
    return {IBV_MW_TYPE_1: "IBV_MW_TYPE_1", IBV_MW_TYPE_2: "IBV_MW_TYPE_2"}.get(mw_type, f"Unknown MW type ({mw_type})")


class Window:
    """A bound memory window as a NIC reaches it, in the binder's process or a peer's: the header is its
    binding's (key, access, PD, validity) and the bytes are its MR's, so that the responder, and a
    requester's cached Shortcut, use it as they use an MR's segment.

    The bounds a request through the window is checked against are the MR's, not the window's: rxe
    (Linux 6.1) checks them so (a WRITE outside the window but inside the MR succeeds), and soft0
    does as rxe does. The window's own bounds matter only when binding (they must lie in the MR), and
    for a zero-based window (access ZERO_BASED), whose requests name offsets from the window's start.
    """

    def __init__(self, binding, mr_segment, mr=None):
        self.binding, self.header, self.mr = binding, binding.header, mr
        self.bytes, self.data, self.fd, self.ring = mr_segment.bytes, mr_segment.data, mr_segment.fd, mr_segment.ring

    @classmethod
    def bind(cls, mw, mr, addr, access, qp_num):
        """A new binding of `mw` in `mr` from `addr` under the window's key, as its own segment (a peer's NIC
        finds it by the key); `qp_num` is the QP a type 2 window serves (0: any QP of its PD)."""
        key = mw._nic_key
        binding = shm.Segment.create(segment_name(key), 0)
        w = binding.words
        base = mr.buf - addr if access & IBV_ACCESS_ZERO_BASED else mr.buf   # a request's address less base: its offset in the MR
        w[M_ACCESS], w[M_LENGTH], w[M_ADDR], w[M_PD] = access & REMOTE_ACCESS, mr.length, base, mw._pd.handle
        w[M_MR], w[M_MW_TYPE], w[M_QP] = mr.lkey, mw._type, qp_num
        w[M_VALID] = 1
        window = SEGMENTS[key] = cls(binding, mr._segment, mr)
        mr._windows.add(mw)
        return window

    def close(self):
        self.bytes = self.data = None
        self.binding.close()


def _reserve_window_index():
    """A window index no other window of this host has (its keys are WINDOW_KEY | index << 8 | tag)."""
    while True:
        index = random.getrandbits(23)
        try:
            return shm.Segment.create(f"mw-{index:06x}", 0), index
        except FileExistsError:
            continue


DMMR = absent("DMMR", "Device memory (DM) MRs", rxe_has=False)
DmaBufMR = absent("DmaBufMR", "dma-buf MRs", rxe_has=False)
