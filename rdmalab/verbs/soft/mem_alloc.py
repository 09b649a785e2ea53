"""pyverbs.mem_alloc: the C library's memory functions on raw addresses (ctypes, as pyverbs wraps libc)."""
import ctypes
import mmap as _mmap

from .base import PyverbsRDMAErrno

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]

PROT_READ, PROT_WRITE = _mmap.PROT_READ, _mmap.PROT_WRITE
MAP_PRIVATE_, MAP_SHARED_, MAP_ANONYMOUS_ = _mmap.MAP_PRIVATE, _mmap.MAP_SHARED, _mmap.MAP_ANONYMOUS
MAP_HUGETLB_ = 0x40000
MADV_DONTNEED = 4
MAP_FAILED = ctypes.c_void_p(-1).value


def mmap(addr=0, length=100, prot=PROT_READ | PROT_WRITE, flags=MAP_PRIVATE_ | MAP_ANONYMOUS_, fd=0, offset=0):
    ptr = _libc.mmap(addr or None, length, prot, flags, fd, offset)
    if ptr is None or ptr == MAP_FAILED:
        raise MemoryError("Failed to mmap memory")
    return ptr


def madvise(addr, length, flags=MADV_DONTNEED):
    if _libc.madvise(addr, length, flags):
        raise PyverbsRDMAErrno("Failed to madvise memory")


def munmap(addr, length):
    if _libc.munmap(addr, length):
        raise MemoryError("Failed to munmap requested memory")


def malloc(size):
    ptr = _libc.malloc(size)
    if not ptr:
        raise MemoryError("Failed to allocate memory")
    return ptr


def posix_memalign(size, alignment=8):
    ptr = ctypes.c_void_p()
    if _libc.posix_memalign(ctypes.byref(ptr), alignment, size):
        raise MemoryError("Failed to allocate memory")
    ctypes.memset(ptr, 0, size)
    return ptr.value


def free(ptr):
    _libc.free(ptr)


def writebe32(addr, val, offset=0):
    ctypes.c_uint32.from_address(addr + 4 * offset).value = int.from_bytes(val.to_bytes(4, "big"), "little")


def writebe64(addr, val, offset=0):
    ctypes.c_uint64.from_address(addr + 8 * offset).value = int.from_bytes(val.to_bytes(8, "big"), "little")


def write(addr, data, length, offset=0):
    ctypes.memmove(addr + offset, bytes(data)[:length], length)


def read32(addr, offset=0):
    return ctypes.c_uint32.from_address(addr + 4 * offset).value


def read64(addr, offset=0):
    return ctypes.c_uint64.from_address(addr + 8 * offset).value


def read(addr, length, offset=0):
    return ctypes.string_at(addr + offset, length)
