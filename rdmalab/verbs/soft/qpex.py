"""Extended QPs (pyverbs.qp.QPEx): posting with the wr_* API instead of SendWR chains.

    qp.wr_start()
    qp.wr_id, qp.wr_flags = 1, IBV_SEND_SIGNALED
    qp.wr_rdma_write(rkey, remote_addr)        # a builder: begins one work request
    qp.wr_set_sge(sge)                         # a setter: fills in the one just begun
    qp.wr_complete()                           # rings the doorbell once for the whole batch

Each builder takes the QP's current wr_id and wr_flags. Here a batch becomes the same SendWR chain
that post_send() takes, and wr_complete() posts it with post_send(): one data path, with its state
checks (EINVAL before RTS, flushed in ERR) and its completions.

What differs from post_send() is where errors show, as in rxe's provider: builders and setters
return nothing. A problem they meet (the send queue is full, more SGEs or inline bytes than the QP
was created for) is remembered; wr_complete() then raises it (ENOSPC, errno 28) and posts nothing of
the batch. rxe makes none of post_send()'s other post-time checks on these requests (a misaligned
atomic goes out and fails at the responder).

Where libibverbs would crash (a builder whose operation was not in send_ops_flags: a NULL function
pointer; wr_start twice: a spinlock taken twice), soft0 raises PyverbsUserError naming the fix.
"""
import ctypes
import socket
from errno import EINVAL, ENOSPC

from .constants import (
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_ATOMIC_WRITE, IBV_WR_BIND_MW, IBV_WR_FLUSH, IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV)
from .libibverbs_enums import ibv_qp_create_send_ops_flags as OPS
from .base import readonly
from .layout import Q_STATE
from .operations import ATOMICS, OPERATIONS
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .qp import ERR, QP, RTS, SQD
from .wr import SGE, SendWR



class DataBuffer:
    """One piece of inline data for wr_set_inline_data_list(): an address and a length."""

    def __init__(self, addr, length):
        self.addr, self.length = addr, length


class _Draft:
    """A work request a builder began: what wr_complete() turns into a SendWR."""
    __slots__ = ("wr_id", "opcode", "flags", "imm_data", "rkey", "remote_addr", "compare_add", "swap",
                 "sges", "inline", "ud", "bind")

    def __init__(self, wr_id, opcode, flags):
        self.wr_id, self.opcode, self.flags = wr_id, opcode, flags
        self.imm_data = self.rkey = self.remote_addr = self.compare_add = self.swap = 0
        self.sges, self.inline, self.ud, self.bind = (), None, None, None


class _BuiltWR(SendWR):
    """A SendWR made from a batch: rxe checked it as it was built, so post_send's own checks skip it."""


class QPEx(QP):
    """A QP (post_send() and post_recv() work as ever) that also posts with wr_start() ... wr_complete()."""
    wr_id = wr_flags = comp_mask = 0   # (pyverbs' read-write fields, set below)
    ind_table = readonly("_ind_table")

    def __init__(self, creator, init_attr, qp_attr=None):
        super().__init__(creator, init_attr, qp_attr)
        asked = getattr(init_attr, "comp_mask", 0) & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        self._send_ops = init_attr.send_ops_flags if asked else None   # None: pyverbs leaves qp_ex NULL
        self.wr_id = self.wr_flags = self.comp_mask = 0
        self._ind_table = None
        self._batch = None   # the drafts between wr_start() and wr_complete(); None outside a batch
        self._error = 0      # what a builder or setter found wrong in this batch (rxe's qp->err)

    # ------------------------------------------------------------ the batch

    def wr_start(self):
        self._usable()
        if self._batch is not None:
            raise PyverbsUserError("wr_start() twice: finish the batch with wr_complete() or wr_abort() first "
                                   "(libibverbs would wait forever on the send queue's lock)")
        self._batch, self._error = [], 0

    def wr_complete(self):
        """Post the batch (rxe: one doorbell for all of it). Raises the error a builder or setter met, or
        what post_send() would (EINVAL before RTS); with nothing built it just rings the doorbell."""
        self._usable()
        batch, error = self._batch or [], self._error
        self._batch, self._error = None, 0
        if error:
            raise PyverbsRDMAError("ibv_wr_complete failed.", error)
        chain = None
        for draft in reversed(batch):
            chain = self._send_wr(draft, chain)
        try:
            if chain is None:
                self._ring_doorbell()
            else:
                self.post_send(chain)
        except PyverbsRDMAError as failed:
            raise PyverbsRDMAError("ibv_wr_complete failed.", failed.error_code) from None

    def wr_abort(self):
        """Drop the batch: nothing of it is posted."""
        self._usable()
        self._batch, self._error = None, 0

    def _ring_doorbell(self):
        """An empty doorbell (rxe writes one to the kernel): refused before RTS, and it runs what waits (in SQD,
        nothing: the send queue drains)."""
        if self._words[Q_STATE] == SQD:
            return
        if self._words[Q_STATE] not in (RTS, ERR):
            raise PyverbsRDMAError("Failed to post send", EINVAL)
        if self._send.slots_held():
            self._send.progress()

    def _send_error(self, wr):
        if type(wr) is _BuiltWR:
            return 0
        return QP._send_error(self, wr)

    # ------------------------------------------------------------ builders: each begins one WR

    def _begin(self, opcode, needs=None, **fields):
        """Begin a WR of `opcode` (the QP needs the operation's IBV_QP_EX_WITH_* bit, or `needs`, in its
        send_ops_flags) with the QP's wr_id and wr_flags, unless the batch already failed or the send queue
        has no slot left for it (ENOSPC)."""
        needs = needs or OPERATIONS[opcode].ex_flag
        self._usable()
        if self._send_ops & needs != needs:
            name = OPS(needs).name
            raise PyverbsUserError(f"This QPEx was created without {name} in send_ops_flags: add it to "
                                   f"QPInitAttrEx(send_ops_flags=...) to use this builder")
        if self._batch is None:
            raise PyverbsUserError("A wr_* builder outside a batch: call wr_start() first")
        if self._error:
            return
        if len(self._batch) + self._send.slots_held() >= self._cap.max_send_wr:
            self._error = ENOSPC   # the send queue has no free slot for it
            return
        draft = _Draft(self.wr_id, opcode, self.wr_flags)
        for name, value in fields.items():
            setattr(draft, name, value)
        self._batch.append(draft)

    def wr_send(self):
        self._begin(IBV_WR_SEND)

    def wr_send_imm(self, data):
        # pyverbs converts the immediate to network order (htobe32), as ibv_wr_send_imm expects it
        self._begin(IBV_WR_SEND_WITH_IMM, imm_data=socket.htonl(data))

    def wr_rdma_write(self, rkey, remote_addr):
        self._begin(IBV_WR_RDMA_WRITE, rkey=rkey, remote_addr=remote_addr)

    def wr_rdma_write_imm(self, rkey, remote_addr, data):
        self._begin(IBV_WR_RDMA_WRITE_WITH_IMM, rkey=rkey,
                    remote_addr=remote_addr, imm_data=socket.htonl(data))

    def wr_rdma_read(self, rkey, remote_addr):
        self._begin(IBV_WR_RDMA_READ, rkey=rkey, remote_addr=remote_addr)

    def wr_atomic_cmp_swp(self, rkey, remote_addr, compare, swap):
        self._begin(IBV_WR_ATOMIC_CMP_AND_SWP, rkey=rkey,
                    remote_addr=remote_addr, compare_add=compare, swap=swap)

    def wr_atomic_fetch_add(self, rkey, remote_addr, add):
        self._begin(IBV_WR_ATOMIC_FETCH_AND_ADD, rkey=rkey,
                    remote_addr=remote_addr, compare_add=add)

    # memory windows: the key to invalidate travels in imm_data (a union in the C struct), as pyverbs'
    # SendWR has it; a bind names the window and what to bind, as SendWR.set_bind_wr() takes them
    def wr_local_inv(self, invalidate_rkey):
        self._begin(IBV_WR_LOCAL_INV, imm_data=invalidate_rkey)

    def wr_send_inv(self, invalidate_rkey):
        self._begin(IBV_WR_SEND_WITH_INV, imm_data=invalidate_rkey)

    def wr_bind_mw(self, mw, rkey, bind_info):
        self._begin(IBV_WR_BIND_MW, rkey=rkey, bind=(mw, bind_info))

    # soft0 carries none of these out: like post_send(), it completes them with LOC_QP_OP_ERR (as rxe on
    # Linux 6.1 does an ATOMIC_WRITE)

    def wr_flush(self, rkey, remote_addr, length, ptype, level):
        self._begin(IBV_WR_FLUSH, rkey=rkey, remote_addr=remote_addr)

    def wr_atomic_write(self, rkey, remote_addr, atomic_wr):
        self._begin(IBV_WR_ATOMIC_WRITE, rkey=rkey, remote_addr=remote_addr)

    def wr_send_tso(self, hdr, hdr_sz, mss):
        self._begin(IBV_WR_SEND, needs=OPS.IBV_QP_EX_WITH_TSO)   # no QP soft0 (or rxe) makes has TSO

    # ------------------------------------------------------------ setters: fill in the WR just begun

    def _current(self):
        self._usable()
        if not self._batch:
            raise PyverbsUserError("A wr_set_* setter fills in the WR a builder began: call wr_start() and a "
                                   "builder (wr_send(), wr_rdma_write(), ...) first")
        return None if self._error else self._batch[-1]

    def wr_set_sge(self, sge):
        draft = self._current()
        if draft is not None and sge.length:   # (rxe leaves a zero-length WR without SGEs)
            draft.sges, draft.inline = ((sge.addr, sge.length, sge.lkey),), None

    def wr_set_sge_list(self, num_sge, sg_list):
        draft = self._current()
        if draft is None:
            return
        if num_sge > self._cap.max_send_sge:
            self._error = ENOSPC
            return
        draft.sges, draft.inline = tuple((s.addr, s.length, s.lkey) for s in sg_list[:num_sge]), None

    def wr_set_inline_data(self, addr, length):
        self.wr_set_inline_data_list(1, [DataBuffer(addr, length)])

    def wr_set_inline_data_list(self, num_buf, buf_list):
        """Inline data is copied now, as rxe copies it into the send queue: later changes to the buffers
        are not sent."""
        draft = self._current()
        if draft is None:
            return
        data = b"".join(ctypes.string_at(buf.addr, buf.length) for buf in buf_list[:num_buf])
        if len(data) > self._cap.max_inline_data:
            self._error = ENOSPC
            return
        draft.sges, draft.inline = (), data

    def wr_set_ud_addr(self, ah, remote_qpn, remote_qkey):
        draft = self._current()
        if draft is not None:
            draft.ud = (ah, remote_qpn, remote_qkey)

    def wr_set_xrc_srqn(self, remote_srqn):
        raise PyverbsUserError("XRC: neither soft0 nor Soft-RoCE has XRC QPs")

    # ------------------------------------------------------------ helpers

    def _usable(self):
        self.check_open()
        if self._send_ops is None:
            raise PyverbsUserError("This QPEx has no wr_* API: create it with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS in "
                                   "QPInitAttrEx's comp_mask (pyverbs leaves it NULL otherwise)")

    @staticmethod
    def _send_wr(draft, next_wr):
        """The SendWR post_send() takes for a draft."""
        sges = draft.sges
        if draft.inline is not None:
            # inline bytes live in the WQE, not in an MR: hand post_send a private copy (lkey 0)
            buffer = ctypes.create_string_buffer(draft.inline, len(draft.inline) or 1)
            sges = ((ctypes.addressof(buffer), len(draft.inline), 0),)
        wr = _BuiltWR(wr_id=draft.wr_id, opcode=draft.opcode, num_sge=max(len(sges), 1),
                      sg=[SGE(*s) for s in sges] or [SGE(0, 0, 0)], imm_data=draft.imm_data,
                      send_flags=draft.flags, next_wr=next_wr)
        if not sges:
            wr.num_sge = 0   # a WR without data: a zero-length one
        if draft.inline is not None:
            wr._inline_buffer = buffer   # kept alive with the WR
        if draft.opcode in ATOMICS:
            wr.set_wr_atomic(draft.rkey, draft.remote_addr, draft.compare_add, draft.swap)
        else:
            wr.set_wr_rdma(draft.rkey, draft.remote_addr)
        if draft.ud is not None:
            wr.set_wr_ud(*draft.ud)
        if draft.bind is not None:
            wr.set_bind_wr(*draft.bind)
            wr._rkey = draft.rkey   # ibv_wr_bind_mw names the window's new key itself
        return wr
