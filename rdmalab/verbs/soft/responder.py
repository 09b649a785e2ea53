"""The responder half of soft0's NIC: what the peer's NIC does when a request arrives.

It checks the request against the target QP (state, expected PSN, access flags), its receive queue
and the remote key, in the order rxe checks them, and only then touches memory: a refused request
changes no target byte. It answers as a responder answers on the wire:
- ACK, with the data of a READ or the old value of an atomic;
- no answer at all (no such QP, not in RTR/RTS, a PSN it does not expect): the requester times out;
- RNR NAK: a SEND or WRITE_WITH_IMM found no posted receive (with the QP's min_rnr_timer);
- NAK with a status: invalid request (access flags), remote access (rkey, PD, bounds), remote
  operation (a receive too small); the responder's QP goes to ERR.

An rkey may be a memory window's: mr_segment() finds its binding (mr.Window) under the key as it finds
an MR, and the checks are the same (plus: a type 2 window serves only the QP it was bound on). A QP on
a shared receive queue takes the SRQ's next receive into its own queue when a message needs one
(srq.Ring.take); a SEND_WITH_INV invalidates its key once its data has landed.

`respond()` is the seam between the two halves: the requester (rdmalab.verbs.soft.requester) calls
it in its own process, reaching the target's QP and memory through shared memory, so the target's
process runs no code. A link that carries requests as packets would call the same function on the
receiving host.
"""
import fcntl
import struct
import threading

from rdmalab.proc.procstat import pid_alive, pid_exists

from . import counters, cq as cqmod, mr as mrmod, shm, srq as srqmod
from .constants import (
    IBV_ACCESS_LOCAL_WRITE as LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC as REMOTE_ATOMIC,
    IBV_ACCESS_REMOTE_READ as REMOTE_READ, IBV_ACCESS_REMOTE_WRITE as REMOTE_WRITE,
    IBV_QPS_ERR, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_UC, IBV_SEND_SOLICITED, IBV_WC_GRH, IBV_WC_LOC_QP_OP_ERR,
    IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_OP_ERR,
    IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR, IBV_MW_TYPE_2,
    IBV_WR_ATOMIC_FETCH_AND_ADD as FETCH_AND_ADD,
    IBV_WR_RDMA_READ as READ, IBV_WR_RDMA_WRITE as WRITE, IBV_WR_RDMA_WRITE_WITH_IMM as WRITE_WITH_IMM,
    IBV_WR_SEND as SEND, IBV_WR_SEND_WITH_INV as SEND_WITH_INV)
from .operations import ATOMICS, CONSUMES_RECEIVE, NEEDS_ACCESS
from .psn import PSN_MODULUS
from .layout import (M_ACCESS, M_MW_TYPE, M_ADDR, M_LENGTH, M_MR, M_PD, M_QP, M_VALID, Q_ACCESS, Q_ALIVE, Q_EXPECTED_PSN, Q_GENERATION,
                     Q_MAX_DEST_RD_ATOMIC, Q_MIN_RNR_TIMER, Q_PD, Q_RECV_CQ, Q_RQ_CONSUMED, Q_RQ_MAX_SGE, Q_RQ_POLLED, Q_RQ_POSTED,
                     Q_RQ_SIZE, Q_STATE, Q_TYPE, R_BYTE_LEN, R_FLAGS, R_IMM, R_NUM_SGE, R_OPCODE, R_SGES, R_SRC_QP,
                     R_STATUS, R_WR_ID, Q_NUM, Q_PATH_MTU, Q_SEQ_NAKED, Q_SRQ, S_ALIVE, W_OWNER_PID)

ACK, NO_ANSWER, RNR_NAK = IBV_WC_SUCCESS, -1, -2   # besides NAKs, which carry their completion status
# A SEND_WITH_INV's receive: rxe passes the kernel's IB_WC_WITH_INVALIDATE (1 << 2) to user space as it is,
# where libibverbs reads that bit as IBV_WC_IP_CSUM_OK (IBV_WC_WITH_INV is 1 << 3): soft0 reports what rxe does
WITH_INVALIDATE = 1 << 2
# min_rnr_timer encodings (IB spec table 45), in milliseconds
RNR_TIMER_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96,
                1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92,
                122.88, 163.84, 245.76, 327.68, 491.52]

LOCAL_QPS = {}        # qp_num -> PeerQP of this process's QPs
_attached_mrs = {}    # key -> Segment of another process's MR
_attached_qps = {}    # qp_num -> PeerQP of another process's QP


def forget_the_dead():
    """Drop, and unmap, the peers' QPs and MRs this process attached whose owner has died (a NIC process
    that serves many programs calls it now and then: their files go when the next soft0 process starts)."""
    for qpn, peer in list(_attached_qps.items()):
        if not pid_alive(int(peer.segment.header[W_OWNER_PID])):
            del _attached_qps[qpn]
            peer.rq.release()
            peer.segment.close()
    for key, seg in list(_attached_mrs.items()):   # (an MR's segment, or a window's binding)
        header = seg.header
        if header is not None and not pid_alive(int(header[W_OWNER_PID])):
            del _attached_mrs[key]
            if hasattr(seg, "close"):
                seg.close()
LOCK = threading.Lock()   # receive queues and atomics, across this process's threads
# A receive slot's words, read or written in one call each: a SEND's hot path, fewer Python steps
SLOT_HEAD = struct.Struct("=2Q")   # R_WR_ID, R_NUM_SGE
SLOT_ENTRY = struct.Struct("=8Q")  # R_WR_ID ... R_SRC_QP: what a completion reports
COMPLETION = struct.Struct("=6Q")  # R_STATUS, R_OPCODE, R_BYTE_LEN, R_IMM, R_FLAGS, R_SRC_QP
SGE = struct.Struct("=3Q")         # addr, length, lkey


def enter(header, state):
    """Move a QP (by its shared header) to `state`. Every change a responder would see bumps the
    QP's generation, so that what a requester cached about it (requester.Shortcut) is dropped. Entering
    ERR flushes the receives posted and not used (their completions appear when the CQ is polled);
    as on rxe, their CQ's event is raised even if it was armed for solicited completions only."""
    flushing = state == IBV_QPS_ERR and header[Q_STATE] != IBV_QPS_ERR and not header[Q_SRQ] \
        and header[Q_RQ_POSTED] > header[Q_RQ_CONSUMED]
    header[Q_STATE] = state
    header[Q_GENERATION] += 1
    if flushing:
        cqmod.announce(header[Q_RECV_CQ], solicited=True)


# ---------------------------------------------------------------- finding the target's QP and memory

def mr_segment(key):
    """The segment behind a key, wherever its MR lives; None if no valid MR has that key."""
    seg = mrmod.SEGMENTS.get(key)
    if seg is not None:
        return seg
    seg = _attached_mrs.get(key)
    if seg is not None:
        if seg.header[M_VALID]:
            return seg
        del _attached_mrs[key]
        seg.close()
    seg = shm.Segment.attach(mrmod.segment_name(key)) if key else None
    if seg is None or not seg.header[M_VALID]:
        return None
    if seg.header[M_MR]:   # a memory window's binding: its words, over the bytes of the MR it is bound in
        mr = mr_segment(seg.header[M_MR])
        if mr is None:
            return None
        seg = mrmod.Window(seg, mr)
    _attached_mrs[key] = seg
    return seg


def invalidate(key):
    """LOCAL_INV or SEND_WITH_INV of `key` (rxe_invalidate_mw): only a valid type 2 window's key may be
    invalidated (rxe invalidates only fast-registered MRs, which soft0 has not). Returns success."""
    seg = mr_segment(key) if key & mrmod.WINDOW_KEY else None
    if seg is None or seg.header[M_MW_TYPE] != IBV_MW_TYPE_2 or not seg.header[M_VALID]:
        return False
    seg.header[M_VALID] = 0
    return True


def region_of(seg):
    """(address, length) of the buffer the MR of `seg` registered."""
    return seg.header[M_ADDR], seg.header[M_LENGTH]


def region(seg, addr, length, pd, need):
    """Offset of [addr, addr+length) inside the MR of `seg`, or None if PD, access or bounds forbid it."""
    if seg is None:
        return None
    h = seg.header
    offset = addr - h[M_ADDR]
    if not h[M_VALID] or h[M_PD] != pd or not h[M_ACCESS] & need or offset < 0 or offset + length > h[M_LENGTH]:
        return None
    return offset


def remote_region(seg, addr, length, h, need):
    """region() for a request's rkey at the QP whose header is h: a type 2 memory window serves only the
    QP it was bound on (M_QP), an MR or a type 1 window any QP of its PD."""
    offset = region(seg, addr, length, h[Q_PD], need)
    if offset is not None and seg.header[M_QP] and seg.header[M_QP] != h[Q_NUM]:
        return None
    return offset


def refusal(seg, addr, length, h, need):
    """Why remote_region() refuses [addr, addr+length) of `seg`'s MR to the QP whose header is h, as
    (rule, figures), in the order its checks run; None when it allows it. Not on the data path: read after
    a completion failed (rdmalab.lessons.explain), and held to remote_region() by tests/soft/test_explain.py."""
    if seg is None:
        return "no such key", {}
    m = seg.header
    figures = {"start": int(m[M_ADDR]), "length": int(m[M_LENGTH]), "access": int(m[M_ACCESS]), "need": need}
    if not m[M_VALID]:
        return "key invalidated", figures
    if m[M_PD] != h[Q_PD]:
        return "another PD", figures
    if not m[M_ACCESS] & need:
        return "access", figures
    offset = addr - m[M_ADDR]
    if offset < 0:
        return "before the start", {**figures, "by": -offset}
    if offset + length > m[M_LENGTH]:
        return "past the end", {**figures, "by": offset + length - m[M_LENGTH]}
    if m[M_QP] and m[M_QP] != h[Q_NUM]:
        return "window of another QP", {**figures, "qp_num": int(m[M_QP])}
    return None


class PeerQP:
    """A QP as a NIC reaches it: its shared header, its receive queue, and the CQ its receives
    complete on and the SRQ it takes them from, if any (found when first needed)."""
    __slots__ = ("header", "rq", "segment", "_cq", "_srq")

    def __init__(self, segment, rq):
        self.header, self.rq, self.segment, self._cq, self._srq = segment.header, rq, segment, None, None

    def alive(self):
        try:
            return bool(self.header[Q_ALIVE])
        except (TypeError, ValueError):   # its owner closed it (this process's views released)
            return False

    def owner_died(self):
        """True if the process that owns this QP has died without closing it (killed, say). Its QP is
        gone then, as a dead process's QPs are destroyed on a real host: it is marked so (not alive,
        a new generation) for every NIC that still has it mapped, and requests to it go unanswered.
        (Asked from the data path, so with kill(pid, 0) alone: a killed process counts as gone once its
        parent has waited for it, which a shell, a notebook server or rdmalab does at once.)"""
        try:
            h = self.header
            if not h[Q_ALIVE] or pid_exists(h[W_OWNER_PID]):
                return False
            h[Q_ALIVE] = 0
            h[Q_GENERATION] += 1
            return True
        except (TypeError, ValueError):
            return False

    def cq_segment(self):
        """The segment of the CQ this QP's receives complete on (None if it is gone)."""
        if self._cq is None:
            self._cq = cqmod.find_segment("cq", self.header[Q_RECV_CQ])
        return self._cq

    def announce(self, solicited):
        """A receive completed: wake the CQ's poller, raise an event if it is armed."""
        cq = self._cq or self.cq_segment()
        if cq is not None:
            cqmod.announce_to(cq, solicited)

    def take_shared_receive(self):
        """A QP on an SRQ: move the SRQ's next receive into this QP's receive queue; False if none is left."""
        ring = self._srq
        if ring is None or ring.header is None or not ring.header[S_ALIVE]:   # (none yet, closed or resized)
            ring = self._srq = srqmod.find(self.header[Q_SRQ])
        return ring is not None and ring.take(self.rq)


def peer_qp(qp_num):
    """The QP numbered qp_num on this host, or None when no QP answers to it."""
    found = LOCAL_QPS.get(qp_num)
    if found is not None:
        return found
    found = _attached_qps.get(qp_num)
    if found is not None and not found.header[Q_ALIVE]:
        del _attached_qps[qp_num]
        found.rq.release()
        found.segment.close()
        found = None
    if found is None:
        seg = shm.Segment.attach(f"qp-{qp_num:06x}")
        if seg is None or not seg.header[Q_ALIVE]:
            return None
        found = _attached_qps[qp_num] = PeerQP(seg, ReceiveQueue(seg))
    return found


class ReceiveQueue:
    """A QP's receive queue, in its shared segment: slots its owner posts (Q_RQ_POSTED) and polls
    (Q_RQ_POLLED), which the peer's NIC consumes (Q_RQ_CONSUMED). Each counter has one writer.
    The owning QP and its CQ call post() and harvest(); a responder calls scatter() and complete()."""

    def __init__(self, seg, qp_num=0):
        h = seg.header
        self.header, self.size, self.stride = h, int(h[Q_RQ_SIZE]), R_SGES + 3 * int(h[Q_RQ_MAX_SGE])
        self.raw = seg.bytes[:self.size * self.stride * 8]
        self.words = self.raw.cast("Q")
        self.qp_num, self.flushed = qp_num, False

    @staticmethod
    def bytes_for(size, max_sge):
        """Room a queue of `size` receives of up to `max_sge` SGEs takes in the QP's segment."""
        return size * (R_SGES + 3 * max_sge) * 8

    def slot(self, n):
        """Where receive number n (counted from the start, not wrapped) begins in `words`."""
        return n % self.size * self.stride

    # ------------------------------------------------------------ the owner's side

    def full(self):
        h = self.header
        return h[Q_RQ_POSTED] - h[Q_RQ_POLLED] >= self.size

    def post(self, wr_id, sges):
        """Queue one receive; False if the queue is full."""
        h = self.header
        posted = h[Q_RQ_POSTED]
        if posted - h[Q_RQ_POLLED] >= self.size:
            return False
        raw, at = self.raw, posted % self.size * self.stride * 8
        SLOT_HEAD.pack_into(raw, at + R_WR_ID * 8, wr_id, len(sges))
        at += R_SGES * 8
        for addr, length, lkey in sges:
            SGE.pack_into(raw, at, addr, length, lkey)
            at += SGE.size
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
        raw, size, stride, qp_num, new_wc = self.raw, self.size, self.stride * 8, self.qp_num, cqmod.new_wc
        while polled < consumed and len(out) < limit:
            wr_id, _, status, opcode, byte_len, imm, flags, src_qp = SLOT_ENTRY.unpack_from(raw, polled % size * stride)
            out.append(new_wc(wr_id, status, opcode, byte_len, qp_num, imm, flags, src_qp))
            polled += 1
        h[Q_RQ_POLLED] = polled

    def waiting(self):
        """Completed receives not polled yet."""
        return self.header[Q_RQ_CONSUMED] - self.header[Q_RQ_POLLED]

    def posted_ids(self):
        """The wr_ids of the receives posted and not yet consumed, oldest first (the glass-box view)."""
        h, words = self.header, self.words
        return [int(words[self.slot(n) + R_WR_ID]) for n in range(h[Q_RQ_CONSUMED], h[Q_RQ_POSTED])]

    def flush(self):
        """The QP entered ERR: every receive posted until now completes with WR_FLUSH_ERR (once)."""
        h = self.header
        with LOCK:   # a peer's NIC stops consuming once it sees ERR, which the QP entered before this
            for n in range(h[Q_RQ_CONSUMED], h[Q_RQ_POSTED]):
                self.complete(n, IBV_WC_WR_FLUSH_ERR, 0, 0, 0, 0)
        self.flushed = True

    def reset(self):
        h = self.header
        h[Q_RQ_POSTED] = h[Q_RQ_CONSUMED] = h[Q_RQ_POLLED] = 0
        self.flushed = False

    def release(self):
        self.words.release()
        self.raw.release()

    # ------------------------------------------------------------ the responder's side

    def scatter(self, n, payload, pd):
        """Copy `payload` into receive number n's SGEs; False if they are too small (nothing copied) or
        name memory the receive may not use. As rxe's copy_data: an SGE is checked only for the bytes
        that land in it, when they do, so a zero-length message checks no key, and the SGEs filled
        before a bad one keep what they got."""
        w, base = self.words, n % self.size * self.stride
        sges = [w[base + R_SGES + 3 * i:base + R_SGES + 3 * i + 3] for i in range(w[base + R_NUM_SGE])]
        if sum(length for _, length, _ in sges) < len(payload):
            return False
        done = 0
        for addr, length, lkey in sges:
            take = min(length, len(payload) - done)
            if not take:
                if done == len(payload):
                    break
                continue
            seg = mr_segment(lkey)
            offset = region(seg, addr, take, pd, LOCAL_WRITE)
            if offset is None:
                counters.copied_bytes += done   # (the SGEs filled before this one keep their bytes)
                return False
            seg.bytes[offset:offset + take] = payload[done:done + take]
            done += take
        counters.copied_bytes += done
        return True

    def complete(self, n, status, opcode, byte_len, imm, flags, src_qp=0):
        """Receive number n completed: its completion, then the count the owner polls up to."""
        # src_qp: a datagram's sender; 0 on a connection, as rxe reports
        COMPLETION.pack_into(self.raw, (n % self.size * self.stride + R_STATUS) * 8, status, opcode, byte_len, imm,
                             flags, src_qp)
        self.header[Q_RQ_CONSUMED] = n + 1   # publish last: the owner's poll reads up to here


# ---------------------------------------------------------------- answering one request

def respond(peer, wqe, payload, length, psn, count, mtu=None):
    """Carry out the request `wqe` (opcode, remote_addr, rkey, imm_data, send_flags, compare_add, swap)
    at `peer`, arriving as `count` packets from sequence number `psn` on (psn.packets(): the requester
    segments it at its path MTU, `mtu` bytes; None: its packets are not checked against the responder's).
    `payload` holds the data of a WRITE or SEND (`length` bytes). Returns (answer, data): ACK with a READ's
    bytes or an atomic's old value (else None), NO_ANSWER, RNR_NAK with the timer in ms, or a NAK's status."""
    h = peer.header
    state = h[Q_STATE]
    if (state != IBV_QPS_RTR and state != IBV_QPS_RTS) or not h[Q_ALIVE]:
        return NO_ANSWER, None   # a QP not ready to receive drops the packet
    if h[Q_EXPECTED_PSN] != psn:
        behind = (h[Q_EXPECTED_PSN] - psn) % PSN_MODULUS
        if h[Q_TYPE] == IBV_QPT_UC:
            h[Q_EXPECTED_PSN] = psn   # UC never retries: a new message is taken from whatever PSN it starts at
        elif behind < PSN_MODULUS // 2:   # already taken: duplicates (rxe counts each such packet)
            counters.count("duplicate_request", min(behind, count))
            if behind < count:
                # it began behind: its first packets are duplicates, and the one at the expected PSN is a
                # middle or last packet of a message the responder never saw begin, an invalid request
                return _refuse(h, IBV_WC_REM_INV_REQ_ERR)
            return NO_ANSWER, None
        else:   # ahead of what it expects: rxe NAKs the first such request (a sequence error), then drops them
            if not h[Q_SEQ_NAKED]:
                h[Q_SEQ_NAKED] = 1
                counters.count("out_of_seq_request")
            return NO_ANSWER, None   # (the requester will retry)
    elif h[Q_SEQ_NAKED]:
        h[Q_SEQ_NAKED] = 0
    opcode = wqe.opcode
    need = NEEDS_ACCESS[opcode]
    if need and not h[Q_ACCESS] & need or need & (REMOTE_READ | REMOTE_ATOMIC) and not h[Q_MAX_DEST_RD_ATOMIC]:
        return _refuse(h, IBV_WC_REM_INV_REQ_ERR)   # a request it may not serve, or a READ/atomic with no resources
    if opcode in CONSUMES_RECEIVE:
        with LOCK:
            return _into_receive(peer, h, wqe, payload, length, count)
    reach = 8 if opcode in ATOMICS else length
    if not reach:
        h[Q_EXPECTED_PSN] = (psn + count) % PSN_MODULUS
        return ACK, (b"" if opcode == READ else None)   # a zero-length WRITE or READ names no memory: no key is checked
    seg = _attached_mrs.get(wqe._rkey) or mrmod.SEGMENTS.get(wqe._rkey) or mr_segment(wqe._rkey)
    offset = remote_region(seg, wqe._remote_addr, reach, h, need)
    if offset is None:
        return _refuse(h, IBV_WC_REM_ACCESS_ERR)
    if opcode == WRITE and mtu and not fits_path_mtu(length, mtu, h):
        return _refuse(h, IBV_WC_REM_INV_REQ_ERR)
    if opcode == WRITE:
        seg.bytes[offset:offset + length] = payload
        counters.copied_bytes += length
        seg.ring()
        data = None
    elif opcode == READ:
        data = seg.bytes[offset:offset + length]
    elif wqe._remote_addr & 7:   # (post_send refuses these; an extended QP's wr_atomic_* sends them)
        return _refuse(h, IBV_WC_REM_INV_REQ_ERR)   # an atomic needs an aligned word
    else:
        data = atomic(seg, offset, opcode, wqe._compare_add, wqe._swap).to_bytes(8, "little")
    h[Q_EXPECTED_PSN] = (psn + count) % PSN_MODULUS
    return ACK, data


def fits_path_mtu(length, mtu, h):
    """Whether a WRITE of `length` bytes, sent in packets of `mtu` bytes, fits the responder's path MTU as
    rxe checks it: while more than one MTU is left, a packet must carry exactly one MTU; the last, all that
    is left. So both sides must agree on the MTU for a WRITE of more than the smaller one (rxe: a NAK,
    invalid request, and both QPs in ERR)."""
    own = 128 << h[Q_PATH_MTU]
    first = min(length, mtu)
    return first == own if length > own else first == length


def _refuse(h, status):
    """A request the responder may not carry out: an RC QP enters ERR and NAKs it with `status`; a UC QP
    has nobody to tell, so it drops the message and carries on (as rxe does)."""
    if h[Q_TYPE] == IBV_QPT_UC:
        return NO_ANSWER, None
    enter(h, IBV_QPS_ERR)
    return status, None


def _into_receive(peer, h, wqe, payload, length, count):
    """SEND, SEND_WITH_IMM and WRITE_WITH_IMM: each consumes the peer's next posted receive."""
    consumed = h[Q_RQ_CONSUMED]
    if consumed == h[Q_RQ_POSTED] and not (h[Q_SRQ] and peer.take_shared_receive()):
        counters.count("send_rnr_err")
        return RNR_NAK, RNR_TIMER_MS[h[Q_MIN_RNR_TIMER] % 32]
    opcode, rq = wqe.opcode, peer.rq
    solicited = wqe.send_flags & IBV_SEND_SOLICITED
    if opcode == WRITE_WITH_IMM and length:   # (a zero-length one names no memory: only its receive counts)
        seg = mr_segment(wqe._rkey)
        offset = remote_region(seg, wqe._remote_addr, length, h, REMOTE_WRITE)
        if offset is None:
            if h[Q_TYPE] == IBV_QPT_UC:
                return _refuse(h, IBV_WC_REM_ACCESS_ERR)
            rq.complete(consumed, IBV_WC_REM_ACCESS_ERR, 0, 0, 0, 0)   # rxe had taken the receive: it fails too
            enter(h, IBV_QPS_ERR)
            peer.announce(solicited)
            return IBV_WC_REM_ACCESS_ERR, None
        seg.bytes[offset:offset + length] = payload
        counters.copied_bytes += length
        seg.ring()
    elif opcode != WRITE_WITH_IMM and not rq.scatter(consumed, payload, h[Q_PD]):   # the receive is too small, or names memory it may not use
        rq.complete(consumed, IBV_WC_LOC_QP_OP_ERR, 0, 0, 0, 0)
        enter(h, IBV_QPS_ERR)
        peer.announce(solicited)
        return IBV_WC_REM_OP_ERR, None
    if opcode == SEND_WITH_INV and not invalidate(wqe.imm_data):   # (after the data, as rxe)
        rq.complete(consumed, IBV_WC_REM_INV_REQ_ERR, 0, 0, 0, 0)   # a key it may not invalidate: rxe fails the
        enter(h, IBV_QPS_ERR)                                        # receive and its QP, yet ACKs the SEND
        peer.announce(solicited)
        return ACK, None
    received(peer, wqe, consumed, length, count)
    return ACK, None


def receive_completion(opcode):
    """The opcode and flags of the receive completion a message of `opcode` makes. All but a plain SEND
    carry a 32-bit value in imm_data: the immediate, or for SEND_WITH_INV the key it invalidated."""
    if opcode == SEND:
        return IBV_WC_RECV, IBV_WC_GRH
    if opcode == WRITE_WITH_IMM:
        return IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_GRH | IBV_WC_WITH_IMM
    return IBV_WC_RECV, IBV_WC_GRH | (WITH_INVALIDATE if opcode == SEND_WITH_INV else IBV_WC_WITH_IMM)


def received(peer, wqe, consumed, length, count):
    """The message of `wqe` landed (in memory, or in receive number `consumed`'s buffers): complete
    that receive, expect the next PSN, and tell the CQ."""
    opcode = wqe.opcode
    wc_opcode, flags = receive_completion(opcode)
    peer.rq.complete(consumed, IBV_WC_SUCCESS, wc_opcode, length, wqe.imm_data if opcode != SEND else 0, flags)
    h = peer.header
    h[Q_EXPECTED_PSN] = (h[Q_EXPECTED_PSN] + count) % PSN_MODULUS
    peer.announce(wqe.send_flags & IBV_SEND_SOLICITED)


def atomic(seg, offset, opcode, compare_add, swap):
    """An atomic on an 8-byte word of shared memory, held against every other thread and process
    (fcntl record locks, which die with their holder)."""
    word = seg.data[offset:offset + 8].view("<u8")
    at = shm.HEADER_BYTES + offset
    with LOCK:
        fcntl.lockf(seg.fd, fcntl.LOCK_EX, 8, at)
        try:
            old = int(word[0])
            if opcode == FETCH_AND_ADD:
                word[0] = (old + compare_add) % (1 << 64)
            elif old == compare_add:
                word[0] = swap
        finally:
            fcntl.lockf(seg.fd, fcntl.LOCK_UN, 8, at)
    seg.ring()
    return old
