"""Named shared-memory segments: the emulated NIC's "host memory that the NIC can reach".

Every registered memory region and every queue pair lives in a file under /dev/shm (or the temp
directory where there is none), named `rdmalab-mr-<key>` or `rdmalab-qp-<qpn>`, so that another
process on the same host can map it, exactly as a NIC can reach any registered page by its key.

The rules that keep them safe:
- a file is created with O_EXCL and mode 0600: a name is never shared by accident, and only its
  owner's user can map it;
- each segment starts with a header of 64-bit words; word 0 is a magic number, word 1 the owner's
  pid, so a segment whose owner died (SIGKILL included) is recognised and removed by `reap_orphans()`,
  which runs whenever a device is opened;
- the owner unlinks its files on close(), and a finalizer does it at exit or garbage collection.
"""
import ctypes
import errno
import functools
import mmap
import os
import stat
import tempfile
import threading
import time
import weakref

import numpy as np

from rdmalab import settings
from rdmalab.proc import waiting
from rdmalab.proc.procstat import pid_alive
from .layout import W_BELL, W_MAGIC, W_OWNER_PID, W_SLEEPERS

MAGIC = 0x52444D414C4142  # "RDMALAB"
PREFIX = "rdmalab-"
HEADER_BYTES = 4096  # data starts page-aligned, as pyverbs' MR buffers are
PAGE = mmap.PAGESIZE
MAP_FIXED = 0x10     # (Linux's, on every architecture the lab runs on; Python's mmap module does not name it)


ENOUGH_SHM = 1 << 30   # a smaller /dev/shm (Docker's and many containers' default is 64 MiB) is passed over


def directory():
    """Where segments live: RDMALAB_SHM_DIR if set, else /dev/shm when it is writable and holds at least
    ENOUGH_SHM, else the temp directory. Every process on the host must choose the same: the choice
    depends on the size of /dev/shm, never on what is free in it."""
    chosen = settings.shm_dir()
    if chosen:
        return chosen
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        fs = os.statvfs("/dev/shm")
        if fs.f_blocks * fs.f_frsize >= ENOUGH_SHM:
            return "/dev/shm"
    return tempfile.gettempdir()


def small_dev_shm():
    """Why /dev/shm was passed over, with the fix, or None when it is used (or RDMALAB_SHM_DIR chose)."""
    if settings.shm_dir() or not os.path.isdir("/dev/shm"):
        return None
    fs = os.statvfs("/dev/shm")
    if fs.f_blocks * fs.f_frsize >= ENOUGH_SHM:   # (passed over, if at all, for another reason: not writable)
        return None
    return (f"/dev/shm holds only {fs.f_blocks * fs.f_frsize >> 20} MiB (a container's default is 64), under the "
            f"{ENOUGH_SHM >> 20} MiB the lessons may register, so soft0 keeps registered memory in {directory()}: "
            f"it works, on disk-backed pages. Give /dev/shm room: docker run --shm-size=1g "
            f"(podman run --shm-size=1g; Kubernetes: an emptyDir with medium Memory at /dev/shm)")


def no_room(data_bytes):
    """What to say when a segment of `data_bytes` does not fit where segments live."""
    fs = os.statvfs(directory())
    return (f"{data_bytes >> 20} MiB do not fit in {directory()} ({fs.f_bavail * fs.f_frsize >> 20} MiB free), "
            f"where the emulated NIC keeps registered memory: register less, close what you no longer use, "
            f"or give it room (a container: docker run --shm-size=2g; or set RDMALAB_SHM_DIR to a roomier "
            f"directory for every process of the lab)")


def _path(name):
    return os.path.join(directory(), PREFIX + name)


class Segment:
    """One mapped file: `words` is its int64 header and `data` its byte area, as numpy views;
    `header` and `bytes` are memoryviews of the same, faster for single words and small copies."""

    def __init__(self, fd, path, owner):
        self.fd, self.path, self.owner = fd, path, owner
        size = os.fstat(fd).st_size
        self.mm = mmap.mmap(fd, size)
        raw = np.frombuffer(self.mm, dtype=np.uint8)
        self.words = raw[:HEADER_BYTES].view(np.int64)
        self.header = memoryview(self.mm)[:HEADER_BYTES].cast("q")  # the same words, read faster
        self.data = raw[HEADER_BYTES:]
        self.bytes = memoryview(self.mm)[HEADER_BYTES:]  # the data again: small copies are fastest here
        self.address = raw.ctypes.data + HEADER_BYTES  # where `data` starts in this process
        self.bell = Bell(self.header, raw.ctypes.data + 8 * W_BELL)
        self._finalizer = weakref.finalize(self, _release, self.mm, fd, path if owner else None)
        _LIVE[(id(self), "own")] = (self.address, self.address + len(self.data))
        weakref.finalize(self, _forget, id(self))

    @classmethod
    def create(cls, name, data_bytes):
        """Create `name` exclusively (FileExistsError if taken), sized for a header plus data."""
        path = _path(name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            size = HEADER_BYTES + max(int(data_bytes), 0)
            try:   # reserve every page now: a full /dev/shm is an error here, not a SIGBUS later
                os.posix_fallocate(fd, 0, size)
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):   # a file system that cannot reserve
                    raise
                os.ftruncate(fd, size)
            seg = cls(fd, path, owner=True)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        seg.words[W_OWNER_PID] = os.getpid()
        seg.words[W_MAGIC] = MAGIC
        return seg

    @classmethod
    def attach(cls, name):
        """Map another process's segment; None if it does not exist, or is not ours: only a file of our own
        user is our device's memory (another user may make a file of theirs readable, name it as a segment
        and lay it out as one), and a symlink is never a segment."""
        path = _path(name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except (FileNotFoundError, PermissionError):
            return None
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            return None
        try:
            st = os.fstat(fd)
            if st.st_size < HEADER_BYTES or st.st_uid != os.geteuid():
                os.close(fd)
                return None
            seg = cls(fd, path, owner=False)
        except (OSError, ValueError):
            os.close(fd)
            return None
        return seg if seg.words[W_MAGIC] == MAGIC else None

    @classmethod
    def create_over(cls, name, address, length, writable=True):
        """A segment whose data are the `length` bytes this process already has at `address` (page-aligned):
        what the program registers with MR(pd, length, access, address=...). Their pages' bytes are copied
        into the segment, then the segment's data are mapped over them at the same address (MAP_FIXED), with
        the protection they had: the program's own pointers keep working and see what they saw, what it
        writes there is what a NIC reads, and another process maps the segment by name, as a NIC reaches
        pinned pages. When the segment is closed the program's mapping stays (of a file now unlinked), so
        the memory outlives its registration, as it does after ibv_dereg_mr. Raises OSError: EFAULT if
        part of the range is not mapped readable, or `writable` (the access lets the NIC write) and not
        writable (ibv_reg_mr's answers), EBUSY if a live segment backs part of it (a second registration of
        the same pages: soft0 cannot give pages two segments)."""
        pages = -(-length // PAGE) * PAGE
        prot = _protection(address, pages, writable)
        seg = cls.create(name, pages)
        try:
            ctypes.memmove(seg.address, address, pages)   # what the program had there (faulting its pages in)
            if _libc().mmap(ctypes.c_void_p(address), ctypes.c_size_t(pages), prot, mmap.MAP_SHARED | MAP_FIXED,
                            seg.fd, ctypes.c_long(HEADER_BYTES)) != address:
                raise OSError(ctypes.get_errno(), f"mmap over {address:#x}: {os.strerror(ctypes.get_errno())}")
        except BaseException:
            seg.close()
            raise
        _LIVE[(id(seg), "over")] = (address, address + pages)
        return seg

    def ring(self):
        """A NIC wrote here: wake the owner if it sleeps on this segment. No syscall unless it does."""
        h = self.header
        h[W_BELL] = (h[W_BELL] + 1) & 0x7FFFFFFF
        if h[W_SLEEPERS]:
            self.bell.wake()

    def close(self):
        """Unmap (and, for the owner, unlink). Safe to call twice."""
        self.bell.header = None
        for view in (self.header, self.bytes):
            if view is not None:
                view.release()
        self.words = self.data = self.header = self.bytes = None
        self._finalizer()
        _forget(id(self))


_LIVE = {}   # (id of a segment, "own" or "over") -> [lo, hi): the data pages its mappings in this process back


def _forget(segment_id):
    for which in ("own", "over"):
        _LIVE.pop((segment_id, which), None)


@functools.lru_cache(maxsize=None)
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


MADV_POPULATE_READ, MADV_POPULATE_WRITE = 22, 23   # Linux 5.14: fault pages in as a read (a write) would


@functools.lru_cache(maxsize=None)
def _can_populate():
    """Whether this kernel knows MADV_POPULATE_READ (Linux 5.14)."""
    page = mmap.mmap(-1, PAGE)
    try:
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        return _libc().madvise(ctypes.c_void_p(address), ctypes.c_size_t(PAGE), MADV_POPULATE_READ) == 0
    finally:
        page.close()


def _protection(address, length, writable):
    """The protection (PROT_*) to map over this process's pages [address, address+length), found as ibv_reg_mr
    finds it, by faulting them in (madvise MADV_POPULATE_READ, then _WRITE: what pinning them does, without
    touching a byte). OSError: EFAULT if a page is not mapped readable, or `writable` and not writable; EBUSY
    if a live segment already backs one (a segment closed since leaves its pages free to register again)."""
    end = address + length
    for lo, hi in list(_LIVE.values()):
        if lo < end and hi > address:
            raise OSError(errno.EBUSY, f"a registered segment already backs {max(lo, address):#x}")
    libc = _libc()
    if libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), MADV_POPULATE_READ):
        err = ctypes.get_errno()
        if err == errno.EINVAL and not _can_populate():   # a kernel before 5.14: trust the program
            return mmap.PROT_READ | mmap.PROT_WRITE
        if err not in (errno.ENOMEM, errno.EINVAL, errno.EFAULT):
            raise OSError(err, os.strerror(err))
        raise OSError(errno.EFAULT, f"[{address:#x}, +{length}) is not all mapped readable in this process")
    if libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), MADV_POPULATE_WRITE) == 0:
        return mmap.PROT_READ | mmap.PROT_WRITE
    if writable:
        raise OSError(errno.EFAULT, f"{address:#x}: the pages are read-only and the access lets the NIC write")
    return mmap.PROT_READ


class Bell:
    """How a segment's owner sleeps until a NIC touches the segment (rdmalab.proc.waiting.until's `bell`).

    The owner arms it (W_SLEEPERS says someone sleeps), takes the futex word's value, checks once
    more, and sleeps while the word still holds that value. A writer bumps the word after every
    write, and makes the wake-up syscall only when W_SLEEPERS says someone sleeps (Segment.ring).
    Only the owner's threads arm a bell, so a count in this process is enough."""
    _lock = threading.Lock()

    def __init__(self, header, address):
        self.header, self.address, self.sleepers = header, address, 0

    def arm(self):
        with self._lock:
            self.sleepers += 1
            self.header[W_SLEEPERS] = self.sleepers
        return self.header[W_BELL]

    def sleep(self, token, seconds):
        """Sleep until woken, or for `seconds`; returns futex_wait's errno (EINTR: a signal came)."""
        return waiting.futex_wait(self.address, token, seconds)

    def disarm(self):
        with self._lock:
            self.sleepers -= 1
            if self.header is not None:
                self.header[W_SLEEPERS] = self.sleepers

    def wake(self):
        if waiting.futex_works():
            waiting.futex_wake(self.address)


def _release(mm, fd, path_to_unlink):
    if path_to_unlink:
        try:
            os.unlink(path_to_unlink)
        except FileNotFoundError:
            pass
    try:
        mm.close()
    except BufferError:
        pass  # a numpy view handed out by the program still holds it; the OS frees it with the view
    try:
        os.close(fd)
    except OSError:
        pass


def _segments():
    """(directory entry, owner pid or None if unreadable) for every rdmalab segment present now."""
    for entry in os.scandir(directory()):
        if not entry.name.startswith(PREFIX):
            continue
        try:   # anyone may put a file here: a FIFO must not block us, nor a symlink or a short file fool us
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            yield entry, None
            continue
        try:
            raw = os.read(fd, 16) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        except OSError:
            raw = b""
        finally:
            os.close(fd)
        head = np.frombuffer(raw, dtype=np.int64) if len(raw) == 16 else ()
        yield entry, int(head[W_OWNER_PID]) if len(head) == 2 and head[W_MAGIC] == MAGIC else None


def stale_socket(path):
    """Whether the Unix socket at `path` (an rdma_cm listener's, rdmalab.verbs.soft.cmid) is a leftover of
    a process that is gone: connecting to it is refused."""
    import socket
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    probe.setblocking(False)   # (a live listener with a full backlog answers EAGAIN: not stale, no wait)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def _stale_listener(entry):
    try:
        return entry.name.startswith(f"{PREFIX}cm-{os.geteuid()}-") and stat.S_ISSOCK(
            entry.stat(follow_symlinks=False).st_mode) and stale_socket(entry.path)
    except OSError:
        return False


def reap_orphans():
    """Remove segments whose owner process is gone (killed before it could clean up), and rdma_cm
    listeners' sockets nobody listens on any more. Returns their names."""
    reaped = []
    for entry, owner in _segments():
        if owner is not None and not pid_alive(owner) or owner is None and _stale_listener(entry):
            try:
                os.unlink(entry.path)
                reaped.append(entry.name)
            except OSError:
                pass
    return reaped


def reap_when_gone(pids, timeout=10):
    """Wait (up to `timeout` s) until these just-killed processes have exited, which is when the kernel
    lets go of their memory, then reap_orphans()."""
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return reap_orphans()


def leftovers(pid=None):
    """Names of rdmalab segments present now (of one owner pid, if given): for tests and `doctor`."""
    return [entry.name for entry, owner in _segments() if pid is None or owner == pid]
