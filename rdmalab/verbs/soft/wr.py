"""Work requests and scatter/gather elements, as pyverbs.wr has them.

As in pyverbs, a work request copies its SGEs when it is built: changing an SGE afterwards does not
change the request. pyverbs' classes are Cython classes with fixed fields, so a misspelt one
(`sge.lenght = 8`) raises AttributeError there; __slots__ does the same here.
"""
import ctypes
from operator import index

from .constants import IBV_SEND_SIGNALED, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND, IBV_WR_SEND_WITH_INV
from .pyverbs_error import PyverbsUserError
from .utils import field_lines, flags_to_str


class SGE:
    """One piece of local memory: address, length and the lkey of the MR that holds it."""
    __slots__ = ("addr", "length", "lkey")

    def __init__(self, addr, length, lkey):
        # pyverbs stores these in the C struct (ibv_sge): any integer (numpy's too) that fits becomes a plain one
        self.addr, self.length = c_unsigned(addr, 64, "uint64_t"), c_uint32(length)
        self.lkey = c_uint32(lkey)

    def read(self, length, offset):
        return ctypes.string_at(self.addr + offset, length)

    def __str__(self):
        return field_lines((("Address", hex(self.addr)), ("Length", self.length), ("Key", hex(self.lkey))))


def c_unsigned(value, bits, ctype):
    """`value` as the C field of `bits` bits that pyverbs stores it in: an integer (numpy's too), or
    the OverflowError or TypeError Cython raises for one that does not fit (a length of -1 is no
    4 GiB SGE)."""
    value = index(value)
    if value < 0:
        raise OverflowError(f"can't convert negative value to {ctype}")
    if value >> bits:
        raise OverflowError(f"value too large to convert to {ctype}")
    return value


def c_uint32(value):
    return c_unsigned(value, 32, "uint32_t")


def _copy_sges(sg, num_sge):
    if num_sge < 1 or sg is None:
        raise PyverbsUserError("A WR needs at least one SGE")
    return tuple((s.addr, s.length, s.lkey) for s in sg[:num_sge])


class _WR:
    """What send and receive WRs share: the SGEs they copied, of which the NIC uses the first num_sge
    (a program may lower num_sge after building the WR, as the C struct allows: 0 makes it empty)."""
    __slots__ = ("_all_sges", "_num_sge", "sges")

    @property
    def num_sge(self):
        return self._num_sge

    @num_sge.setter
    def num_sge(self, count):
        self._num_sge, self.sges = count, self._all_sges[:max(count, 0)]


class RecvWR(_WR):
    __slots__ = ("wr_id", "next_wr")

    def __init__(self, wr_id=0, num_sge=0, sg=None, next_wr=None):
        # no SGEs is a receive of nothing: what a WRITE_WITH_IMM's notification or an empty SEND consumes
        self._all_sges = _copy_sges(sg, num_sge) if num_sge > 0 and sg is not None else ()
        self.num_sge, self.wr_id, self.next_wr = num_sge, c_unsigned(wr_id, 64, "uint64_t"), next_wr

    def __str__(self):
        return field_lines((("WR ID", self.wr_id), ("Num SGE", self.num_sge)))


class SendWR(_WR):
    __slots__ = ("wr_id", "opcode", "imm_data", "send_flags", "next_wr", "remote_addr", "rkey", "compare_add", "swap",
                 "ah", "remote_qpn", "remote_qkey",        # a UD send's destination (set_wr_ud)
                 "bind_mw", "bind_info", "mw_rkey",        # a BIND_MW's window (set_bind_wr)
                 "inline_data")                            # the bytes of an inline send, read when posted

    def __init__(self, wr_id=0, opcode=IBV_WR_SEND, num_sge=0, imm_data=0, sg=None,
                 send_flags=IBV_SEND_SIGNALED, next_wr=None):
        no_data = opcode in (IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV)
        self._all_sges = () if no_data and (num_sge < 1 or sg is None) else _copy_sges(sg, num_sge)
        self.wr_id, self.opcode, self.num_sge = c_unsigned(wr_id, 64, "uint64_t"), opcode, num_sge
        self.imm_data, self.send_flags, self.next_wr = c_unsigned(imm_data, 32, "__be32"), send_flags, next_wr
        self.remote_addr = self.rkey = self.compare_add = self.swap = self.remote_qpn = self.remote_qkey = 0
        self.ah = self.bind_mw = self.bind_info = self.mw_rkey = self.inline_data = None

    def __str__(self):
        # pyverbs' printout, bracket slip included: the Imm Data line is part of the send flags' value, so
        # it follows them on their line, and the printout ends with an empty line
        return field_lines((("WR ID", self.wr_id), ("Num SGE", self.num_sge), ("Opcode", int(self.opcode)),
                            ("Send flags", send_flags_to_str(self.send_flags) +
                             field_lines((("Imm Data", self.imm_data),)))))

    def set_wr_rdma(self, rkey, addr):
        """Target of RDMA WRITE/READ: the peer's rkey and an address inside its MR."""
        self.rkey, self.remote_addr = c_uint32(rkey), c_unsigned(addr, 64, "uint64_t")

    def set_wr_ud(self, ah, rqpn, rqkey):
        """Where a UD send goes: an address handle, the destination QP's number and its Q_Key."""
        from .addr import AH
        if not isinstance(ah, AH):
            raise TypeError(f"Argument 'ah' has incorrect type (expected pyverbs.addr.AH, got {type(ah).__name__})")
        self.ah, self.remote_qpn, self.remote_qkey = ah, rqpn, rqkey

    def set_bind_wr(self, mw, bind_info):
        """Make this a BIND_MW WR (type 2 windows): bind `mw` as `bind_info` says, under a new key, wr.rkey:
        the window's key with its low byte incremented (ibv_inc_rkey). The NIC checks that the window
        still has the key libibverbs knows (mw.rkey, kept as wr.mw_rkey)."""
        from .base import inc_rkey
        self.bind_mw, self.bind_info, self.mw_rkey, self.rkey = mw, bind_info, mw.rkey, inc_rkey(mw.rkey)

    def set_wr_atomic(self, rkey, addr, compare_add, swap=0):
        """Target of an atomic: an 8-byte aligned word in the peer's MR."""
        self.rkey, self.remote_addr = c_uint32(rkey), c_unsigned(addr, 64, "uint64_t")
        self.compare_add, self.swap = c_unsigned(compare_add, 64, "uint64_t"), c_unsigned(swap, 64, "uint64_t")

    @property
    def sg_list(self):
        return self.sges

    @sg_list.setter
    def sg_list(self, sge):
        self._all_sges = ((sge.addr, sge.length, sge.lkey),)
        self.num_sge = 1


def send_flags_to_str(flags):
    return flags_to_str(flags, {1: "IBV_SEND_FENCE", 2: "IBV_SEND_SIGNALED", 4: "IBV_SEND_SOLICITED",
                                8: "IBV_SEND_INLINE", 16: "IBV_SEND_IP_CSUM"})


def fill_from(target, wr):
    """pyverbs' bad_wr: the WR object a program gave is filled with the one that failed."""
    for cls in type(wr).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(wr, name):
                setattr(target, name, getattr(wr, name))
