"""Work requests and scatter/gather elements, as pyverbs.wr has them.

As in pyverbs, a work request copies its SGEs when it is built: changing an SGE afterwards does not
change the request. pyverbs' classes are Cython classes with fixed fields, so a misspelt one
(`sge.lenght = 8`) raises AttributeError there; __slots__ does the same here (and costs nothing on the
data path, where a __setattr__ would). What the NIC reads of a WR beyond pyverbs' names (its SGEs, remote
address and key, a UD destination) is kept under "_" names: `wr.remote_addr` is no pyverbs name.

pyverbs links a chain by pointer: `SendWR(next_wr=w2)` keeps the address of w2's C struct and no reference
to w2, so a chain whose later WRs were garbage-collected (`SendWR(..., next_wr=SendWR(...))` with no name
kept for the inner one) points at freed memory there, and posting it is undefined. soft0 keeps the WR
itself, so such a chain works here: keep a name for every WR of a chain, for a real device. Reading
`wr.next_wr` in pyverbs builds a new WR from the struct (SendWR(), which raises PyverbsUserError for want
of an SGE); soft0 returns the next WR.
"""
import ctypes
from operator import index

from .constants import IBV_SEND_SIGNALED, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND, IBV_WR_SEND_WITH_INV
from .base import PyverbsObject, inc_rkey, pyverbs_name, readonly, typed
from .pyverbs_error import PyverbsUserError
from .utils import field_lines, flags_to_str


class SGE(PyverbsObject):
    """One piece of local memory: address, length and the lkey of the MR that holds it."""
    __slots__ = ("addr", "length", "lkey")

    def __init__(self, addr, length, lkey):
        # pyverbs stores these in the C struct (ibv_sge): any integer (numpy's too) that fits becomes a plain one
        self.addr, self.length = c_unsigned(addr, 64, "uint64_t"), c_uint32(length)
        self.lkey = c_uint32(lkey)

    def read(self, length, offset):
        return ctypes.string_at(self.addr + offset, length)

    def close(self):
        """pyverbs frees the C struct; soft0 has nothing to free."""

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


class _WR(PyverbsObject):
    """What send and receive WRs share: the SGEs they copied, of which the NIC uses the first num_sge
    (`_sges`: a program may lower num_sge after building the WR, as the C struct allows: 0 makes it
    empty), and the next WR of a chain (`_next`), of the same class."""
    __slots__ = ("_all_sges", "_num_sge", "_sges", "_next")

    @property
    def num_sge(self):
        return self._num_sge

    @num_sge.setter
    def num_sge(self, count):
        self._num_sge, self._sges = count, self._all_sges[:max(count, 0)]

    @property
    def next_wr(self):
        return self._next

    @next_wr.setter
    def next_wr(self, wr):   # (pyverbs' setter takes a WR of the same kind, not None)
        self._next = typed(wr, RecvWR if isinstance(self, RecvWR) else SendWR, "val", none=False)

    def close(self):
        """pyverbs frees the C copy of the SGEs; soft0 has nothing to free."""


class RecvWR(_WR):
    __slots__ = ("wr_id",)

    def __init__(self, wr_id=0, num_sge=0, sg=None, next_wr=None):
        # no SGEs is a receive of nothing: what a WRITE_WITH_IMM's notification or an empty SEND consumes
        self._all_sges = _copy_sges(sg, num_sge) if num_sge > 0 and sg is not None else ()
        self.num_sge, self.wr_id = num_sge, c_unsigned(wr_id, 64, "uint64_t")
        if next_wr is not None and type(next_wr) is not RecvWR:   # (pyverbs' `RecvWR next_wr=None`)
            typed(next_wr, RecvWR, "next_wr")
        self._next = next_wr

    def __str__(self):
        return field_lines((("WR ID", self.wr_id), ("Num SGE", self.num_sge)))


class SendWR(_WR):
    __slots__ = ("wr_id", "opcode", "imm_data", "send_flags",
                 "_remote_addr", "_rkey", "_compare_add", "_swap",   # an RDMA or atomic's target (set_wr_rdma, ...)
                 "_ah", "_remote_qpn", "_remote_qkey",        # a UD send's destination (set_wr_ud)
                 "_bind_mw", "_bind_info", "_mw_rkey",        # a BIND_MW's window (set_bind_wr; _rkey: its new key)
                 "_inline_data")                              # the bytes of an inline send, read when posted

    def __init__(self, wr_id=0, opcode=IBV_WR_SEND, num_sge=0, imm_data=0, sg=None,
                 send_flags=IBV_SEND_SIGNALED, next_wr=None):
        no_data = opcode in (IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV)
        self._all_sges = () if no_data and (num_sge < 1 or sg is None) else _copy_sges(sg, num_sge)
        self.wr_id, self.opcode, self.num_sge = c_unsigned(wr_id, 64, "uint64_t"), opcode, num_sge
        self.imm_data, self.send_flags = c_unsigned(imm_data, 32, "__be32"), send_flags
        if next_wr is not None and type(next_wr) is not SendWR:   # (pyverbs' `SendWR next_wr=None`)
            typed(next_wr, SendWR, "next_wr")
        self._next = next_wr
        self._remote_addr = self._rkey = self._compare_add = self._swap = self._remote_qpn = self._remote_qkey = 0
        self._ah = self._bind_mw = self._bind_info = self._mw_rkey = self._inline_data = None

    def __str__(self):
        # pyverbs' printout, bracket slip included: the Imm Data line is part of the send flags' value, so
        # it follows them on their line, and the printout ends with an empty line
        return field_lines((("WR ID", self.wr_id), ("Num SGE", self.num_sge), ("Opcode", int(self.opcode)),
                            ("Send flags", send_flags_to_str(self.send_flags) +
                             field_lines((("Imm Data", self.imm_data),)))))

    def set_wr_rdma(self, rkey, addr):
        """Target of RDMA WRITE/READ: the peer's rkey and an address inside its MR."""
        self._rkey, self._remote_addr = c_uint32(rkey), c_unsigned(addr, 64, "uint64_t")

    def set_wr_ud(self, ah, rqpn, rqkey):
        """Where a UD send goes: an address handle, the destination QP's number and its Q_Key."""
        from .addr import AH
        self._ah, self._remote_qpn, self._remote_qkey = typed(ah, AH, "ah", none=False), rqpn, rqkey

    def set_bind_wr(self, mw, bind_info):
        """Make this a BIND_MW WR (type 2 windows): bind `mw` as `bind_info` says, under a new key, wr.rkey:
        the window's key with its low byte incremented (ibv_inc_rkey). The NIC checks that the window
        still has the key libibverbs knows (mw.rkey, kept as _mw_rkey)."""
        from .mr import MW, MWBindInfo
        typed(mw, MW, "mw", none=False), typed(bind_info, MWBindInfo, "bind_info", none=False)
        self._bind_mw, self._bind_info, self._mw_rkey, self._rkey = mw, bind_info, mw.rkey, inc_rkey(mw.rkey)

    def set_wr_atomic(self, rkey, addr, compare_add, swap=0):
        """Target of an atomic: an 8-byte aligned word in the peer's MR."""
        self._rkey, self._remote_addr = c_uint32(rkey), c_unsigned(addr, 64, "uint64_t")
        self._compare_add, self._swap = c_unsigned(compare_add, 64, "uint64_t"), c_unsigned(swap, 64, "uint64_t")

    @readonly
    def rkey(self):
        """A BIND_MW's new key, read-only (pyverbs' rkey is the bind's: the key given to set_wr_rdma or
        set_wr_atomic is not readable there, and reads 0 here too)."""
        return self._rkey if self._bind_mw is not None else 0

    def _sg_list_unreadable(self):   # (pyverbs' sg_list has a setter only)
        raise AttributeError(f"attribute 'sg_list' of '{pyverbs_name(type(self))}' objects is not readable")

    def _set_sg_list(self, sge):
        sge = typed(sge, SGE, "val", none=False)
        self._all_sges = ((sge.addr, sge.length, sge.lkey),)
        self.num_sge = 1

    sg_list = property(_sg_list_unreadable, _set_sg_list, doc="The WR's one SGE (write-only, as in pyverbs)")


def send_flags_to_str(flags):
    return flags_to_str(flags, {1: "IBV_SEND_FENCE", 2: "IBV_SEND_SIGNALED", 4: "IBV_SEND_SOLICITED",
                                8: "IBV_SEND_INLINE", 16: "IBV_SEND_IP_CSUM"})


def fill_from(target, wr):
    """pyverbs' bad_wr: the WR object a program gave is filled with the one that failed."""
    for cls in type(wr).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(wr, name):
                setattr(target, name, getattr(wr, name))
