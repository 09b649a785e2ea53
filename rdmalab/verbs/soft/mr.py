"""Memory regions: a buffer the NIC may touch, named by its keys.

MR(pd, length, access) allocates a page-aligned buffer in a shared-memory segment `rdmalab-mr-<lkey>`
and registers it. What real rxe does, this does:
- lkey == rkey when any remote access is granted; rkey is 0 otherwise;
- REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is refused (EINVAL), as is length 0;
- the header holds what a NIC's memory translation table holds for the key: valid, access, length,
  the owner's address of the buffer and the PD. A peer NIC checks them on every access.
"""
import errno
import random

from . import shm
from .base import Resource, absent, not_supported
from .layout import M_ACCESS, M_ADDR, M_LENGTH, M_PD, M_VALID
from .enums import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
                               IBV_ACCESS_REMOTE_WRITE)
from .pd import PD
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError

REMOTE_ACCESS = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
EINVAL, ENOMEM = errno.EINVAL, errno.ENOMEM

REGISTERED = {}  # lkey -> MR, for this process: the local half of the key table
SEGMENTS = {}    # lkey -> its shared segment, for this process's NIC


def segment_name(key):
    return f"mr-{key:08x}"


class MR(Resource):
    def __init__(self, creator, length=0, access=0, address=None, implicit=False, **kwargs):
        super().__init__()
        if not isinstance(creator, PD):
            raise PyverbsUserError(f"Expected PD, got {type(creator)}")
        creator.check_open()
        if address is not None or implicit:
            raise PyverbsUserError(
                "The emulated NIC registers only memory it allocates: use MR(pd, length, access) and "
                "view the buffer with rdmalab.verbs.as_array(mr)")
        needs_local_write = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)
        if length <= 0 or (needs_local_write and not access & IBV_ACCESS_LOCAL_WRITE):
            raise PyverbsRDMAError(
                f"Failed to register a MR. length: {length}, access flags: {access}", EINVAL)
        self.pd, self.length, self.access = creator, int(length), int(access)
        self._segment, self.lkey = _new_segment(self.length)
        self.rkey = self.lkey if access & REMOTE_ACCESS else 0
        self.buf = self._segment.address
        self.data = self._segment.data  # numpy uint8 view of the buffer
        self.bell = self._segment.bell  # rdmalab.proc.waiting sleeps on it; a peer's write wakes it
        self.memory = self._segment.bytes  # the buffer as a memoryview: what the NIC copies from and to
        self.data[::4096] = 0  # registering pins every page: the kernel faults each one in; so do we
        words = self._segment.words
        words[M_ACCESS], words[M_LENGTH], words[M_ADDR], words[M_PD] = access, self.length, self.buf, creator.handle
        words[M_VALID] = 1
        REGISTERED[self.lkey], SEGMENTS[self.lkey] = self, self._segment
        self._depend_on(creator)

    def write(self, data, length, offset=0):
        """Copy `length` bytes of `data` into the buffer at `offset`."""
        self.check_open()
        if isinstance(data, str):
            data = data.encode()
        self._check_range(length, offset)
        source = memoryview(data).cast("B")
        if len(source) < length:
            raise PyverbsUserError(f"write() asked for {length} bytes but the data has only {len(source)}")
        self.data[offset:offset + length] = source[:length]

    def read(self, length, offset):
        """Return `length` bytes from the buffer at `offset`."""
        self.check_open()
        self._check_range(length, offset)
        return self.data[offset:offset + length].tobytes()

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

    def _release(self):
        REGISTERED.pop(self.lkey, None)
        SEGMENTS.pop(self.lkey, None)
        self._segment.words[M_VALID] = 0  # peers holding a mapping see the key die at once
        self.data = self.memory = None
        self._segment.close()


def _new_segment(length):
    while True:
        key = random.getrandbits(32) or 1
        try:
            return shm.Segment.create(segment_name(key), length), key
        except FileExistsError:
            continue
        except OSError as error:   # a real device says ENOMEM when it cannot pin the pages
            if error.errno != errno.ENOSPC:
                raise
            raise PyverbsRDMAError(f"Failed to register a MR: {shm.no_room(length)}", ENOMEM) from None


class MWBindInfo:
    """ibv_mw_bind_info: which MR range a memory window is bound to, with which access."""

    def __init__(self, mr, addr, length, mw_access_flags):
        self.mr, self.addr, self.length, self.mw_access_flags = mr, addr, length, mw_access_flags


class MWBind:
    """ibv_mw_bind: a bind_mw() request."""

    def __init__(self, info, send_flags, wr_id=0):
        self.bind_info, self.send_flags, self.wr_id = info, send_flags, wr_id


MW = absent("MW", "Memory windows (ibv_alloc_mw)")
DMMR = absent("DMMR", "Device memory (DM) MRs", rxe_has=False)
DmaBufMR = absent("DmaBufMR", "dma-buf MRs", rxe_has=False)
