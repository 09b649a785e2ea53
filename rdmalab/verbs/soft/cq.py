"""Completion queues and work completions.

A CQ gathers two kinds of completions:
- send completions, which this process's NIC work produced (a deque, never shared);
- receive completions, which a peer's NIC work wrote into the receive queues of this CQ's QPs
  (shared memory); poll() reads them in order, queue by queue.
poll() also gives the send queues waiting on an RNR timer or an ACK timeout their chance to retry,
as a driver's completion path does.
"""
from collections import deque

from . import nic
from .base import Resource
from .device import DEVICE_ATTR, Context
from .enums import IBV_QPS_ERR
from .nic import Q_RQ_CONSUMED, Q_RQ_POLLED, Q_STATE
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError

EINVAL = 22


class WC:
    """One work completion, with pyverbs' attribute names."""
    __slots__ = ("wr_id", "status", "opcode", "vendor_err", "byte_len", "qp_num", "src_qp", "imm_data",
                 "wc_flags", "pkey_index", "slid", "sl", "dlid_path_bits")

    def __init__(self, wr_id=0, status=0, opcode=0, vendor_err=0, byte_len=0, qp_num=0, src_qp=0, imm_data=0,
                 wc_flags=0, pkey_index=0, slid=0, sl=0, dlid_path_bits=0):
        self.wr_id, self.status, self.opcode, self.vendor_err, self.byte_len = wr_id, status, opcode, vendor_err, byte_len
        self.qp_num, self.src_qp, self.imm_data, self.wc_flags = qp_num, src_qp, imm_data, wc_flags
        self.pkey_index, self.slid, self.sl, self.dlid_path_bits = pkey_index, slid, sl, dlid_path_bits

    def __repr__(self):
        return (f"WC(wr_id={self.wr_id}, status={self.status}, opcode={self.opcode}, byte_len={self.byte_len}, "
                f"qp_num={self.qp_num}, imm_data={self.imm_data}, wc_flags={self.wc_flags})")


def _wc(wr_id, status, opcode, byte_len, qp_num, imm_data, wc_flags):
    return WC(wr_id, status, opcode, 0, byte_len, qp_num, 0, imm_data, wc_flags)


class CQ(Resource):
    def __init__(self, context, cqe, cq_context=None, channel=None, comp_vector=0):
        super().__init__()
        if not isinstance(context, Context):
            raise PyverbsUserError(f"Expected Context, got {type(context)}")
        context._check_open()
        if not 1 <= cqe <= DEVICE_ATTR["max_cqe"]:
            raise PyverbsRDMAError("Failed to create a CQ", EINVAL)
        if channel is not None:
            raise PyverbsUserError("The emulated NIC has no completion channels: poll the CQ instead")
        self.cqe = cqe
        self.context = context
        self._completions = deque()  # (wr_id, status, opcode, byte_len, qp_num, imm_data, wc_flags)
        self._recv_qps = []          # QPs whose receive completions come here
        self._waiting = set()        # QPs whose send queue waits for a timer
        self._depend_on(context)

    def poll(self, num_entries=1):
        """Returns (number polled, [WC, ...]), at most num_entries, without waiting."""
        if self._closed:
            self._check_open()
        if self._waiting:
            for qp in list(self._waiting):
                nic.progress(qp)
        wcs = []
        local = self._completions
        while local and len(wcs) < num_entries:
            wcs.append(_wc(*local.popleft()))
        for qp in self._recv_qps:
            if len(wcs) >= num_entries:
                break
            h = qp._segment.header
            if h[Q_RQ_POLLED] == h[Q_RQ_CONSUMED] and (h[Q_STATE] != IBV_QPS_ERR or qp._receives_flushed):
                continue  # nothing arrived and nothing to flush: the common case, kept cheap
            nic.harvest_receives(qp, wcs, num_entries, _wc)
        return len(wcs), wcs

    def _release(self):
        self._completions.clear()
        self._recv_qps.clear()
        self._waiting.clear()
