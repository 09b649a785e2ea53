"""The NIC's work: what a hardware NIC (or the rxe driver) does once a work request is posted.

A real RC transfer has two halves. The requester NIC reads the local buffers (lkey), sends packets,
and completes the work request when the answer comes back. The responder NIC checks each request
against its QP (state, PSN, access flags), its receive queue and the remote key, then writes into
host memory, and never wakes the responder's CPU unless a receive completes.

Here both halves run in the initiating process, straight after post_send(): the peer's QP header,
receive queue and registered memory are shared-memory segments this process maps. That is the one
liberty the emulation takes: the initiator's CPU does what a NIC's DMA engine would do. The target
process runs no code at all, which is the property the lab measures.

Checks run in the order rxe runs them, and give the statuses rxe gives (see docs/emulated-nic.md):
- requester, before sending: opcode, local SGEs (unknown lkey -> LOC_QP_OP_ERR, out of bounds ->
  LOC_PROT_ERR);
- no answer (no such QP, peer not in RTR/RTS, PSN mismatch, a GID that does not route): retransmit
  every ACK timeout, then RETRY_EXC_ERR;
- responder: operation allowed by its qp_access_flags (else REM_INV_REQ_ERR), a posted receive for
  SEND and WRITE_WITH_IMM (else RNR NAK: retry after min_rnr_timer, rnr_retry times, 7 = forever,
  then RNR_RETRY_EXC_ERR), the rkey: valid, same PD, access, bounds (else REM_ACCESS_ERR), a
  receive big enough (else REM_OP_ERR, and LOC_QP_OP_ERR on the receive);
- a responder error puts both QPs in ERR; a requester-only error puts the requester in ERR.
Failed requests change no target memory: every check runs before the first byte moves.
"""
import copy
import ctypes
import fcntl
import threading
import time

import numpy as np

from . import cq as cqmod, shm
from .device import GIDS
from .enums import (
    IBV_ACCESS_LOCAL_WRITE as LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC as REMOTE_ATOMIC,
    IBV_ACCESS_REMOTE_READ as REMOTE_READ, IBV_ACCESS_REMOTE_WRITE as REMOTE_WRITE,
    IBV_QPS_ERR, IBV_QPS_RTR, IBV_QPS_RTS, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED,
    IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_GRH, IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_QP_OP_ERR,
    IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
    IBV_WC_SEND, IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR,
    IBV_WR_ATOMIC_CMP_AND_SWP as CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD as FETCH_AND_ADD,
    IBV_WR_RDMA_READ as READ, IBV_WR_RDMA_WRITE as WRITE, IBV_WR_RDMA_WRITE_WITH_IMM as WRITE_WITH_IMM,
    IBV_WR_SEND as SEND, IBV_WR_SEND_WITH_IMM as SEND_WITH_IMM)
from .mr import REGISTERED, W_ACCESS, W_ADDR, W_LENGTH, W_PD, W_VALID, segment_name

# Words of a QP segment's header (after magic and owner pid): the part of a QP a peer NIC may see.
Q_STATE, Q_ACCESS, Q_PD, Q_EXPECTED_PSN, Q_MIN_RNR_TIMER, Q_RQ_SIZE, Q_RQ_MAX_SGE, \
    Q_RQ_POSTED, Q_RQ_CONSUMED, Q_RQ_POLLED, Q_ALIVE, Q_RECV_CQ = range(2, 14)
# Words of one receive-queue slot: the posted WR, then (once consumed) its completion.
R_WR_ID, R_NUM_SGE, R_STATUS, R_OPCODE, R_BYTE_LEN, R_IMM, R_FLAGS = range(7)
R_SGES = 8  # then (addr, length, lkey) per SGE

PSN_MOD = 1 << 24
ROUTES_KEPT = 64   # a QP's fast path caches this many (rkey, lkey) pairs, as a NIC caches translations
WC_OPCODE = {WRITE: IBV_WC_RDMA_WRITE, WRITE_WITH_IMM: IBV_WC_RDMA_WRITE, SEND: IBV_WC_SEND,
             SEND_WITH_IMM: IBV_WC_SEND, READ: IBV_WC_RDMA_READ, CMP_AND_SWP: IBV_WC_COMP_SWAP,
             FETCH_AND_ADD: IBV_WC_FETCH_ADD}
NEEDS_ACCESS = {WRITE: REMOTE_WRITE, WRITE_WITH_IMM: REMOTE_WRITE, READ: REMOTE_READ,
                CMP_AND_SWP: REMOTE_ATOMIC, FETCH_AND_ADD: REMOTE_ATOMIC, SEND: 0, SEND_WITH_IMM: 0}
ATOMICS = (CMP_AND_SWP, FETCH_AND_ADD)
CONSUMES_RECEIVE = (SEND, SEND_WITH_IMM, WRITE_WITH_IMM)
# min_rnr_timer encodings (IB spec table 45), in milliseconds
RNR_TIMER_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96,
                1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92,
                122.88, 163.84, 245.76, 327.68, 491.52]

LOCAL_QPS = {}  # qp_num -> QP of this process
_attached_mrs = {}  # key -> Segment of another process's MR
_attached_qps = {}  # qp_num -> (Segment, ReceiveQueue) of another process's QP
_lock = threading.Lock()  # receive queues and atomics, across this process's threads (with fcntl for atomics)


# ---------------------------------------------------------------- finding peers' memory and QPs

def mr_segment(key):
    """The segment behind a key, wherever its MR lives; None if no valid MR has that key."""
    mr = REGISTERED.get(key)
    if mr is not None:
        return mr._segment
    seg = _attached_mrs.get(key)
    if seg is not None:
        if seg.header[W_VALID]:
            return seg
        del _attached_mrs[key]
        seg.close()
    seg = shm.Segment.attach(segment_name(key)) if key else None
    if seg is None or not seg.header[W_VALID]:
        return None
    _attached_mrs[key] = seg
    return seg


def qp_words(qp_num):
    """(shared header, segment, ReceiveQueue) of a QP by number, or None when no QP answers to it."""
    qp = LOCAL_QPS.get(qp_num)
    if qp is not None:
        return qp._words, qp._segment, qp._rq
    found = _attached_qps.get(qp_num)
    if found is not None and not found[0].header[Q_ALIVE]:
        del _attached_qps[qp_num]
        found[1].release()
        found[0].close()
        found = None
    if found is None:
        seg = shm.Segment.attach(f"qp-{qp_num:06x}")
        if seg is None or not seg.header[Q_ALIVE]:
            return None
        found = _attached_qps[qp_num] = (seg, ReceiveQueue(seg))
    seg, rq = found
    return seg.words, seg, rq


class ReceiveQueue:
    """A QP's receive queue, in its shared segment: slots its owner posts (Q_RQ_POSTED) and polls
    (Q_RQ_POLLED), which the peer's NIC consumes (Q_RQ_CONSUMED). Each counter has one writer.
    The owner's QP and CQ use post() and harvest(); the peer's NIC writes slots as it consumes them."""

    def __init__(self, seg, qp_num=0):
        h = seg.header
        self.header, self.size, self.stride = h, int(h[Q_RQ_SIZE]), R_SGES + 3 * int(h[Q_RQ_MAX_SGE])
        self.words = seg.bytes[:self.size * self.stride * 8].cast("Q")
        self.segment, self.qp_num, self.flushed = seg, qp_num, False

    @staticmethod
    def bytes_for(size, max_sge):
        """Room a queue of `size` receives of up to `max_sge` SGEs takes in the QP's segment."""
        return size * (R_SGES + 3 * max_sge) * 8

    def slot(self, n):
        """Where slot number n (counted from the start, not wrapped) begins in `words`."""
        return n % self.size * self.stride

    def post(self, wr_id, sges):
        """Queue one receive; False if the queue is full."""
        h = self.header
        posted = h[Q_RQ_POSTED]
        if posted - h[Q_RQ_POLLED] >= self.size:
            return False
        w, base = self.words, posted % self.size * self.stride
        w[base + R_WR_ID], w[base + R_NUM_SGE] = wr_id, len(sges)
        for addr, length, lkey in sges:
            w[base + R_SGES], w[base + R_SGES + 1], w[base + R_SGES + 2] = addr, length, lkey
            base += 3
        h[Q_RQ_POSTED] = posted + 1   # publish last: the peer's NIC consumes up to here
        return True

    def harvest(self, out, limit):
        """Move completed receives into `out` (up to `limit` entries in all); in ERR, flush first."""
        h = self.header
        polled, consumed = h[Q_RQ_POLLED], h[Q_RQ_CONSUMED]
        if polled == consumed:
            if h[Q_STATE] != IBV_QPS_ERR or self.flushed:
                return   # nothing arrived and nothing to flush: the common case, kept cheap
            self.flush()
            consumed = h[Q_RQ_CONSUMED]
        w, size, stride, qp_num, new_wc = self.words, self.size, self.stride, self.qp_num, cqmod.new_wc
        while polled < consumed and len(out) < limit:
            base = polled % size * stride
            out.append(new_wc(w[base + R_WR_ID], w[base + R_STATUS], w[base + R_OPCODE], w[base + R_BYTE_LEN],
                              qp_num, w[base + R_IMM], w[base + R_FLAGS]))
            polled += 1
        h[Q_RQ_POLLED] = polled

    def flush(self):
        """The QP entered ERR: every receive posted until now completes with WR_FLUSH_ERR (once)."""
        h, w = self.header, self.words
        with _lock:   # a peer's NIC stops consuming once it sees ERR, which the QP entered before this
            consumed, posted = h[Q_RQ_CONSUMED], h[Q_RQ_POSTED]
            for n in range(consumed, posted):
                base = self.slot(n)
                w[base + R_STATUS], w[base + R_OPCODE], w[base + R_BYTE_LEN], w[base + R_IMM], w[base + R_FLAGS] = \
                    IBV_WC_WR_FLUSH_ERR, 0, 0, 0, 0
            h[Q_RQ_CONSUMED] = posted
        self.flushed = True

    def reset(self):
        h = self.header
        h[Q_RQ_POSTED] = h[Q_RQ_CONSUMED] = h[Q_RQ_POLLED] = 0
        self.flushed = False

    def release(self):
        self.words.release()


def _region(seg, addr, length, pd, need):
    """Offset of [addr, addr+length) inside the MR of `seg`, or None if PD, access or bounds forbid it."""
    if seg is None:
        return None
    w = seg.header
    offset = addr - w[W_ADDR]
    if w[W_PD] != pd or not w[W_ACCESS] & need or offset < 0 or offset + length > w[W_LENGTH]:
        return None
    return offset


class _LockedWord:
    """Hold a word (or a receive queue) against other threads and processes: fcntl locks die with their holder."""

    def __init__(self, seg, offset):
        self.fd, self.offset = seg.fd, shm.HEADER_BYTES + offset

    def __enter__(self):
        _lock.acquire()
        fcntl.lockf(self.fd, fcntl.LOCK_EX, 8, self.offset)

    def __exit__(self, *exc):
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 8, self.offset)
        _lock.release()


# ---------------------------------------------------------------- the requester

class Pending:
    """A send WQE that is waiting: for an RNR timer, or for an ACK that did not come."""

    def __init__(self, wqe):
        self.wqe, self.deadline, self.rnr_left, self.retries_left = wqe, 0.0, None, None


def snapshot(wr):
    """Copy a posted WR, as the hardware copies it into its queue (inline data is read now)."""
    wqe = copy.copy(wr)
    wqe.next_wr = None
    if wr.send_flags & IBV_SEND_INLINE:
        wqe.inline_data = gather_inline(wr)
    return wqe


def gather_inline(wr):
    return b"".join(ctypes.string_at(addr, length) for addr, length, _ in wr.sges)


class Route:
    """What a NIC keeps in its caches for one connection and one pair of keys: the peer QP's context,
    its receive queue, and the translations of the local MR (lkey) and the remote one (rkey; 0 for
    a SEND). Built once, after the full checks; what can change afterwards (QP state, PSN, access
    flags, deregistration) is re-read on every WR."""
    __slots__ = ("dest_qp_num", "rkey", "lkey", "peer", "rq", "peer_cq", "mr_header", "mr_access", "remote_segment", "remote",
                 "base", "length", "local_mr", "local", "local_base", "local_length", "local_writable")

    def __init__(self, qp, rkey, lkey):
        mr = REGISTERED.get(lkey)
        found = qp_words(qp._dest_qp_num)
        if mr is None or mr.pd is not qp.pd or found is None or qp._dgid not in GIDS:
            raise LookupError
        self.dest_qp_num, self.rkey, self.lkey = qp._dest_qp_num, rkey, lkey
        self.peer, self.rq = found[1].header, found[2]
        self.peer_cq = cqmod.find_segment("cq", self.peer[Q_RECV_CQ])   # where its receives complete
        self.local_mr, self.local, self.local_base, self.local_length = mr, mr._segment.bytes, mr.buf, mr.length
        self.local_writable = mr.access & LOCAL_WRITE
        self.mr_header = self.remote_segment = self.remote = None
        self.mr_access = self.base = self.length = 0
        if rkey:
            seg = mr_segment(rkey)
            if seg is None or seg.header[W_PD] != self.peer[Q_PD]:
                raise LookupError
            h = seg.header
            self.mr_header, self.mr_access, self.remote_segment = h, h[W_ACCESS], seg
            self.remote, self.base, self.length = seg.bytes, h[W_ADDR], h[W_LENGTH]


def fast_post(qp, wr):
    """The common case in one pass: any operation with one SGE, not inline, on a healthy, idle connection.

    Makes the same checks as execute() (local key and bounds; peer QP alive, RTR/RTS, expecting our
    PSN, allowing the operation; remote key valid, same PD, the access, in bounds; a posted receive
    that fits), the constant ones through a Route cached on the QP. Returns False, having done
    nothing, when anything is unusual: the general path then handles it and reports the error.
    """
    sges = wr.sges
    if len(sges) != 1 or wr.send_flags & IBV_SEND_INLINE:
        return False
    addr, length, lkey = sges[0]
    opcode = wr.opcode
    need = NEEDS_ACCESS.get(opcode)
    if need is None:
        return False   # not an operation this NIC knows: the general path fails it
    rkey = wr.rkey if need else 0
    try:
        route = qp._routes.get((rkey, lkey))
        if route is None or route.dest_qp_num != qp._dest_qp_num:
            if len(qp._routes) >= ROUTES_KEPT:
                qp._routes.clear()
            route = qp._routes[rkey, lkey] = Route(qp, rkey, lkey)
        peer = route.peer
        state = peer[Q_STATE]
        if (state != IBV_QPS_RTR and state != IBV_QPS_RTS) or not peer[Q_ALIVE] \
                or peer[Q_EXPECTED_PSN] != qp._sq_psn or route.local_mr._closed:
            return False
        if need and (not peer[Q_ACCESS] & need or not route.mr_access & need or not route.mr_header[W_VALID]):
            return False
        start = addr - route.local_base
        if start < 0 or start + length > route.local_length:
            return False
        remote_length = 8 if opcode in ATOMICS else length
        if rkey:
            offset = wr.remote_addr - route.base
            if offset < 0 or offset + remote_length > route.length:
                return False
        if opcode in CONSUMES_RECEIVE:
            done = _fast_receive(qp, wr, route, start, length, offset if rkey else 0)
        elif opcode == WRITE:
            route.remote[offset:offset + length] = route.local[start:start + length]
            route.remote_segment.ring()
            done = True
        elif not route.local_writable:   # READ and atomics write their answer locally
            return False
        elif opcode == READ:
            route.local[start:start + length] = route.remote[offset:offset + length]
            done = True
        else:
            if length < 8 or wr.remote_addr & 7:
                return False
            old = _atomic(route.remote_segment, offset, opcode, wr.compare_add, wr.swap)
            route.local[start:start + 8] = old.to_bytes(8, "little")
            done = True
    except (LookupError, ValueError):   # nothing cacheable, or a peer closed since (its views released)
        qp._routes.pop((rkey, lkey), None)
        return False
    if not done:
        return False
    _advance_psn(qp, peer, remote_length)
    if wr.send_flags & IBV_SEND_SIGNALED or qp._sq_sig_all:
        flags = IBV_WC_WITH_IMM if opcode == WRITE_WITH_IMM or opcode == SEND_WITH_IMM else 0
        qp._send_cq.push(wr.wr_id, IBV_WC_SUCCESS, WC_OPCODE[opcode], length, qp.qp_num, 0, flags)
    return True


def _fast_receive(qp, wr, route, start, length, offset):
    """SEND, SEND_WITH_IMM or WRITE_WITH_IMM into the peer's next receive, if it has one that fits
    in one SGE; False (nothing done) otherwise."""
    peer, rq = route.peer, route.rq
    with _lock:
        consumed = peer[Q_RQ_CONSUMED]
        if consumed == peer[Q_RQ_POSTED]:
            return False   # no receive posted: the general path sends the RNR NAK
        w, base = rq.words, consumed % rq.size * rq.stride
        opcode = wr.opcode
        if opcode == WRITE_WITH_IMM:
            route.remote[offset:offset + length] = route.local[start:start + length]
            route.remote_segment.ring()
            wc_opcode = IBV_WC_RECV_RDMA_WITH_IMM
        else:
            addr, room, key = w[base + R_SGES:base + R_SGES + 3]
            seg = mr_segment(key)
            if w[base + R_NUM_SGE] != 1 or length > room or seg is None:
                return False
            h = seg.header
            at = addr - h[W_ADDR]
            if h[W_PD] != peer[Q_PD] or not h[W_ACCESS] & LOCAL_WRITE or at < 0 or at + room > h[W_LENGTH]:
                return False
            seg.bytes[at:at + length] = route.local[start:start + length]
            wc_opcode = IBV_WC_RECV
        with_imm = opcode != SEND
        w[base + R_STATUS], w[base + R_OPCODE], w[base + R_BYTE_LEN], w[base + R_IMM], w[base + R_FLAGS] = \
            IBV_WC_SUCCESS, wc_opcode, length, wr.imm_data if with_imm else 0, \
            IBV_WC_GRH | IBV_WC_WITH_IMM if with_imm else IBV_WC_GRH
        peer[Q_RQ_CONSUMED] = consumed + 1   # publish last: the owner's poll reads up to here
    if route.peer_cq is not None:
        cqmod.announce_to(route.peer_cq, wr.send_flags & IBV_SEND_SOLICITED)
    return True


def post(qp, wr):
    """Ring the doorbell for one validated WR: run it now if the send queue is idle, else queue it."""
    if qp._sq or qp._words[Q_STATE] == IBV_QPS_ERR:
        qp._sq.append(Pending(snapshot(wr)))
        progress(qp)
        return
    outcome = execute(qp, wr, None)
    if outcome is not None:  # must wait: keep a copy at the head of the queue
        pending = Pending(snapshot(wr))
        pending.deadline, pending.rnr_left, pending.retries_left = outcome
        qp._sq.append(pending)
        qp._send_cq.wait_for_timer(qp)


def progress(qp):
    """Work through the send queue: flush it in ERR, retry what waited long enough."""
    sq = qp._sq
    while sq:
        head = sq[0]
        if qp._words[Q_STATE] == IBV_QPS_ERR:
            sq.popleft()
            complete(qp, head.wqe, IBV_WC_WR_FLUSH_ERR)
            continue
        if head.deadline and time.monotonic() < head.deadline:
            return
        outcome = execute(qp, head.wqe, head)
        if outcome is not None:
            head.deadline, head.rnr_left, head.retries_left = outcome
            return
        sq.popleft()
    qp._send_cq.wait_for_timer(qp, False)


def complete(qp, wqe, status, byte_len=0):
    """Post the requester's completion: always on error, on success only if signaled."""
    if status == IBV_WC_SUCCESS:
        if not (wqe.send_flags & IBV_SEND_SIGNALED or qp._sq_sig_all):
            return
        opcode = WC_OPCODE[wqe.opcode]
        flags = IBV_WC_WITH_IMM if wqe.opcode in (WRITE_WITH_IMM, SEND_WITH_IMM) else 0
    else:
        opcode = flags = 0
        byte_len = 0
    qp._send_cq.push(wqe.wr_id, status, opcode, byte_len, qp.qp_num, 0, flags)


def fail(qp, wqe, status, peer_words=None):
    """An error completion: the requester (and for responder errors the responder) goes to ERR."""
    qp._words[Q_STATE] = IBV_QPS_ERR
    if peer_words is not None:
        peer_words[Q_STATE] = IBV_QPS_ERR
    complete(qp, wqe, status)


def _gather(qp, wqe):
    """Local data of a WRITE or SEND as a numpy array (a view when one SGE), or an error status."""
    if wqe.send_flags & IBV_SEND_INLINE:
        data = getattr(wqe, "inline_data", None)
        return np.frombuffer(data if data is not None else gather_inline(wqe), dtype=np.uint8)
    pieces = []
    for addr, length, lkey in wqe.sges:
        mr = REGISTERED.get(lkey)
        if mr is None or mr.pd is not qp.pd:
            return IBV_WC_LOC_QP_OP_ERR
        offset = addr - mr.buf
        if offset < 0 or offset + length > mr.length:
            return IBV_WC_LOC_PROT_ERR
        pieces.append(mr.data[offset:offset + length])
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _scatter_local(qp, wqe, data):
    """Write a READ response or an atomic's old value into the local SGEs; False if they forbid it."""
    targets = []
    for addr, length, lkey in wqe.sges:
        mr = REGISTERED.get(lkey)
        offset = addr - mr.buf if mr is not None else -1
        if mr is None or mr.pd is not qp.pd or not mr.access & LOCAL_WRITE or offset < 0 \
                or offset + length > mr.length:
            return False
        targets.append((mr.data, offset, length))
    _scatter(targets, data)
    return True


def _scatter(targets, data):
    done = 0
    for buf, offset, length in targets:
        n = min(length, len(data) - done)
        if n <= 0:
            break
        buf[offset:offset + n] = data[done:done + n]
        done += n


def _path_answers(qp):
    """Would a packet from this QP reach a responder? Returns the peer's header, or None (silence)."""
    if qp._dgid not in GIDS:
        return None  # a GID that is not soft0's: nobody answers, and the requester times out
    found = qp_words(qp._dest_qp_num)
    if found is None:
        return None
    words = found[0]
    state = words[Q_STATE]
    if (state != IBV_QPS_RTR and state != IBV_QPS_RTS) or words[Q_EXPECTED_PSN] != qp._sq_psn:
        return None  # a QP not ready to receive, or a PSN it does not expect, drops the packet
    return found


def execute(qp, wqe, pending):
    """Carry out one WQE end to end. Returns None when it completed, else (deadline, rnr_left, retries_left)."""
    opcode = wqe.opcode
    if opcode not in WC_OPCODE:
        fail(qp, wqe, IBV_WC_LOC_QP_OP_ERR)
        return None
    length = 0
    for sge in wqe.sges:
        length += sge[1]
    payload = None
    if opcode in (WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM):
        payload = _gather(qp, wqe)
        if isinstance(payload, int):
            fail(qp, wqe, payload)
            return None

    peer = _path_answers(qp)
    if peer is None:
        return _wait_for_ack(qp, wqe, pending)
    peer_words, peer_seg, peer_rq = peer

    # responder checks, in rxe's order
    need = NEEDS_ACCESS[opcode]
    if need and not peer_words[Q_ACCESS] & need:
        fail(qp, wqe, IBV_WC_REM_INV_REQ_ERR, peer_words)
        return None
    if opcode in CONSUMES_RECEIVE:
        with _lock:
            outcome = _respond_with_receive(qp, wqe, pending, peer_words, peer_rq, payload, length)
    else:
        outcome = _respond_rdma(qp, wqe, peer_words, payload, length)
    return outcome


def _respond_rdma(qp, wqe, peer_words, payload, length):
    """RDMA WRITE, READ or an atomic into the peer's memory."""
    opcode = wqe.opcode
    remote_length = 8 if opcode in ATOMICS else length
    seg = mr_segment(wqe.rkey)
    offset = _region(seg, wqe.remote_addr, remote_length, peer_words[Q_PD], NEEDS_ACCESS[opcode])
    if offset is None:
        fail(qp, wqe, IBV_WC_REM_ACCESS_ERR, peer_words)
        return None
    target = seg.data
    if opcode == WRITE:
        target[offset:offset + length] = payload
        seg.ring()
    elif opcode == READ:
        if not _scatter_local(qp, wqe, target[offset:offset + length]):
            _advance_psn(qp, peer_words, remote_length)
            fail(qp, wqe, IBV_WC_LOC_PROT_ERR)
            return None
    else:
        old = _atomic(seg, offset, opcode, wqe.compare_add, wqe.swap)
        if not _scatter_local(qp, wqe, np.frombuffer(old.to_bytes(8, "little"), dtype=np.uint8)):
            _advance_psn(qp, peer_words, remote_length)
            fail(qp, wqe, IBV_WC_LOC_PROT_ERR)
            return None
    _advance_psn(qp, peer_words, remote_length)
    complete(qp, wqe, IBV_WC_SUCCESS, length)
    return None


def _atomic(seg, offset, opcode, compare_add, swap):
    """Atomic on an 8-byte word in shared memory: held against every other thread and process."""
    word = seg.data[offset:offset + 8].view(np.uint64)
    with _LockedWord(seg, offset):
        old = int(word[0])
        if opcode == FETCH_AND_ADD:
            word[0] = (old + compare_add) % (1 << 64)
        elif old == compare_add:
            word[0] = swap
    seg.ring()
    return old


def _respond_with_receive(qp, wqe, pending, peer_words, rq, payload, length):
    """SEND, SEND_WITH_IMM and WRITE_WITH_IMM: each consumes the peer's next posted receive."""
    consumed = int(peer_words[Q_RQ_CONSUMED])
    if consumed == peer_words[Q_RQ_POSTED]:
        return _wait_for_receive(qp, wqe, pending)
    peer_pd = peer_words[Q_PD]
    opcode = wqe.opcode
    solicited = bool(wqe.send_flags & IBV_SEND_SOLICITED)
    if opcode == WRITE_WITH_IMM:
        seg = mr_segment(wqe.rkey)
        offset = _region(seg, wqe.remote_addr, length, peer_pd, REMOTE_WRITE)
        if offset is None:
            fail(qp, wqe, IBV_WC_REM_ACCESS_ERR, peer_words)
            return None
        seg.data[offset:offset + length] = payload
        seg.ring()
        wc_opcode = IBV_WC_RECV_RDMA_WITH_IMM
    else:
        targets = _receive_targets(rq, consumed, peer_pd, length)
        if targets is None:  # the receive is too small or names memory it may not use
            _complete_receive(peer_words, rq, consumed, IBV_WC_LOC_QP_OP_ERR, 0, 0, 0, 0, solicited)
            fail(qp, wqe, IBV_WC_REM_OP_ERR, peer_words)
            return None
        _scatter(targets, payload)
        wc_opcode = IBV_WC_RECV
    with_imm = opcode != SEND
    _complete_receive(peer_words, rq, consumed, IBV_WC_SUCCESS, wc_opcode, length,
                      wqe.imm_data if with_imm else 0, IBV_WC_GRH | (IBV_WC_WITH_IMM if with_imm else 0), solicited)
    _advance_psn(qp, peer_words, length)
    complete(qp, wqe, IBV_WC_SUCCESS, length)
    return None


def _receive_targets(rq, n, pd, length):
    """Where receive number n scatters a message of `length` bytes; None if it cannot."""
    targets, room = [], 0
    w, base = rq.words, rq.slot(n)
    for i in range(w[base + R_NUM_SGE]):
        addr, sge_length, lkey = w[base + R_SGES + 3 * i:base + R_SGES + 3 * i + 3]
        seg = mr_segment(lkey)
        offset = _region(seg, addr, sge_length, pd, LOCAL_WRITE)
        if offset is None:
            return None
        targets.append((seg.data, offset, sge_length))
        room += sge_length
    return targets if room >= length else None


def _complete_receive(words, rq, consumed, status, opcode, byte_len, imm, flags, solicited):
    w, base = rq.words, rq.slot(consumed)
    w[base + R_STATUS], w[base + R_OPCODE], w[base + R_BYTE_LEN], w[base + R_IMM], w[base + R_FLAGS] = \
        status, opcode, byte_len, imm, flags
    words[Q_RQ_CONSUMED] = consumed + 1  # publish last: the owner's poll reads up to here
    cqmod.announce(words[Q_RECV_CQ], solicited)


def _advance_psn(qp, peer_words, length):
    packets = (length + qp._mtu_bytes - 1) // qp._mtu_bytes or 1
    qp._sq_psn = (qp._sq_psn + packets) % PSN_MOD
    peer_words[Q_EXPECTED_PSN] = (peer_words[Q_EXPECTED_PSN] + packets) % PSN_MOD


def _wait_for_receive(qp, wqe, pending):
    """RNR NAK: the peer has no receive posted. Retry after its min_rnr_timer, rnr_retry times (7: forever)."""
    first = pending is None or pending.rnr_left is None
    rnr_left = qp._rnr_retry if first else pending.rnr_left
    if rnr_left == 0:
        fail(qp, wqe, IBV_WC_RNR_RETRY_EXC_ERR)
        return None
    found = qp_words(qp._dest_qp_num)
    timer_ms = RNR_TIMER_MS[int(found[0][Q_MIN_RNR_TIMER]) % 32] if found else 0.01
    retries_left = None if pending is None else pending.retries_left
    return time.monotonic() + timer_ms / 1000.0, (rnr_left if rnr_left == 7 else rnr_left - 1), retries_left


def _wait_for_ack(qp, wqe, pending):
    """No answer: retransmit after the ACK timeout (4.096 us * 2**timeout; 0 = never), retry_cnt times.
    As in rxe, retry_cnt 7 retries forever (the spec reserves that meaning for rnr_retry only)."""
    first = pending is None or pending.retries_left is None
    if not first and pending.retries_left == 0:
        fail(qp, wqe, IBV_WC_RETRY_EXC_ERR)
        return None
    retries_left = qp._retry_cnt if first or qp._retry_cnt == 7 else pending.retries_left - 1
    wait = float("inf") if qp._timeout == 0 else 4.096e-6 * (1 << qp._timeout)
    rnr_left = None if pending is None else pending.rnr_left
    return time.monotonic() + wait, rnr_left, retries_left
