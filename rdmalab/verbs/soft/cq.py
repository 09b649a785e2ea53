"""Completion queues, completion channels and work completions.

A CQ gathers two kinds of completions:
- send completions, which this process's NIC work produced (a deque, never shared);
- receive completions, which a peer's NIC work wrote into the receive queues of this CQ's QPs
  (shared memory); poll() reads them in order, queue by queue.
poll() also gives the send queues waiting on an RNR timer or an ACK timeout their chance to retry,
as a driver's completion path does.

Each CQ also has a small shared segment, `rdmalab-cq-<id>`, which a peer's NIC reaches through the
receiving QP: it rings the segment's bell when a receive completes (waking a poller that sleeps,
rdmalab.proc.waiting), and raises a completion event when the CQ is armed (req_notify): the event goes
to the CQ's completion channel, where get_cq_event() is waiting for it.
"""
import random
import time
from collections import deque
from errno import EBADF, EINTR, EINVAL

from rdmalab.proc.procstat import pid_alive

from . import shm
from .constants import IBV_EVENT_CQ_ERR
from .layout import C_ALIVE, C_ARMED, C_CHANNEL, C_EVENT_AT, C_EVENTS, W_OWNER_PID, W_SLEEPERS
from .base import Record, Resource, readonly, typed
from .device import Context
from .hardware import DEVICE_ATTR
from .pyverbs_error import PyverbsRDMAError
from .libibverbs_enums import ibv_create_cq_wc_flags, ibv_wc_opcode, ibv_wc_status
from . import pyverbs_generation
from .pyverbs_generation import returned
from .utils import field_lines, flags_to_str

NOT_ARMED, NEXT_COMPLETION, SOLICITED_ONLY = 0, 1, 2

LOCAL_SEGMENTS = {}   # segment name -> Segment of this process's CQs and channels
_attached = {}        # segment name -> Segment of another process's CQ or channel


def forget_the_dead():
    """Drop, and unmap, the peers' CQs and channels this process attached whose owner has died."""
    for name, seg in list(_attached.items()):
        if seg.header is not None and not pid_alive(int(seg.header[W_OWNER_PID])):
            del _attached[name]
            seg.close()


class WC:
    """One work completion, with pyverbs' attribute names. status and opcode are ints, or members of
    ibv_wc_status and ibv_wc_opcode in a program of pyverbs >= 59 (pyverbs_generation.py): converted as
    the WC is made, which is what poll() pays for once per completion (a value set later stays as set)."""
    __slots__ = ("wr_id", "status", "opcode", "vendor_err", "byte_len", "qp_num", "src_qp", "imm_data",
                 "wc_flags", "pkey_index", "slid", "sl", "dlid_path_bits")

    def __init__(self, wr_id=0, status=0, opcode=0, vendor_err=0, byte_len=0, qp_num=0, src_qp=0, imm_data=0,
                 wc_flags=0, pkey_index=0, slid=0, sl=0, dlid_path_bits=0):
        status, opcode = returned(ibv_wc_status, status), returned(ibv_wc_opcode, opcode)
        self.wr_id, self.status, self.opcode, self.vendor_err, self.byte_len = wr_id, status, opcode, vendor_err, byte_len
        self.qp_num, self.src_qp, self.imm_data, self.wc_flags = qp_num, src_qp, imm_data, wc_flags
        self.pkey_index, self.slid, self.sl, self.dlid_path_bits = pkey_index, slid, sl, dlid_path_bits

    def __repr__(self):
        return (f"WC(wr_id={self.wr_id}, status={self.status} ({cqe_status_to_str(self.status)}), "
                f"opcode={self.opcode} ({cqe_opcode_to_str(self.opcode)}), byte_len={self.byte_len}, "
                f"qp_num={self.qp_num}, imm_data={self.imm_data}, wc_flags={self.wc_flags})")

    def __str__(self):
        return field_lines((
            ("WR ID", self.wr_id), ("status", cqe_status_to_str(self.status)),
            ("opcode", cqe_opcode_to_str(self.opcode)), ("vendor error", self.vendor_err),
            ("byte length", self.byte_len), ("QP num", self.qp_num), ("source QP", self.src_qp),
            ("WC flags", cqe_flags_to_str(self.wc_flags)), ("pkey index", self.pkey_index), ("slid", self.slid),
            ("sl", self.sl), ("imm_data", self.imm_data), ("dlid path bits", self.dlid_path_bits)))


# pyverbs.cq's names for a completion's status, opcode and flags (ibv_wc_status, ibv_wc_opcode, ibv_wc_flags)
CQE_STATUS_NAMES = dict(enumerate((
    "success", "local length error", "local QP op error", "local EEC op error", "local protection error",
    "WR flush error", "memory window bind error", "bad response error", "local access error",
    "remote invalidate request error", "remote access error", "remote op error", "retry exceeded error",
    "RNR retry exceeded", "local RDD violation error", "remote invalidate RD request error", "remote abort error",
    "invalidate EECN error", "invalidate EEC state error", "WC fatal error", "response timeout error",
    "general error")))
CQE_OPCODE_NAMES = {
    0x0: "Send", 0x1: "RDMA write", 0x2: "RDMA read", 0x3: "Compare and swap", 0x4: "Fetch and add",
    0x5: "Bind Memory window", 0x6: "Local invalidate", 0x7: "TSO", 0x80: "Receive",
    0x81: "Receive RDMA with immediate", 0x82: "Tag matching - add", 0x83: "Tag matching - delete",
    0x84: "Tag matching - sync", 0x85: "Tag matching - receive", 0x86: "Tag matching - no tag", 0x87: "Driver WR"}
CQE_FLAG_NAMES = {1: "GRH", 2: "With immediate", 4: "IP csum OK", 8: "With invalidate", 16: "TM sync request",
                  32: "TM match", 64: "TM data valid"}
CREATE_WC_FLAG_NAMES = {int(flag): name for name, flag in ibv_create_cq_wc_flags.__members__.items()
                        if name != "IBV_WC_EX_WITH_TM_INFO"}   # (pyverbs names all but this one)


def cqe_status_to_str(status):
    """A completion's status in words: 10 (IBV_WC_REM_ACCESS_ERR) is "remote access error"."""
    return CQE_STATUS_NAMES.get(status, "Unknown CQE status")


def cqe_opcode_to_str(opcode):
    return CQE_OPCODE_NAMES.get(opcode, f"Unknown CQE opcode {opcode}")


def cqe_flags_to_str(flags):
    return flags_to_str(flags, CQE_FLAG_NAMES)


def create_wc_flags_to_str(flags):
    return flags_to_str(flags, CREATE_WC_FLAG_NAMES)


_STATUS, _OPCODE = {}, {}   # {value: member} while the program is of pyverbs >= 59, else empty


@pyverbs_generation.when_decided
def _completions_of(generation):
    _STATUS.clear()
    _OPCODE.clear()
    if generation == pyverbs_generation.NEW:
        _STATUS.update(pyverbs_generation.members(ibv_wc_status))
        _OPCODE.update(pyverbs_generation.members(ibv_wc_opcode))


def new_wc(wr_id, status, opcode, byte_len, qp_num, imm_data, wc_flags, src_qp=0, _new=object.__new__,
           _status=_STATUS, _opcode=_OPCODE):
    """A WC as poll() returns it, made without __init__'s keyword handling: polling is a hot path."""
    wc = _new(WC)
    if _status:   # pyverbs >= 59: members, from the prebuilt tables
        try:
            status, opcode = _status[status], _opcode[opcode]
        except KeyError:
            status, opcode = returned(ibv_wc_status, status), returned(ibv_wc_opcode, opcode)
    wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num, wc.imm_data, wc.wc_flags, wc.src_qp = \
        wr_id, status, opcode, byte_len, qp_num, imm_data, wc_flags, src_qp
    wc.vendor_err = wc.pkey_index = wc.slid = wc.sl = wc.dlid_path_bits = 0
    return wc


def _new_segment(kind):
    while True:
        number = random.getrandbits(31) or 1
        try:
            seg = shm.Segment.create(f"{kind}-{number:08x}", 0)
        except FileExistsError:
            continue
        seg.header[C_ALIVE] = 1
        LOCAL_SEGMENTS[f"{kind}-{number:08x}"] = seg
        return seg, number


def find_segment(kind, number):
    """A CQ's or channel's segment by number, this process's or a peer's; None if none is alive."""
    name = f"{kind}-{number:08x}"
    seg = LOCAL_SEGMENTS.get(name) or _attached.get(name)
    if seg is not None and seg.header is not None and seg.header[C_ALIVE]:
        return seg
    if seg is not None and name in _attached:
        del _attached[name]
        seg.close()
    seg = shm.Segment.attach(name) if number else None
    if seg is None or not seg.header[C_ALIVE]:
        return None
    _attached[name] = seg
    return seg


def announce(cq_number, solicited=False):
    """A NIC put a completion in CQ `cq_number` (which may live in another process): wake its poller
    if one sleeps, and raise a completion event if the CQ is armed for it."""
    seg = find_segment("cq", cq_number)
    if seg is not None:
        announce_to(seg, solicited)


def announce_to(seg, solicited=False):
    """announce() to a CQ segment already found."""
    h = seg.header
    armed = h[C_ARMED]
    if armed and (armed == NEXT_COMPLETION or solicited):
        h[C_ARMED] = NOT_ARMED   # one event per req_notify, as on every device
        h[C_EVENT_AT] = time.monotonic_ns()
        h[C_EVENTS] += 1
        channel = find_segment("ch", h[C_CHANNEL])
        if channel is not None:
            channel.ring()
    seg.ring()


class CompChannel(Resource):
    """Where completion events arrive: get_cq_event() blocks until one of its CQs has one."""

    def __init__(self, context):
        super().__init__()
        typed(context, Context, "context", none=False).check_open()
        self._context = context
        self._segment, self._number = _new_segment("ch")
        self._cqs = []
        self._depend_on(context)

    def get_cq_event(self, expected_cq):
        """Wait for the next completion event, as long as it takes (a blocking read of the channel, as
        ibv_get_cq_event does; a signal ends it with errno 4, EINTR). The event counts as
        unacknowledged on its CQ until expected_cq.ack_events()."""
        from rdmalab.proc import waiting
        with waiting.signal_pipe() as signalled:   # (first: a signal between two sleeps ends the wait too)
            self.check_open()
            bell = self._segment.bell
            while True:
                cq = self._next_event()
                if cq is not None:
                    break
                due = self._tend()
                if waiting.signalled(signalled):
                    raise PyverbsRDMAError("Failed to get CQ event", EINTR)
                if not waiting.futex_works():   # naps, which a signal ends as it ends the real blocking read
                    if waiting.nap(0.001) == EINTR:
                        raise PyverbsRDMAError("Failed to get CQ event", EINTR)
                    continue
                token = bell.arm()
                try:
                    if self._next_event(peek=True) is None and bell.sleep(token, due) == EINTR:
                        raise PyverbsRDMAError("Failed to get CQ event", EINTR)
                finally:
                    bell.disarm()
        cq._unacked_events += 1
        if cq is not expected_cq:
            raise PyverbsRDMAError("Received event on an unexpected CQ", 0)

    def _tend(self):
        """Run what a NIC's own timers would while the program sleeps here, as poll() does: the retries
        of send queues that wait (after an RNR NAK, or for an ACK) and, on the udp link, the NIC's news
        (completions, or that it died: its QPs' work then fails, which raises the event). Returns how
        long to sleep at most before tending them again."""
        from rdmalab.proc import waiting
        now, due = time.monotonic(), waiting.SLEEP_CHUNK_S
        for cq in self._cqs:
            cq.tend()
            retry = cq.next_timer()
            if retry is not None:
                due = min(due, max(retry - now, 0))
        return due

    def _next_event(self, peek=False):
        """Take (or just see) the CQ of this channel whose event not yet handed out came first: events leave a
        channel in the order they were raised, as they queue in the kernel's channel (a SEND's receive CQ
        before its send CQ, whose completion waits for the ACK), not in the order the CQs were made."""
        if self._closed:
            raise PyverbsRDMAError("Failed to get CQ event: the completion channel was closed", EBADF)
        pending = [cq for cq in self._cqs if cq.take_event(peek=True)]
        if not pending:
            return None
        first = min(pending, key=lambda cq: cq._segment.header[C_EVENT_AT])
        return first if peek or first.take_event() else None

    def _release(self):
        self._segment.header[C_ALIVE] = 0
        self._segment.ring()   # a thread blocked in get_cq_event wakes and sees the channel closed
        LOCAL_SEGMENTS.pop(f"ch-{self._number:08x}", None)
        self._segment.close()


class CQ(Resource):
    """A completion queue. pyverbs' names: cqe and comp_channel (read-only), poll(), req_notify(),
    ack_events(), resize(). The NIC's side (push, watch_receives, tend, ...) is soft0's own."""
    cqe = readonly("_cqe")

    def __init__(self, context, cqe, cq_context=None, channel=None, comp_vector=0):
        super().__init__()
        typed(context, Context, "context", none=False).check_open()
        typed(channel, CompChannel, "channel")
        if isinstance(cqe, float):   # the C call takes an int: pyverbs passes max_cqe / 2 through so
            cqe = int(cqe)
        if not 1 <= cqe <= DEVICE_ATTR["max_cqe"] or not 0 <= comp_vector < context.num_comp_vectors:
            raise PyverbsRDMAError("Failed to create a CQ", EINVAL)
        if channel is not None and channel._context is not context:
            raise PyverbsRDMAError("Failed to create a CQ", EBADF)   # the kernel finds no such channel here
        self._cqe = (1 << cqe.bit_length()) - 1   # rxe rounds the ring up to a power of two, less one slot
        self._context = context
        self._completions = deque()  # (wr_id, status, opcode, byte_len, qp_num, imm_data, wc_flags)
        self._receive_queues = []    # of the QPs whose receives complete here: poll() reads them
        self._timed = set()          # send queues that wait for an RNR or ACK timer
        self._nics = set()           # on the udp link, the NIC processes this CQ's receives come through
        self._segment, self._number = _new_segment("cq")
        self._events_taken = 0       # events its channel's get_cq_event() has handed out
        self._unacked_events = 0
        self._channel = channel
        if channel is not None:
            channel.check_open()
            self._segment.header[C_CHANNEL] = channel._number
            channel._cqs.append(self)
            self._depend_on(channel)
        self._bell = _PollerBell(self, self._segment.bell)   # what rdmalab.proc.waiting sleeps on
        self._depend_on(context)

    # ------------------------------------------------------------ what the NIC and QPs call

    def push(self, wr_id, status, opcode, byte_len, qp_num, imm_data=0, wc_flags=0):
        """The NIC completed one of our send WRs: queue its completion, if the CQ has room for it. As rxe
        does, a completion that does not fit is dropped and raises IBV_EVENT_CQ_ERR on the context; the
        QP goes on. (Receive completions, which a peer's NIC writes, are not counted against it here.)"""
        if len(self._completions) + sum(rq.waiting() for rq in self._receive_queues) >= self._cqe:
            self._context.raise_async_event(IBV_EVENT_CQ_ERR)
            return
        self._completions.append((wr_id, status, opcode, byte_len, qp_num, imm_data, wc_flags))
        h = self._segment.header
        if h[C_ARMED] or h[W_SLEEPERS]:
            announce_to(self._segment)

    def watch_receives(self, receive_queue):
        """A QP's receives complete here: poll() harvests this receive queue."""
        self._receive_queues.append(receive_queue)

    def watch_nic(self, nic):
        """A QP whose receives complete here lives on the udp link's NIC process `nic`: poll() (and a
        channel's get_cq_event) look now and then (nic.check_alive) whether it died, so that a QP that
        only receives learns it too: its QP enters ERR and its receives are flushed."""
        self._nics.add(nic)

    def forget_receives(self, receive_queue):
        if receive_queue in self._receive_queues:
            self._receive_queues.remove(receive_queue)

    def wait_for_timer(self, send_queue, waiting=True):
        """A send queue waits for a timer (True) or no longer does (False): poll() drives its retries."""
        (self._timed.add if waiting else self._timed.discard)(send_queue)

    def tend(self):
        """Run what a NIC's own timers would, as poll() and a sleeping channel do: the retries of send
        queues that wait (after an RNR NAK, or for an ACK), and on the udp link whether a NIC died."""
        for sq in list(self._timed):
            sq.progress()
        for nic in self._nics:
            nic.check_alive()

    def next_timer(self):
        """When the earliest waiting send queue wants to retry (monotonic seconds), or None."""
        deadlines = [sq.next_retry() for sq in self._timed]
        return min((d for d in deadlines if d), default=None)

    def take_event(self, peek=False):
        """For the channel: True if an event raised on this CQ has not been handed out yet (and, unless
        peek, hand it out now)."""
        if self._segment.header[C_EVENTS] <= self._events_taken:
            return False
        if not peek:
            self._events_taken += 1
        return True

    # ------------------------------------------------------------ pyverbs' API

    def poll(self, num_entries=1):
        """Returns (number polled, [WC, ...]), at most num_entries, without waiting."""
        if self._closed:
            self.check_open()
        if self._timed or self._nics:
            self.tend()
        wcs = []
        local = self._completions
        while local and len(wcs) < num_entries:
            wcs.append(new_wc(*local.popleft()))
        for rq in self._receive_queues:
            if len(wcs) >= num_entries:
                break
            rq.harvest(wcs, num_entries)
        return len(wcs), wcs

    def resize(self, cqe):
        """Change the CQ's capacity, rounded as at creation. It may not shrink below the completions it
        holds (errno 22), nor grow past the device's max_cqe."""
        self.check_open()
        if isinstance(cqe, float):
            cqe = int(cqe)
        held = entries(self)
        if not 1 <= cqe <= DEVICE_ATTR["max_cqe"] or cqe < held:
            raise PyverbsRDMAError("Failed to resize CQ", EINVAL)
        self._cqe = (1 << cqe.bit_length()) - 1

    @readonly
    def comp_channel(self):
        """The completion channel given at creation, or None."""
        return self._channel

    def req_notify(self, solicited_only=False):
        """Arm the CQ: the next completion (solicited_only: the next solicited receive) raises one
        event on the CQ's channel."""
        self.check_open()
        if self._timed or self._nics:   # what the NIC has completed already is in the CQ, not "next" (udp link)
            self.tend()
        self._segment.header[C_ARMED] = SOLICITED_ONLY if solicited_only else NEXT_COMPLETION

    def ack_events(self, num_events):
        """Acknowledge events get_cq_event() returned (libibverbs takes any count without checking)."""
        self.check_open()
        self._unacked_events -= num_events

    def _release(self):
        self._segment.header[C_ALIVE] = 0
        if self._channel is not None and self in self._channel._cqs:
            self._channel._cqs.remove(self)
        LOCAL_SEGMENTS.pop(f"cq-{self._number:08x}", None)
        self._completions.clear()
        self._receive_queues.clear()
        self._timed.clear()
        self._segment.close()

    def __str__(self):
        return "CQ\n" + field_lines((("Handle", self._number), ("CQEs", self._cqe)))


class _PollerBell:
    """rdmalab.proc.waiting.until's bell for a CQ: sleep until a receive lands or the next retry is due."""

    def __init__(self, cq, segment_bell):
        self.cq, self.segment_bell = cq, segment_bell

    def arm(self):
        return self.segment_bell.arm()

    def sleep(self, token, seconds):
        due = self.cq.next_timer()
        if due is not None:
            seconds = min(seconds, max(due - time.monotonic(), 0))
        return self.segment_bell.sleep(token, seconds)

    def disarm(self):
        self.segment_bell.disarm()


class CqInitAttrEx(Record):
    """ibv_cq_init_attr_ex: for CQEX (extended CQs)."""
    _fields = dict(cqe=100, channel=None, comp_vector=0, wc_flags=0, comp_mask=0, flags=0, parent_domain=None)

    @property
    def comp_channel(self):   # pyverbs' name for the channel
        return self.channel

    @comp_channel.setter
    def comp_channel(self, channel):
        self.channel = channel

    def __str__(self):
        return field_lines((("Number of CQEs", self.cqe), ("WC flags", create_wc_flags_to_str(self.wc_flags)),
                            ("comp mask", self.comp_mask), ("flags", self.flags)))


class PollCqAttr(Record):
    _fields = dict(comp_mask=0)


class WcTmInfo(Record):
    _fields = dict(tag=0, priv=0)


from .cqex import CQEX  # noqa: E402,F401 (pyverbs.cq has it; CQEX extends CQ, defined above)


def entries(cq):
    """How many completions `cq` holds that no poll has taken yet: sends', and receives' from each QP's
    receive queue (the glass-box view; resize() may not shrink below it)."""
    return len(cq._completions) + sum(rq.waiting() for rq in cq._receive_queues)
