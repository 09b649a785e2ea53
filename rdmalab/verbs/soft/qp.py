"""Queue pairs: the RC state machine, posting, and the attributes pyverbs exposes.

A QP has two views of its state, as on a real device:
- `qp.qp_state` is libibverbs' cached copy, updated only by modify() and query();
- the device's own state (shared memory word Q_STATE), which an error moves to ERR at once.
So after a failed RDMA WRITE, `qp.qp_state` still says RTS until `qp.query()` reports ERR. rxe
behaves exactly so.

modify() follows the kernel's table (ib_modify_qp_is_ok): for each transition, the attributes that
must be in the mask and those that may; anything else, or an illegal jump, raises PyverbsRDMAError
with errno 22 and changes nothing.
"""
import random
from errno import EINVAL, ENODATA, ENOMEM, EPERM

from . import datagram, requester, responder, shm
from .addr import AHAttr, GlobalRoute, ah_attr_lines, route_hop_limit
from .base import PyverbsObject, Record, Resource, not_supported, readonly, typed
from .cq import CQ
from .hardware import DEVICE_ATTR, GIDS, GID_TABLE_LEN, LINK, PORT_ATTR
from .constants import (
    IBV_QP_ACCESS_FLAGS as ACCESS_FLAGS, IBV_QP_ALT_PATH as ALT_PATH, IBV_QP_AV as AV,
    IBV_QP_CUR_STATE as CUR_STATE, IBV_QP_DEST_QPN as DEST_QPN,
    IBV_QP_MAX_DEST_RD_ATOMIC as MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC as MAX_QP_RD_ATOMIC,
    IBV_QP_MIN_RNR_TIMER as MIN_RNR_TIMER, IBV_QP_PATH_MIG_STATE as PATH_MIG_STATE,
    IBV_QP_PATH_MTU as PATH_MTU, IBV_QP_PKEY_INDEX as PKEY_INDEX, IBV_QP_PORT as PORT, IBV_QP_QKEY as QKEY,
    IBV_QP_RETRY_CNT as RETRY_CNT, IBV_QP_RNR_RETRY as RNR_RETRY, IBV_QP_RQ_PSN as RQ_PSN,
    IBV_QP_SQ_PSN as SQ_PSN, IBV_QP_STATE as STATE, IBV_QP_TIMEOUT as TIMEOUT,
    IBV_QP_EN_SQD_ASYNC_NOTIFY as EN_SQD_ASYNC_NOTIFY,
    IBV_QPS_ERR as ERR, IBV_QPS_INIT as INIT, IBV_QPS_RESET as RESET, IBV_QPS_RTR as RTR,
    IBV_QPS_RTS as RTS, IBV_QPS_SQD as SQD, IBV_EVENT_SQ_DRAINED, IBV_MTU_256, IBV_MTU_1024, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_INLINE,
    IBV_ACCESS_ZERO_BASED, IBV_MW_TYPE_1, IBV_WR_BIND_MW,
    IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QP_INIT_ATTR_PD,
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
from .libibverbs_enums import ibv_mig_state, ibv_mtu, ibv_qp_state, ibv_qp_type
from .layout import (Q_ACCESS, Q_ALIVE, Q_EXPECTED_PSN, Q_MAX_DEST_RD_ATOMIC, Q_MIN_RNR_TIMER, Q_PD, Q_QKEY, Q_RECV_CQ,
                     Q_PATH_MTU, Q_RNR_WAITING, Q_RQ_MAX_SGE, Q_RQ_SIZE, Q_STATE, Q_TYPE, Q_NUM, Q_SRQ)
from .operations import ATOMICS, SEND_OPS
from .pd import PD
from rdmalab.wire.psn import MASK24
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .pyverbs_generation import returns
from .srq import SRQ
from .utils import (access_flags_to_str, field_lines, flags_to_str, mig_state_to_str, mtu_to_str, qp_state_to_str,
                    qp_type_to_str)
from .wr import RecvWR, SendWR, c_uint32, fill_from


# (current, next) -> (attributes that must be in the mask, attributes that may be)
_TO_INIT_OPTIONAL = PKEY_INDEX | PORT | ACCESS_FLAGS
TRANSITIONS = {
    (RESET, RESET): (0, 0),
    (RESET, INIT): (PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
    (INIT, INIT): (0, _TO_INIT_OPTIONAL),
    (INIT, RTR): (AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                  ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    (RTR, RTS): (SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
                 CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
    (RTS, RTS): (0, CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER),
    # SQD (send queue drain): what was started finishes, nothing new starts, receives go on (probed on rxe0)
    (RTS, SQD): (0, EN_SQD_ASYNC_NOTIFY),
    (SQD, RTS): (0, CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
    (SQD, SQD): (0, PORT | AV | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC | MAX_DEST_RD_ATOMIC | ALT_PATH
                 | ACCESS_FLAGS | PKEY_INDEX | MIN_RNR_TIMER | PATH_MIG_STATE),
}
for _state in (INIT, RTR, RTS, SQD, ERR):
    TRANSITIONS[(_state, RESET)] = TRANSITIONS[(_state, ERR)] = (0, 0)
# UC: RC's table without what serves ACKs, retries, READs and atomics; UD: no connection at all, a
# Q_Key instead of access flags, and only a send PSN
UC_TRANSITIONS = dict(TRANSITIONS)
UC_TRANSITIONS.update({
    (INIT, RTR): (AV | PATH_MTU | DEST_QPN | RQ_PSN, ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
    (RTR, RTS): (SQ_PSN, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    (RTS, RTS): (0, CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE),
    (SQD, RTS): (0, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
    (SQD, SQD): (0, AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE),
})
UD_TRANSITIONS = dict(TRANSITIONS)
UD_TRANSITIONS.update({
    (RESET, INIT): (PKEY_INDEX | PORT | QKEY, 0),
    (INIT, INIT): (0, PKEY_INDEX | PORT | QKEY),
    (INIT, RTR): (0, PKEY_INDEX | QKEY),
    (RTR, RTS): (SQ_PSN, CUR_STATE | QKEY),
    (RTS, RTS): (0, CUR_STATE | QKEY),
    (SQD, RTS): (0, CUR_STATE | QKEY),
    (SQD, SQD): (0, PKEY_INDEX | QKEY),
})
TRANSITIONS_OF = {IBV_QPT_RC: TRANSITIONS, IBV_QPT_UC: UC_TRANSITIONS, IBV_QPT_UD: UD_TRANSITIONS}


# Where modify() keeps each attribute it is given (mask bit, QPAttr field, where, under which name):
# a word of the QP's shared header, which a peer's NIC reads; the send queue the requester uses; or
# the QP itself, for query(). PSNs and QP numbers are 24-bit fields.
APPLIED = [
    (ACCESS_FLAGS, "qp_access_flags", "header", Q_ACCESS), (RQ_PSN, "rq_psn", "header", Q_EXPECTED_PSN),
    (MIN_RNR_TIMER, "min_rnr_timer", "header", Q_MIN_RNR_TIMER),
    (DEST_QPN, "dest_qp_num", "send", "dest_qp_num"), (SQ_PSN, "sq_psn", "send", "psn"),
    (TIMEOUT, "timeout", "send", "timeout"), (RETRY_CNT, "retry_cnt", "send", "retry_cnt"),
    (RNR_RETRY, "rnr_retry", "send", "rnr_retry"),
    (PKEY_INDEX, "pkey_index", "qp", "pkey_index"), (PORT, "port_num", "qp", "port_num"),
    (PATH_MTU, "path_mtu", "qp", "path_mtu"), (PATH_MTU, "path_mtu", "header", Q_PATH_MTU),
    (AV, "ah_attr", "qp", "ah_attr"),
    (MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", "qp", "max_dest_rd_atomic"),
    (MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", "header", Q_MAX_DEST_RD_ATOMIC),
    (MAX_QP_RD_ATOMIC, "max_rd_atomic", "qp", "max_rd_atomic"), (QKEY, "qkey", "header", Q_QKEY),
]
TWENTY_FOUR_BITS = ("rq_psn", "sq_psn", "dest_qp_num")


def _report(bad_wr, wr):
    """pyverbs' bad_wr: the WR object given is filled with the one that failed."""
    if bad_wr is not None:
        fill_from(bad_wr, wr)


# pyverbs' attribute classes are Cython classes with fixed fields: `attr.timout = 14` is an AttributeError
# there, not a field nobody reads, and __slots__ makes it one here. As there, a QPInitAttr's or QPAttr's cap
# and a QPAttr's ah_attr are copies: `init_attr.cap.max_send_wr = 4` changes a copy and nothing else (set
# init_attr.max_send_wr, or assign a whole QPCap).

class QPCap(PyverbsObject):
    __slots__ = ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data")

    def __init__(self, max_send_wr=1, max_recv_wr=10, max_send_sge=1, max_recv_sge=1, max_inline_data=0):
        # ibv_qp_cap's fields are uint32_t, as pyverbs checks when it stores them
        self.max_send_wr, self.max_recv_wr = c_uint32(max_send_wr), c_uint32(max_recv_wr)
        self.max_send_sge, self.max_recv_sge = c_uint32(max_send_sge), c_uint32(max_recv_sge)
        self.max_inline_data = c_uint32(max_inline_data)

    def __str__(self):
        return field_lines((("max send wrs", self.max_send_wr), ("max recv wrs", self.max_recv_wr),
                            ("max send sges", self.max_send_sge), ("max recv sges", self.max_recv_sge),
                            ("max inline data", self.max_inline_data)), width=20)


def _caps_lines(cap, width, indent):
    """The "QP caps:" part of a QPInitAttr's or QPAttr's printout."""
    return "QP caps:\n" + field_lines((
        ("max send WR", cap.max_send_wr), ("max recv WR", cap.max_recv_wr), ("max send SGE", cap.max_send_sge),
        ("max recv SGE", cap.max_recv_sge), ("max inline data", cap.max_inline_data)), width=width, indent=indent)


def _copy_cap(cap):
    return QPCap(cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data)


def _cap_property():
    """A QPInitAttr's or QPAttr's cap: read as a copy, set from a QPCap (None changes nothing)."""
    def set_(self, cap):
        if typed(cap, QPCap, "src") is not None:
            self._cap = _copy_cap(cap)
    return property(lambda self: _copy_cap(self._cap), set_, doc="the QP's capabilities (a copy: see above)")


def _flat_cap(name):
    """pyverbs also shows a QPInitAttr's caps flat: init_attr.max_send_wr, read and set."""
    return property(lambda self: getattr(self._cap, name), lambda self, value: setattr(self._cap, name, value))


class QPInitAttr(PyverbsObject):
    __slots__ = ("qp_type", "_qp_context", "send_cq", "recv_cq", "_srq", "_cap", "sq_sig_all")

    def __init__(self, qp_type=IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None, sq_sig_all=1):
        for cq, argument in ((scq, "scq"), (rcq, "rcq")):
            if cq is not None and not isinstance(typed(cq, PyverbsObject, argument), CQ):
                raise PyverbsUserError(f"Expected CQ/CQEX, got {type(cq)}")
        typed(srq, SRQ, "srq"), typed(cap, QPCap, "cap")
        self.qp_type, self._qp_context, self.send_cq, self.recv_cq, self._srq = qp_type, qp_context, scq, rcq, srq
        self._cap = _copy_cap(cap) if cap is not None else QPCap()
        self.sq_sig_all = sq_sig_all

    cap = _cap_property()
    max_send_wr, max_recv_wr = _flat_cap("max_send_wr"), _flat_cap("max_recv_wr")
    max_send_sge, max_recv_sge = _flat_cap("max_send_sge"), _flat_cap("max_recv_sge")
    max_inline_data = _flat_cap("max_inline_data")

    @property
    def srq(self):
        return self._srq

    @srq.setter
    def srq(self, srq):
        self._srq = typed(srq, SRQ, "val")

    def __str__(self):
        return field_lines((("QP type", qp_type_to_str(self.qp_type)), ("SQ sig. all", self.sq_sig_all)), width=20) \
            + _caps_lines(self._cap, 20, "    ")


class QPAttr(PyverbsObject):
    """Attributes for modify(); fields not named in the mask are ignored, as in ibv_modify_qp."""
    __slots__ = ("qp_state", "cur_qp_state", "port_num", "path_mtu", "qp_access_flags", "pkey_index", "dest_qp_num",
                 "rq_psn", "sq_psn", "max_rd_atomic", "max_dest_rd_atomic", "min_rnr_timer", "timeout", "retry_cnt",
                 "rnr_retry", "qkey", "path_mig_state", "alt_pkey_index", "alt_port_num", "alt_timeout",
                 "en_sqd_async_notify", "sq_draining", "rate_limit", "_ah_attr", "_alt_ah_attr", "_cap")

    def __init__(self, qp_state=INIT, cur_qp_state=RESET, port_num=1, path_mtu=IBV_MTU_1024):
        self.qp_state, self.cur_qp_state, self.port_num, self.path_mtu = qp_state, cur_qp_state, port_num, path_mtu
        self.qp_access_flags = self.pkey_index = self.dest_qp_num = self.rq_psn = self.sq_psn = 0
        self.max_rd_atomic = self.max_dest_rd_atomic = self.min_rnr_timer = 0
        self.timeout = self.retry_cnt = self.rnr_retry = 0
        self.qkey = self.path_mig_state = self.alt_pkey_index = self.alt_port_num = self.alt_timeout = 0
        self.en_sqd_async_notify = self.sq_draining = self.rate_limit = 0
        self._ah_attr = AHAttr()
        self._alt_ah_attr = AHAttr()
        self._cap = QPCap(0, 0, 0, 0, 0)

    cap = _cap_property()

    def _ah_property(field):
        """ah_attr and alt_ah_attr: read as a copy, set from an AHAttr (None changes nothing)."""
        def set_(self, ah):
            if typed(ah, AHAttr, "ah_attr") is not None:
                setattr(self, field, ah._copy())
        return property(lambda self: getattr(self, field)._copy(), set_, doc="an address vector (a copy: see above)")

    ah_attr, alt_ah_attr = _ah_property("_ah_attr"), _ah_property("_alt_ah_attr")
    del _ah_property

    def __str__(self):
        return field_lines((
            ("QP state", qp_state_to_str(self.qp_state)), ("QP current state", qp_state_to_str(self.cur_qp_state)),
            ("Path MTU", mtu_to_str(self.path_mtu)), ("Path mig. state", mig_state_to_str(self.path_mig_state)),
            ("QKey", self.qkey), ("RQ PSN", self.rq_psn), ("SQ PSN", self.sq_psn), ("Dest QP number", self.dest_qp_num),
            ("QP access flags", access_flags_to_str(self.qp_access_flags)))) + _caps_lines(self._cap, 22, "  ") + \
            "AH Attr:\n" + ah_attr_lines(self._ah_attr, "  ", "    ", port_twice=True) + \
            "Alt. AH Attr:\n" + ah_attr_lines(self._alt_ah_attr, "  ", "    ", port_twice=True) + field_lines((
                ("PKey index", self.pkey_index), ("Alt. PKey index", self.alt_pkey_index),
                ("En. SQD async notify", self.en_sqd_async_notify), ("SQ draining", self.sq_draining),
                ("Max RD atomic", self.max_rd_atomic), ("Max dest. RD atomic", self.max_dest_rd_atomic),
                ("Min RNR timer", self.min_rnr_timer), ("Port number", self.port_num), ("Timeout", self.timeout),
                ("Retry counter", self.retry_cnt), ("RNR retry", self.rnr_retry),
                ("Alt. port number", self.alt_port_num), ("Alt. timeout", self.alt_timeout),
                ("Rate limit", self.rate_limit)))


def _queue_capacity(requested):
    """rxe rounds a queue to a power of two and keeps one slot empty: 4 -> 7, 2 -> 3."""
    return (1 << max(requested, 0).bit_length()) - 1 if requested > 0 else 0


class QP(Resource):
    """A queue pair. pyverbs' names: qp_num, qp_type and qp_state (read-only), and its verbs; what the NIC
    holds besides (_cap, _pd, _srq, the send and receive queues) is soft0's own (glassbox.look shows it)."""
    qp_num, qp_type = readonly("_qp_num"), readonly("_qp_type")

    def __init__(self, creator, init_attr, qp_attr=None):
        super().__init__()
        typed(creator, object, "creator", none=False), typed(init_attr, object, "init_attr", none=False)
        typed(qp_attr, QPAttr, "qp_attr")
        if isinstance(init_attr, QPInitAttrEx):   # ibv_create_qp_ex: the PD comes in the attributes
            init_attr.check_extensions()
            if init_attr.xrcd is not None or init_attr.ind_table is not None or init_attr.create_flags:
                raise not_supported("XRC, RSS and QP create flags")
            creator = init_attr.pd if init_attr.pd is not None else creator
        if not isinstance(creator, PD):
            raise PyverbsUserError("The emulated NIC creates QPs from a PD: QP(pd, QPInitAttr(...))")
        creator.check_open()
        if init_attr.qp_type not in TRANSITIONS_OF:
            raise not_supported(f"Failed to create QP of type {init_attr.qp_type}")
        scq, rcq, cap, srq = init_attr.send_cq, init_attr.recv_cq, init_attr.cap, init_attr.srq
        if srq is not None:   # rxe ignores the receive caps of a QP on an SRQ, and reports 0 for them
            if not isinstance(srq, SRQ):
                raise PyverbsUserError(f"Expected SRQ, got {type(srq)}")
            srq.check_open()
            cap = QPCap(cap.max_send_wr, 0, cap.max_send_sge, 0, cap.max_inline_data)
        limits = DEVICE_ATTR
        if scq is None or rcq is None or max(cap.max_send_wr, cap.max_recv_wr) > limits["max_qp_wr"] \
                or max(cap.max_send_sge, cap.max_recv_sge) > limits["max_sge"] \
                or cap.max_inline_data > 16 * limits["max_sge"]:
            raise PyverbsRDMAError("Failed to create QP", EINVAL)
        wqe_bytes = max(cap.max_send_sge * 16, cap.max_inline_data)  # rxe sizes the send WQE so
        self._cap = QPCap(_queue_capacity(cap.max_send_wr), _queue_capacity(cap.max_recv_wr),
                         wqe_bytes // 16, cap.max_recv_sge, wqe_bytes)
        self._pd, self._send_cq, self._recv_cq = creator, scq, rcq
        self._qp_type, self._sq_sig_all = init_attr.qp_type, init_attr.sq_sig_all
        self._transitions = TRANSITIONS_OF[self._qp_type]
        # on an SRQ, the receive queue holds the SRQ's receives its NIC took until they are polled: as many as its CQ.
        # Without one, a receive's slot is free again once its message has landed, polled or not (rxe consumes the
        # WQE when it writes the completion): the ring holds max_recv_wr receives and as many completions not polled
        rq_size, rq_sge = (rcq.cqe, srq._max_sge) if srq is not None else (2 * self._cap.max_recv_wr, self._cap.max_recv_sge)
        self._segment, self._qp_num = self._new_segment(rq_size, rq_sge)
        self._words = w = self._segment.header   # what a peer's NIC sees of this QP (layout.Q_*)
        w[Q_PD], w[Q_RQ_SIZE], w[Q_RQ_MAX_SGE], w[Q_STATE], w[Q_RECV_CQ] = \
            creator.handle, rq_size, rq_sge, RESET, rcq._number
        w[Q_NUM], w[Q_SRQ] = self._qp_num, srq._number if srq is not None else 0
        self._srq = srq
        self._rq = responder.ReceiveQueue(self._segment, self._qp_num)
        self._rq.receives = rq_size if srq is not None else self._cap.max_recv_wr
        queue = {IBV_QPT_RC: requester.SendQueue, IBV_QPT_UC: requester.UnansweredQueue,   # (UC: no ACKs)
                 IBV_QPT_UD: datagram.DatagramQueue}[self._qp_type]
        self._wire = LINK == "udp"
        if self._wire:   # on the udp link the host's NIC process carries every QP's work as RoCEv2 packets
            from .link.doorbell import WireDatagramQueue, WireSendQueue
            queue = WireDatagramQueue if self._qp_type == IBV_QPT_UD else WireSendQueue
        self._send = queue(w, self._qp_num, creator, scq, init_attr.sq_sig_all)
        if self._qp_type == IBV_QPT_UD:   # each send names its destination
            self._send_error = self._datagram_error
        w[Q_TYPE], w[Q_ALIVE] = self._qp_type, 1
        self._reset_attributes()
        responder.LOCAL_QPS[self._qp_num] = responder.PeerQP(self._segment, self._rq)
        rcq.watch_receives(self._rq)
        if self._send.nic is not None:
            rcq.watch_nic(self._send.nic)
        self._depend_on(creator, scq, rcq, srq)
        if qp_attr is not None:   # pyverbs goes as far as it can: RTS for UD, INIT for a connected QP
            (self.to_rts if self._qp_type == IBV_QPT_UD else self.to_init)(qp_attr)

    def _new_segment(self, rq_size, rq_sge):
        room = responder.ReceiveQueue.bytes_for(rq_size, rq_sge)
        while True:
            qp_num = random.randrange(17, 1 << 24)
            try:
                return shm.Segment.create(f"qp-{qp_num:06x}", room), qp_num
            except FileExistsError:
                continue

    def _reset_attributes(self):
        self._cached_state = RESET
        self._rq.reset()
        self._send.reset()
        w = self._words
        w[Q_ACCESS] = w[Q_EXPECTED_PSN] = w[Q_MIN_RNR_TIMER] = w[Q_MAX_DEST_RD_ATOMIC] = w[Q_QKEY] = 0
        self._kept = dict(pkey_index=0, port_num=1, path_mtu=IBV_MTU_1024, ah_attr=AHAttr(), max_rd_atomic=0,
                          max_dest_rd_atomic=0)
        if self._qp_type == IBV_QPT_UD:   # what rxe reports for a QP that has no path
            self._kept.update(path_mtu=IBV_MTU_256, ah_attr=AHAttr(port_num=0, is_global=1, gr=GlobalRoute()))
        w[Q_PATH_MTU] = self._kept["path_mtu"]

    # ------------------------------------------------------------ state

    @readonly
    def qp_state(self):
        """libibverbs' cached state: what the last modify() or query() saw."""
        return self._cached_state

    def modify(self, qp_attr, comp_mask):
        self.check_open()
        typed(qp_attr, QPAttr, "qp_attr", none=False)
        current = int(self._words[Q_STATE])
        target = qp_attr.qp_state if comp_mask & STATE else current
        if comp_mask & AV and len(GIDS) <= qp_attr._ah_attr._gr.sgid_index < GID_TABLE_LEN:
            raise PyverbsRDMAError("Failed to modify QP", ENODATA)  # the kernel finds no GID at that index
        rule = self._transitions.get((current, target))
        if rule is None or comp_mask & rule[0] != rule[0] or comp_mask & ~(rule[0] | rule[1] | STATE) \
                or not self._attributes_valid(qp_attr, comp_mask):
            raise PyverbsRDMAError("Failed to modify QP", EINVAL)
        self._apply(qp_attr, comp_mask)
        if target == RESET:
            self._reset_attributes()
        responder.enter(self._words, target)   # peers' shortcuts to this QP are dropped
        if target == SQD and current == RTS:   # nothing new starts from now on: drained at once, as rxe says
            self._pd._ctx.raise_async_event(IBV_EVENT_SQ_DRAINED)
        self._cached_state = target
        self._send.modified(target, self._kept["max_rd_atomic"])   # and the send queue learns where it sends
        if target == ERR:
            self._send.progress()  # flush the send queue
            if not self._rq.flushed:
                self._rq.flush()

    def _attributes_valid(self, a, mask):
        port = PORT_ATTR
        if mask & PORT and a.port_num != 1 or mask & PKEY_INDEX and a.pkey_index != 0:
            return False
        if mask & PATH_MTU and not 1 <= a.path_mtu <= port["max_mtu"]:
            return False
        if mask & AV:
            ah = a._ah_attr
            # RoCE needs a GRH (is_global), and the source GID must be a populated entry
            if not ah.is_global or ah.port_num != 1 or not 0 <= ah._gr.sgid_index < len(GIDS):
                return False
        limit = DEVICE_ATTR["max_qp_rd_atom"]
        if mask & MAX_DEST_RD_ATOMIC and a.max_dest_rd_atomic > limit or mask & MAX_QP_RD_ATOMIC and a.max_rd_atomic > limit:
            return False
        if mask & MIN_RNR_TIMER and not 0 <= a.min_rnr_timer < 32 or mask & TIMEOUT and not 0 <= a.timeout < 32:
            return False
        return not (mask & RETRY_CNT and not 0 <= a.retry_cnt <= 7 or mask & RNR_RETRY and not 0 <= a.rnr_retry <= 7)

    def _apply(self, a, mask):
        for bit, field, where, name in APPLIED:
            if mask & bit:
                value = getattr(a, field)
                if field in TWENTY_FOUR_BITS:
                    value &= MASK24
                if where == "header":
                    self._words[name] = value
                elif where == "send":
                    setattr(self._send, name, value)
                else:
                    self._kept[name] = value
        if mask & AV:
            self._send.dgid = a._ah_attr._gr.dgid
            hops = route_hop_limit(self._send.dgid)   # (the kernel's, on every RoCE device: what query() shows)
            if hops is not None:
                self._kept["ah_attr"]._gr.hop_limit = hops
        if mask & PATH_MTU:   # (as rxe: the path MTU asked for, even past the port's active MTU)
            self._send.mtu = 128 << a.path_mtu

    # pyverbs' helpers: the masks a transition needs, then modify()
    def _get_comp_mask(self, dst):
        target = {"INIT": INIT, "RTR": RTR, "RTS": RTS}[dst]
        previous = {INIT: RESET, RTR: INIT, RTS: RTR}[target]
        return self._transitions[(previous, target)][0] | STATE

    def to_init(self, qp_attr):
        typed(qp_attr, QPAttr, "qp_attr")
        qp_attr.qp_state = INIT
        self._modify_named(qp_attr, self._get_comp_mask("INIT"), "init")

    def to_rtr(self, qp_attr):
        typed(qp_attr, QPAttr, "qp_attr")
        if self.qp_state != INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = RTR
        self._modify_named(qp_attr, self._get_comp_mask("RTR"), "RTR")

    def to_rts(self, qp_attr):
        typed(qp_attr, QPAttr, "qp_attr")
        if self.qp_state != RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = RTS
        self._modify_named(qp_attr, self._get_comp_mask("RTS"), "RTS")

    def _modify_named(self, qp_attr, mask, name):
        try:
            self.modify(qp_attr, mask)
        except PyverbsRDMAError as error:
            raise PyverbsRDMAError(f"Failed to modify QP state to {name}", error.error_code) from None

    def query(self, attr_mask):
        """Returns (QPAttr, QPInitAttr) as the device sees the QP now; refreshes qp.qp_state."""
        self.check_open()
        self._cached_state = int(self._words[Q_STATE])
        a = QPAttr(qp_state=self._cached_state, cur_qp_state=RESET)
        for _, field, where, name in APPLIED:
            value = self._words[name] if where == "header" else getattr(self._send, name) if where == "send" \
                else self._kept[name]
            setattr(a, field, int(value) if where == "header" else value)
        a.cap = self._cap
        init = QPInitAttr(qp_type=self._qp_type, scq=self._send_cq, rcq=self._recv_cq, cap=self._cap,
                          sq_sig_all=self._sq_sig_all)
        return a, init

    def query_data_in_order(self, op, flags=0):
        """Whether the data of `op` lands in memory in order (ibv_query_qp_data_in_order). rxe promises
        nothing (0), whatever the flags: neither does soft0, though it copies a message in one go."""
        self.check_open()
        return 0

    # ------------------------------------------------------------ posting

    def post_send(self, wr, bad_wr=None):
        """Post a chain of send WRs. Errors found at post time raise (EINVAL, ENOMEM) and name the WR in
        `bad_wr`; later ones complete. As in rxe, a chain takes at most the send queue's free slots, and
        WRs posted before RTS are refused (EINVAL) but kept: the next post in RTS runs them first; in SQD they
        are taken, and wait the same way."""
        if self._closed:
            self.check_open()
        if not isinstance(wr, SendWR) or bad_wr is not None and not isinstance(bad_wr, SendWR):
            typed(wr, SendWR, "wr", none=False), typed(bad_wr, SendWR, "bad_wr")
        state, send = self._words[Q_STATE], self._send
        free = self._cap.max_send_wr - send.slots_held()
        if state != RTS and state != ERR and state != SQD:  # rxe's kernel refuses the doorbell before RTS
            first = wr
            while wr is not None and free > 0 and not self._send_error(wr):   # (but the chain stays in the ring)
                send.hold(wr)
                free -= 1
                wr = wr._next
            _report(bad_wr, first)
            raise PyverbsRDMAError("Failed to post send", EINVAL)
        post = send.hold if state == SQD else send.post   # SQD: the ring takes them; the NIC starts none (as rxe)
        while wr is not None:
            error = self._send_error(wr) or (ENOMEM if free <= 0 else 0)
            if error:
                if send.slots_held() and state != SQD:
                    send.progress()   # the doorbell rang: what waited in the ring runs
                _report(bad_wr, wr)
                raise PyverbsRDMAError("Failed to post send", error)
            post(wr)
            free -= 1
            wr = wr._next

    def _send_error(self, wr):
        """What ibv_post_send refuses at once: too many SGEs, a misaligned or short atomic, inline
        data past the limit (EINVAL)."""
        sges, cap = wr._sges, self._cap
        if len(sges) > cap.max_send_sge:
            return EINVAL
        if wr.opcode in ATOMICS:
            if sum(s[1] for s in sges) < 8 or wr._remote_addr & 7:
                return EINVAL
        if wr.send_flags & IBV_SEND_INLINE and sum(s[1] for s in sges) > cap.max_inline_data:
            return EINVAL
        return 0

    def _datagram_error(self, wr):
        """A UD QP's post-time checks: the common ones, and a destination (an open address handle)."""
        error = QP._send_error(self, wr)
        if not error and (wr._ah is None or wr._ah.closed):
            raise PyverbsUserError("A UD send needs its destination, an open AH: "
                                   "wr.set_wr_ud(ah, remote_qpn, remote_qkey) before post_send(wr)")
        return error

    def post_recv(self, wr, bad_wr=None):
        """Post a chain of receive WRs into the receive queue a peer's SEND will consume."""
        if self._closed:
            self.check_open()
        if not isinstance(wr, RecvWR) or bad_wr is not None and not isinstance(bad_wr, RecvWR):
            typed(wr, RecvWR, "wr", none=False), typed(bad_wr, RecvWR, "bad_wr")
        if self._cached_state == RESET or self._srq is not None:   # (a QP on an SRQ takes its receives there)
            raise PyverbsRDMAError("Failed to post recv", EINVAL)
        max_sge, rq = self._cap.max_recv_sge, self._rq
        while wr is not None:   # rxe checks for room first, then the SGEs
            error = ENOMEM if rq.full() else EINVAL if len(wr._sges) > max_sge else 0
            if error:
                _report(bad_wr, wr)
                raise PyverbsRDMAError("Failed to post recv", error)
            rq.post(wr.wr_id, wr._sges)
            wr = wr._next
        if self._words[Q_RNR_WAITING]:   # a peer's message waits out RNR NAKs for a receive here: let it in now
            requester.carry_parked(responder.LOCAL_QPS[self._qp_num])

    def bind_mw(self, mw, mw_bind):
        """ibv_bind_mw, for type 1 windows: post a BIND_MW WR under the window's next key, which libibverbs
        makes mw.rkey at once; the NIC checks and binds in order with the QP's other WRs (a refusal
        completes with MW_BIND_ERR, and mw.rkey is then the caller's to undo, as rxe's provider says)."""
        from .mr import MW, MWBind
        typed(mw, MW, "mw", none=False), typed(mw_bind, MWBind, "mw_bind")
        info = mw_bind._bind_info
        if mw.type != IBV_MW_TYPE_1 or info.mw_access_flags & IBV_ACCESS_ZERO_BASED:   # (libibverbs', rxe's checks)
            raise PyverbsRDMAError("Failed to Bind MW", EINVAL)
        if info._mr._pd is not mw._pd:
            raise PyverbsRDMAError("Failed to Bind MW", EPERM)
        wr = SendWR(wr_id=mw_bind._wr_id, opcode=IBV_WR_BIND_MW, send_flags=mw_bind._send_flags)
        wr.set_bind_wr(mw, info)
        try:
            self.post_send(wr)
        except PyverbsRDMAError as error:
            raise PyverbsRDMAError("Failed to Bind MW", error.error_code) from None
        mw._rkey = wr._rkey

    def query_ece(self):
        raise not_supported("ECE (ibv_query_ece)")

    def set_ece(self, ece):
        raise not_supported("ECE (ibv_set_ece)")

    def _release(self):
        self._words[Q_ALIVE] = 0
        responder.enter(self._words, self._words[Q_STATE])
        self._send.reset()
        self._send.close()
        responder.LOCAL_QPS.pop(self._qp_num, None)
        self._recv_cq.forget_receives(self._rq)
        self._send_cq.wait_for_timer(self._send, False)
        self._rq.release()
        self._rq = self._words = None
        self._segment.close()

    def __str__(self):
        return field_lines((("QP type", qp_type_to_str(self._qp_type)), ("  number", self._qp_num),
                            ("  state", qp_state_to_str(self.qp_state))))


class ECE(Record):
    """ibv_ece: Enhanced Connection Establishment options. rxe (and soft0) has none: query_ece() and
    set_ece() are EOPNOTSUPP."""
    _fields = dict(vendor_id=0, options=0, comp_mask=0)


class QPInitAttrEx(Record):
    """ibv_qp_init_attr_ex: QPInitAttr plus the PD, comp_mask and the extended QP's send_ops_flags."""
    _fields = dict(qp_type=IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None, cap=None, sq_sig_all=0,
                   comp_mask=0, pd=None, xrcd=None, create_flags=0, max_tso_header=0, source_qpn=0,
                   hash_conf=None, ind_table=None, send_ops_flags=0)
    _also = ("send_cq", "recv_cq")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.cap is None:
            self.cap = QPCap()
        self.send_cq, self.recv_cq = self.scq, self.rcq

    def __getattr__(self, name):
        if name.startswith("max_") and "cap" in self.__dict__:
            return getattr(self.cap, name)
        raise AttributeError(name)

    def mask_to_str(self, mask):
        return flags_to_str(mask, {1: "PD", 2: "XRCD", 4: "Create Flags", 8: "Max TSO header",
                                   16: "Indirection Table", 32: "RX hash"})

    def flags_to_str(self, flags):
        return flags_to_str(flags, {1: "Block self mcast loopback", 2: "Scatter FCS", 4: "CVLAN stripping",
                                    8: "Source QPN", 16: "PCI write end padding"})

    def __str__(self):
        return field_lines((("QP type", qp_type_to_str(self.qp_type)), ("SQ sig. all", self.sq_sig_all)), width=20) \
            + _caps_lines(self.cap, 18, "  ") + field_lines((   # (pyverbs pads "  max send WR" to 20)
                ("comp mask", self.mask_to_str(self.comp_mask)), ("create flags", self.flags_to_str(self.create_flags)),
                ("max TSO header", self.max_tso_header), ("Source QPN", self.source_qpn)), width=20)



    def check_extensions(self):
        """rxe's check at ibv_create_qp_ex: a comp_mask bit other than PD, CREATE_FLAGS and SEND_OPS_FLAGS,
        or a send operation its provider cannot build for this QP type (RXE_SUP_*_QP_SEND_OPS_FLAGS), is
        EOPNOTSUPP."""
        if self.comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS):
            raise not_supported(f"Failed to create QP: comp_mask {self.comp_mask:#x} (rxe takes PD, CREATE_FLAGS "
                                "and SEND_OPS_FLAGS only)")
        if self.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS and self.send_ops_flags & ~SEND_OPS.get(self.qp_type, 0):
            raise not_supported(f"Failed to create QP: send_ops_flags {self.send_ops_flags:#x} on a "
                                f"{qp_type_to_str(self.qp_type)} QP (rxe builds "
                                f"{SEND_OPS.get(self.qp_type, 0):#x} only)")


# what pyverbs >= 59 returns as enum members (pyverbs_generation.py)
returns(QPInitAttr, qp_type=ibv_qp_type)
returns(QPInitAttrEx, qp_type=ibv_qp_type)
returns(QPAttr, qp_state=ibv_qp_state, cur_qp_state=ibv_qp_state, path_mtu=ibv_mtu, path_mig_state=ibv_mig_state)
returns(QP, qp_state=ibv_qp_state, qp_type=ibv_qp_type)


from .qpex import DataBuffer, QPEx  # noqa: E402,F401 (pyverbs.qp has them; QPEx extends QP, defined above)
