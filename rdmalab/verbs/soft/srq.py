"""Shared receive queues (pyverbs.srq): one queue of receives that several QPs consume.

SRQ(pd, SrqInitAttr(SrqAttr(max_wr, max_sge, srq_limit))) makes a ring of receive slots in a shared
segment, `rdmalab-srq-<n>`, laid out as a QP's receive queue (layout.R_*). Its owner posts into it;
the NIC of whichever process sends to a QP on it takes the next receive (under a record lock on the
segment, so that two senders never take the same one) and moves it into that QP's own receive queue,
where the message lands and completes as on any QP: on the QP's CQ, with its qp_num. No receive
left: the sender gets an RNR NAK and retries.

What rxe (Linux 6.1) does, this does: max_wr is rounded up to a power of two less one, a QP on an SRQ
refuses post_recv, the queue may grow (modify with IBV_SRQ_MAX_WR), and a limit armed with IBV_SRQ_LIMIT
raises IBV_EVENT_SRQ_LIMIT_REACHED (ctx.get_async_event()) once, when taking a receive leaves fewer
than the limit posted; the limit is then 0 (disarmed) again.
"""
import errno
import fcntl
import random
from errno import EINVAL, ENOMEM

from . import shm
from .base import Fixed, Record, Resource, not_supported, readonly, typed
from .device import Context
from .hardware import DEVICE_ATTR
from .layout import R_NUM_SGE, R_SGES, R_WR_ID, S_ALIVE, S_EVENTS, S_LIMIT, S_MAX_SGE, S_POSTED, S_SIZE, S_TAKEN
from .libibverbs_enums import IBV_WR_TAG_ADD, IBV_OPS_SIGNALED, ibv_ops_wr_opcode, ibv_srq_type
from .constants import IBV_SRQ_LIMIT, IBV_SRQ_MAX_WR, IBV_SRQT_BASIC
from .pd import PD
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .pyverbs_generation import returns
from .wr import RecvWR, fill_from

LOCAL = {}       # number -> Ring of this process's SRQs
_attached = {}   # number -> Ring of another process's SRQ


class SrqAttr(Record):
    _fields = dict(max_wr=100, max_sge=1, srq_limit=0)


class SrqInitAttr(Fixed):
    """ibv_srq_init_attr: the SrqAttr's values, copied (read-only, as in pyverbs). Without an SrqAttr,
    soft0 takes SrqAttr()'s (pyverbs leaves them 0, and creating an SRQ of max_wr 0 fails)."""
    max_wr, max_sge, srq_limit = readonly("_max_wr"), readonly("_max_sge"), readonly("_srq_limit")

    def __init__(self, attr=None):
        attr = typed(attr, SrqAttr, "attr") or SrqAttr()
        self._max_wr, self._max_sge, self._srq_limit = attr.max_wr, attr.max_sge, attr.srq_limit


class SrqInitAttrEx(Record):
    _fields = dict(max_wr=100, max_sge=1, srq_limit=0, comp_mask=0, srq_type=0, pd=None, xrcd=None,
                   max_num_tags=0, max_ops=0, cq=None)


class OpsWr(Record):
    _fields = dict(wr_id=0, opcode=IBV_WR_TAG_ADD, flags=IBV_OPS_SIGNALED, next_wr=None, unexpected_cnt=0,
                   recv_wr_id=0, num_sge=None, tag=0, mask=0, sg_list=None)


# what pyverbs >= 59 returns as enum members (pyverbs_generation.py)
returns(SrqInitAttrEx, srq_type=ibv_srq_type)
returns(OpsWr, opcode=ibv_ops_wr_opcode)


class Ring:
    """An SRQ's slots as a NIC reaches them, in its owner's process or a sender's: post() is the owner's,
    take() the NIC's."""

    def __init__(self, seg):
        h = seg.header
        self.segment, self.header = seg, h
        self.size, self.stride = int(h[S_SIZE]), R_SGES + 3 * int(h[S_MAX_SGE])
        self.words = seg.bytes[:self.size * self.stride * 8].cast("Q")

    @staticmethod
    def create(number, size, max_sge, limit=0, events=0):
        room = size * (R_SGES + 3 * max_sge) * 8
        try:
            seg = shm.Segment.create(f"srq-{number:06x}", room)
        except OSError as error:   # a real device says ENOMEM when it has no room for the queue
            if error.errno != errno.ENOSPC:
                raise
            raise PyverbsRDMAError(f"Failed to create SRQ: {shm.no_room(room)}", ENOMEM) from None
        h = seg.header
        h[S_SIZE], h[S_MAX_SGE], h[S_LIMIT], h[S_EVENTS] = size, max_sge, limit, events
        h[S_ALIVE] = 1
        return Ring(seg)

    def count(self):
        """Receives posted and not taken yet."""
        return self.header[S_POSTED] - self.header[S_TAKEN]

    def next_receive(self):
        """The number of the receive a NIC takes next: it lies at slot(n), as a QP's receives do."""
        return int(self.header[S_TAKEN])

    def slot(self, n):
        return n % self.size * self.stride

    def post(self, wr_id, sges):
        """Queue one receive; False if the ring is full."""
        h = self.header
        posted = h[S_POSTED]
        if posted - h[S_TAKEN] >= self.size:
            return False
        w, base = self.words, posted % self.size * self.stride
        w[base + R_WR_ID], w[base + R_NUM_SGE] = wr_id, len(sges)
        for addr, length, lkey in sges:
            w[base + R_SGES], w[base + R_SGES + 1], w[base + R_SGES + 2] = addr, length, lkey
            base += 3
        h[S_POSTED] = posted + 1   # publish last: a NIC takes up to here
        return True

    def take(self, rq):
        """The NIC of a QP on this SRQ takes the next receive into the QP's receive queue `rq`; False if
        there is none (or `rq` has no room for one more completion). Taking it may raise the limit event."""
        h = self.header
        fcntl.lockf(self.segment.fd, fcntl.LOCK_EX, 8, 8 * S_TAKEN)   # against the NICs of other processes
        try:
            taken = h[S_TAKEN]
            if not h[S_ALIVE] or taken == h[S_POSTED] or rq.full():
                return False
            w, base = self.words, self.slot(taken)
            sges = [tuple(w[base + R_SGES + 3 * i:base + R_SGES + 3 * i + 3]) for i in range(w[base + R_NUM_SGE])]
            rq.post(w[base + R_WR_ID], sges)
            h[S_TAKEN] = taken + 1
            if h[S_LIMIT] and h[S_POSTED] - taken - 1 < h[S_LIMIT]:
                h[S_LIMIT] = 0   # one event per arming
                h[S_EVENTS] += 1
                self.segment.ring()
            return True
        finally:
            fcntl.lockf(self.segment.fd, fcntl.LOCK_UN, 8, 8 * S_TAKEN)

    def outstanding(self):
        """(wr_id, sges) of every receive posted and not taken, oldest first."""
        w, h, out = self.words, self.header, []
        for n in range(h[S_TAKEN], h[S_POSTED]):
            base = n % self.size * self.stride
            out.append((w[base + R_WR_ID], [tuple(w[base + R_SGES + 3 * i:base + R_SGES + 3 * i + 3])
                                             for i in range(w[base + R_NUM_SGE])]))
        return out

    def close(self):
        self.words.release()
        self.header = None
        self.segment.close()


def find(number):
    """The ring of SRQ `number`, this process's or a peer's; None if no SRQ of that number is alive."""
    ring = LOCAL.get(number) or _attached.get(number)
    if ring is not None and ring.header is not None and ring.header[S_ALIVE]:
        return ring
    if ring is not None and number in _attached:
        del _attached[number]
        ring.close()
    seg = shm.Segment.attach(f"srq-{number:06x}") if number else None
    if seg is None or not seg.header[S_ALIVE]:
        return None
    ring = _attached[number] = Ring(seg)
    return ring


def _capacity(max_wr):
    """rxe rounds a queue up to a power of two and keeps one slot empty: 16 -> 31, 7 -> 7."""
    return (1 << max_wr.bit_length()) - 1


class SRQ(Resource):
    """SRQ(pd, SrqInitAttr(...)), or SRQ(ctx, SrqInitAttrEx(...)) of the basic type with its PD: QPs made with
    QPInitAttr(srq=...) take their receives from it."""

    def __init__(self, creator, attr):
        super().__init__()
        typed(creator, object, "creator", none=False), typed(attr, object, "attr", none=False)
        if isinstance(creator, Context) and isinstance(attr, SrqInitAttrEx):   # ibv_create_srq_ex
            if attr.srq_type != IBV_SRQT_BASIC or attr.pd is None:
                raise not_supported("XRC and tag-matching SRQs")
            creator = attr.pd
        if not isinstance(creator, PD):
            raise PyverbsUserError("The emulated NIC creates an SRQ from a PD: SRQ(pd, SrqInitAttr(SrqAttr(...)))")
        creator.check_open()
        if not 1 <= attr.max_wr <= DEVICE_ATTR["max_srq_wr"] or not attr.max_sge <= DEVICE_ATTR["max_srq_sge"]:
            raise PyverbsRDMAError(f"Failed to create SRQ: max_wr {attr.max_wr} and max_sge {attr.max_sge} must "
                                   f"lie in 1..{DEVICE_ATTR['max_srq_wr']} and 0..{DEVICE_ATTR['max_srq_sge']}", EINVAL)
        self._pd, self._ctx, self._max_sge = creator, creator._ctx, max(attr.max_sge, 1)
        while True:
            self._number = random.randrange(1, 1 << 24)
            try:
                self._ring = Ring.create(self._number, _capacity(attr.max_wr), self._max_sge, attr.srq_limit)
                break
            except FileExistsError:
                continue
        LOCAL[self._number] = self._ring
        self._events_taken = 0
        self._ctx._srqs.add(self)
        self._depend_on(creator)

    def post_recv(self, wr, bad_wr=None):
        """Post a chain of receive WRs: ENOMEM when full, else EINVAL for one with more SGEs than max_sge
        (rxe checks in that order)."""
        self.check_open()
        typed(wr, RecvWR, "wr", none=False), typed(bad_wr, RecvWR, "bad_wr")
        while wr is not None:
            ring = self._ring
            error = ENOMEM if ring.count() >= ring.size else EINVAL if len(wr._sges) > self._max_sge else 0
            if error:
                if bad_wr is not None:
                    fill_from(bad_wr, wr)
                raise PyverbsRDMAError("Failed to post receive to SRQ.", error)
            ring.post(wr.wr_id, wr._sges)
            wr = wr._next

    def query(self):
        self.check_open()
        return SrqAttr(max_wr=self._ring.size, max_sge=self._max_sge, srq_limit=int(self._ring.header[S_LIMIT]))

    def modify(self, attr, comp_mask):
        """IBV_SRQ_MAX_WR resizes the queue (rounded as at creation), not below the armed limit nor the
        receives it holds; IBV_SRQ_LIMIT arms the limit event, at most max_wr. Anything else is EINVAL."""
        self.check_open()
        typed(attr, SrqAttr, "attr")
        ring, limit = self._ring, self._ring.header[S_LIMIT]
        if comp_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) \
                or comp_mask & IBV_SRQ_MAX_WR and (not 1 <= attr.max_wr <= DEVICE_ATTR["max_srq_wr"]
                                                  or attr.max_wr < limit or _capacity(attr.max_wr) < ring.count()) \
                or comp_mask & IBV_SRQ_LIMIT and attr.srq_limit > ring.size:
            raise PyverbsRDMAError("Failed to modify SRQ", EINVAL)
        if comp_mask & IBV_SRQ_MAX_WR:
            self._resize(_capacity(attr.max_wr))
        if comp_mask & IBV_SRQ_LIMIT:
            self._ring.header[S_LIMIT] = attr.srq_limit

    def _resize(self, size):
        """A new ring under the same name, holding what the old one held. A sender that looks while there
        is none gets an RNR NAK and retries, as when the queue is empty."""
        old = self._ring
        fcntl.lockf(old.segment.fd, fcntl.LOCK_EX, 8, 8 * S_TAKEN)
        old.header[S_ALIVE] = 0   # no NIC takes from it any more
        fcntl.lockf(old.segment.fd, fcntl.LOCK_UN, 8, 8 * S_TAKEN)
        waiting, limit, events = old.outstanding(), old.header[S_LIMIT], old.header[S_EVENTS]
        old.close()
        self._ring = LOCAL[self._number] = Ring.create(self._number, size, self._max_sge, limit, events)
        for wr_id, sges in waiting:
            self._ring.post(wr_id, sges)

    def get_srq_num(self):
        """An XRC SRQ's number: rxe has no XRC, and libibverbs answers EOPNOTSUPP for a basic SRQ."""
        self.check_open()
        raise not_supported("SRQ numbers (ibv_get_srq_num, for XRC SRQs)")

    def post_srq_ops(self, wr, bad_wr=None):
        raise not_supported("Tag matching (ibv_post_srq_ops)")

    def _take_event(self):
        """For the context: True (once) for each limit event raised and not handed out yet."""
        if self._closed or self._ring.header[S_EVENTS] <= self._events_taken:
            return False
        self._events_taken += 1
        return True

    def _release(self):
        LOCAL.pop(self._number, None)
        self._ctx._srqs.discard(self)
        self._ring.header[S_ALIVE] = 0
        self._ring.close()



