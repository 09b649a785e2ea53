"""Extended CQs (pyverbs.cq.CQEX): completions read field by field, a batch at a time.

    if cq.start_poll(PollCqAttr()) == 0:       # ENOENT (2) when there is none
        while True:
            handle(cq.wr_id, cq.status, cq.read_opcode(), cq.read_byte_len())
            if cq.poll_next() != 0:            # ENOENT: no more for now
                break
        cq.end_poll()

A CQEX is a CQ: the same completions, which QPs post to it the same way. What changes is how a
program reads them: start_poll() makes the first one current (0, or ENOENT when there is none),
poll_next() the next, and read_*() return the current one's fields. Only the fields asked for in
CqInitAttrEx's wc_flags can be read (rxe's provider leaves the others' readers NULL; reading one here
raises PyverbsUserError naming the flag). rxe reports the standard fields only: asking for a
timestamp, VLAN, flow tag or tag-matching info is EOPNOTSUPP at creation.
"""
from errno import ENOENT, EOPNOTSUPP

from .cq import CQ, CqInitAttrEx
from .constants import (IBV_CQ_INIT_ATTR_MASK_FLAGS as MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD as MASK_PD,
                    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN as IGNORE_OVERRUN)
from .libibverbs_enums import ibv_create_cq_wc_flags as FLAGS
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError

SUPPORTED_WC_FLAGS = (FLAGS.IBV_WC_EX_WITH_BYTE_LEN | FLAGS.IBV_WC_EX_WITH_IMM | FLAGS.IBV_WC_EX_WITH_QP_NUM
                      | FLAGS.IBV_WC_EX_WITH_SRC_QP | FLAGS.IBV_WC_EX_WITH_SLID | FLAGS.IBV_WC_EX_WITH_SL
                      | FLAGS.IBV_WC_EX_WITH_DLID_PATH_BITS)   # rxe's RXE_SUP_WC_FLAGS


def _not_in_pyverbs(name):
    def refuse(self):
        raise AttributeError(f"'CQEX' object has no attribute '{name}': pyverbs' CQEX reads completions with "
                             "start_poll(), poll_next() and end_poll()")
    return property(refuse)


class CQEX(CQ):
    def __init__(self, context, init_attr=None):
        attr = init_attr if init_attr is not None else CqInitAttrEx()
        # rxe's provider refuses the fields it cannot report; libibverbs a comp_mask it does not know
        # (FLAGS and PD are all it knows); rxe's kernel any creation flag (IGNORE_OVERRUN: soft0 does not lose
        # completions anyway). SINGLE_THREADED is a hint libibverbs keeps to itself.
        if attr.wc_flags & ~SUPPORTED_WC_FLAGS or attr.comp_mask & ~(MASK_FLAGS | MASK_PD) \
                or attr.comp_mask & MASK_FLAGS and attr.flags & IGNORE_OVERRUN:
            raise PyverbsRDMAError("Failed to create extended CQ", EOPNOTSUPP)
        super().__init__(context, attr.cqe, None, attr.channel, attr.comp_vector)
        self._wc_flags = attr.wc_flags
        self._polling = False
        self._wc = None   # the current completion
        self._status = self._wr_id = 0

    # pyverbs' CQEX has none of CQ's polling and event calls: a program using them here would fail there
    poll = _not_in_pyverbs("poll")
    req_notify = _not_in_pyverbs("req_notify")
    ack_events = _not_in_pyverbs("ack_events")
    comp_channel = _not_in_pyverbs("comp_channel")
    resize = _not_in_pyverbs("resize")

    def start_poll(self, attr=None):
        """Make the oldest completion current: 0, or ENOENT (2) when the CQ has none."""
        if self._polling:
            raise PyverbsUserError("start_poll() while polling: end the batch with end_poll() first "
                                   "(libibverbs would wait forever on the CQ's lock)")
        if not self._take():
            return ENOENT
        self._polling = True
        return 0

    def poll_next(self):
        """Make the next completion current: 0, or ENOENT (2) when there is none (the current one stays)."""
        if not self._polling:
            raise PyverbsUserError("poll_next() outside a batch: call start_poll() first, and use poll_next() "
                                   "only after it returned 0")
        return 0 if self._take() else ENOENT

    def end_poll(self):
        """End the batch. (After a start_poll() that returned ENOENT there is none to end; libibverbs must not
        be called then, and soft0 does nothing.)"""
        self._polling = False

    def _take(self):
        found, wcs = CQ.poll(self, 1)
        if found:
            self._wc = wc = wcs[0]
            self._status, self._wr_id = wc.status, wc.wr_id
        return found

    @property
    def status(self):
        return self._status

    @status.setter
    def status(self, value):
        self._status = value

    @property
    def wr_id(self):
        return self._wr_id

    @wr_id.setter
    def wr_id(self, value):
        self._wr_id = value

    def _read(self, field, flag=0):
        if flag and not self._wc_flags & flag:
            raise PyverbsUserError(f"read_{field}() needs {FLAGS(flag).name} in the CQ's wc_flags "
                                   "(CqInitAttrEx(wc_flags=...)); libibverbs has no reader for it otherwise")
        if self._wc is None:
            raise PyverbsUserError(f"read_{field}() before any completion: call start_poll() first")
        return getattr(self._wc, field)

    def read_opcode(self):
        return self._read("opcode")

    def read_vendor_err(self):
        return self._read("vendor_err")

    def read_wc_flags(self):
        return self._read("wc_flags")

    def read_byte_len(self):
        return self._read("byte_len", FLAGS.IBV_WC_EX_WITH_BYTE_LEN)

    def read_imm_data(self):
        return self._read("imm_data", FLAGS.IBV_WC_EX_WITH_IMM)

    def read_qp_num(self):
        return self._read("qp_num", FLAGS.IBV_WC_EX_WITH_QP_NUM)

    def read_src_qp(self):
        return self._read("src_qp", FLAGS.IBV_WC_EX_WITH_SRC_QP)

    def read_slid(self):
        return self._read("slid", FLAGS.IBV_WC_EX_WITH_SLID)

    def read_sl(self):
        return self._read("sl", FLAGS.IBV_WC_EX_WITH_SL)

    def read_dlid_path_bits(self):
        return self._read("dlid_path_bits", FLAGS.IBV_WC_EX_WITH_DLID_PATH_BITS)

    def _unreported(self, what, flag):
        return self._read(what, flag)   # a flag soft0 (as rxe) refuses at creation: always PyverbsUserError

    def read_timestamp(self):
        return self._unreported("completion_ts", FLAGS.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)

    def read_completion_wallclock_ns(self):
        return self._unreported("completion_wallclock_ns", FLAGS.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

    def read_cvlan(self):
        return self._unreported("cvlan", FLAGS.IBV_WC_EX_WITH_CVLAN)

    def read_flow_tag(self):
        return self._unreported("flow_tag", FLAGS.IBV_WC_EX_WITH_FLOW_TAG)

    def read_tm_info(self):
        return self._unreported("tm_info", FLAGS.IBV_WC_EX_WITH_TM_INFO)

    def __str__(self):
        return "Extended CQ:\n" + "{:<22}: {:<20}\n".format("Handle", self._number) + \
            "{:<22}: {:<20}\n".format("CQEs", self.cqe)
