"""The responder half of soft0's NIC: what the peer's NIC does when a request arrives.

checks.RESPONDER decides whether it may (the target QP's state, the expected PSN, access flags, a posted
receive, the remote key, in the order rxe checks them); respond() carries the verdict out, and touches
memory only when there is none: a request refused there changes no target byte. (Two refusals come as the
data lands, as on rxe: a receive's SGE it may not write keeps the SGEs before it filled, and a SEND_WITH_INV's
key that cannot be invalidated fails the receive after its data landed: checks.LANDING.) It answers as a responder
answers on the wire:
- ACK, with the data of a READ or the old value of an atomic;
- no answer at all (no such QP, not in RTR, RTS or SQD, a PSN it does not expect): the requester times out;
- RNR NAK: a SEND or WRITE_WITH_IMM found no posted receive (with the QP's min_rnr_timer);
- NAK with a status: invalid request (access flags), remote access (rkey, PD, bounds), remote
  operation (a receive too small); the responder's QP goes to ERR.

An rkey may be a memory window's: mr.find() finds its binding (mr.Window) under the key as it finds an
MR, and the checks are the same (plus: a type 2 window serves only the QP it was bound on). A QP on a
shared receive queue takes the SRQ's next receive into its own queue when a message needs one
(srq.Ring.take); a SEND_WITH_INV invalidates its key once its data has landed.

`respond()` is the seam between the two halves: the requester (rdmalab.verbs.soft.requester) calls
it in its own process, reaching the target's QP and memory through shared memory, so the target's
process runs no code. The udp link's NIC (link/transport.py) calls the same function on the receiving
host, for the requests its packets carry.
"""
import fcntl
import struct
import threading

from rdmalab.proc.procstat import pid_alive, pid_exists

from . import checks, counters, cq as cqmod, mr as mrmod, shm, srq as srqmod
from .checks import ACK, NO_ANSWER, RNR_NAK, RNR_TIMER_MS  # noqa: F401 (what the links read of an answer)
from .constants import (
    IBV_QPS_ERR, IBV_QPT_UC, IBV_SEND_SOLICITED, IBV_WC_GRH, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SUCCESS,
    IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR, IBV_WR_ATOMIC_FETCH_AND_ADD as FETCH_AND_ADD, IBV_WR_RDMA_READ as READ,
    IBV_WR_RDMA_WRITE as WRITE, IBV_WR_RDMA_WRITE_WITH_IMM as WRITE_WITH_IMM, IBV_WR_SEND as SEND,
    IBV_WR_SEND_WITH_INV as SEND_WITH_INV)
from .operations import CONSUMES_RECEIVE
from rdmalab.wire.psn import psn_add
from .layout import (M_ADDR, M_LENGTH, M_VALID, Q_ALIVE, Q_EXPECTED_PSN, Q_GENERATION, Q_PD, Q_RECV_CQ,
                     Q_RQ_CONSUMED, Q_RQ_MAX_SGE, Q_RQ_POLLED, Q_RQ_POSTED, Q_RQ_SIZE, Q_SEQ_NAKED, Q_SRQ, Q_STATE,
                     Q_TYPE, R_SGES, R_STATUS, R_WR_ID, S_ALIVE, W_OWNER_PID)

# A SEND_WITH_INV's receive: rxe passes the kernel's IB_WC_WITH_INVALIDATE (1 << 2) to user space as it is,
# where libibverbs reads that bit as IBV_WC_IP_CSUM_OK (IBV_WC_WITH_INV is 1 << 3): soft0 reports what rxe does
WITH_INVALIDATE = 1 << 2

LOCAL_QPS = {}        # qp_num -> PeerQP of this process's QPs
_attached_qps = {}    # qp_num -> PeerQP of another process's QP


def forget_the_dead():
    """Drop, and unmap, the peers' QPs and MRs this process attached whose owner has died (a NIC process
    that serves many programs calls it now and then: their files go when the next soft0 process starts)."""
    for qpn, peer in list(_attached_qps.items()):
        if not pid_alive(int(peer.segment.header[W_OWNER_PID])):
            del _attached_qps[qpn]
            peer.rq.release()
            peer.segment.close()
    for key, seg in list(mrmod.ATTACHED.items()):   # (an MR's segment, or a window's binding)
        header = seg.header
        if header is not None and not pid_alive(int(header[W_OWNER_PID])):
            del mrmod.ATTACHED[key]
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

def invalidate(key):
    """Invalidate `key`, a valid type 2 window's (checks.INVALIDATE, or for a SEND_WITH_INV checks.invalidation,
    said it may be)."""
    mrmod.find(key).header[M_VALID] = 0


def region_of(seg):
    """(address, length) of the buffer the MR of `seg` registered."""
    return seg.header[M_ADDR], seg.header[M_LENGTH]


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

    def shared_ring(self):
        """The QP's SRQ (srq.Ring), found when first needed and again when it was closed or resized; or None."""
        ring = self._srq
        if ring is None or ring.header is None or not ring.header[S_ALIVE]:
            ring = self._srq = srqmod.find(self.header[Q_SRQ])
        return ring

    def shared_receives(self):
        """Receives the QP's SRQ holds, not taken yet (0 if it has none): what a dry check reads."""
        ring = self.shared_ring()
        return ring.count() if ring is not None else 0

    def take_shared_receive(self):
        """A QP on an SRQ: move the SRQ's next receive into this QP's receive queue; False if none is left."""
        ring = self.shared_ring()
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
    The owning QP and its CQ call post() and harvest(); a responder calls scatter() and complete().
    A consumed slot holds its completion until it is polled, but no longer counts against the receives the
    owner may post (`receives`, the QP's max_recv_wr), as on rxe: the ring (`size` slots) is larger."""

    def __init__(self, seg, qp_num=0):
        h = seg.header
        self.header, self.size, self.stride = h, int(h[Q_RQ_SIZE]), R_SGES + 3 * int(h[Q_RQ_MAX_SGE])
        self.receives = self.size   # the owner sets its QP's max_recv_wr
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
        """No room for one more receive: max_recv_wr are posted and not consumed, or the ring is full of them
        and of completions not polled yet."""
        h = self.header
        posted = h[Q_RQ_POSTED]
        return posted - h[Q_RQ_CONSUMED] >= self.receives or posted - h[Q_RQ_POLLED] >= self.size

    def post(self, wr_id, sges):
        """Queue one receive; False if the queue is full."""
        h = self.header
        posted = h[Q_RQ_POSTED]
        if self.full():
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
        failed = False
        while polled < consumed and len(out) < limit:
            wr_id, _, status, opcode, byte_len, imm, flags, src_qp = SLOT_ENTRY.unpack_from(raw, polled % size * stride)
            out.append(new_wc(wr_id, status, opcode, byte_len, qp_num, imm, flags, src_qp))
            failed |= status != IBV_WC_SUCCESS
            polled += 1
        h[Q_RQ_POLLED] = polled
        if failed and h[Q_STATE] != IBV_QPS_ERR:
            # A receive that failed took its QP to ERR, which the NIC that failed it (another process, on
            # the udp link or a peer's) writes just after the completion. The program must not see one
            # without the other, as on rxe, where a query after the poll reads ERR: enter it here.
            enter(h, IBV_QPS_ERR)

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

    def scatter(self, n, payload, pd, at=0):
        """Copy `payload`, a message's bytes from byte `at` on (the udp link lands a message packet by packet),
        into receive number n's SGEs as checks.receive_buffers allows it. Returns None, or the verdict: too
        small (nothing copied), or an SGE that names memory the receive may not use (as in rxe's copy_data, an
        SGE is checked only for the bytes that land in it, when they do: a zero-length message checks no key,
        and the SGEs filled before a bad one keep what they got)."""
        landing = []
        verdict = checks.receive_buffers(self, n, at + len(payload), pd, landing)
        done = 0   # the message's bytes before this SGE
        for seg, offset, take in landing:
            skip = max(at - done, 0)   # (bytes an earlier packet landed)
            if skip < take:
                seg.bytes[offset + skip:offset + take] = payload[done + skip - at:done + take - at]
            done += take
        counters.copied_bytes += max(done - at, 0)
        return verdict

    def complete(self, n, status, opcode, byte_len, imm, flags, src_qp=0):
        """Receive number n completed: its completion, then the count the owner polls up to."""
        # src_qp: a datagram's sender; 0 on a connection, as rxe reports
        COMPLETION.pack_into(self.raw, (n % self.size * self.stride + R_STATUS) * 8, status, opcode, byte_len, imm,
                             flags, src_qp)
        self.header[Q_RQ_CONSUMED] = n + 1   # publish last: the owner's poll reads up to here


# ---------------------------------------------------------------- answering one request

def respond(peer, wqe, payload, length, psn, count, mtu=None, landed=0):
    """Carry out the request `wqe` (opcode, remote_addr, rkey, imm_data, send_flags, compare_add, swap)
    at `peer`, arriving as `count` packets from sequence number `psn` on (psn.packets(): the requester
    segments it at its path MTU, `mtu` bytes; None: its packets are not checked against the responder's).
    `payload` holds the data of a WRITE or SEND (`length` bytes). checks.RESPONDER decides whether it may;
    this carries out the verdict. `landed`: bytes of it already in place (the udp link lands each packet as it
    comes, once begin() accepted the first). Returns (answer, data): ACK with a READ's bytes or an atomic's old value
    (else None), NO_ANSWER (with the bytes of a READ whose first responses reach the requester, checks.path_mtu), RNR_NAK with the timer in ms, or a NAK's status."""
    if wqe.opcode in CONSUMES_RECEIVE:
        with LOCK:   # (the receive it takes, against this process's other threads)
            return _respond(peer, wqe, payload, length, psn, count, mtu, landed)
    return _respond(peer, wqe, payload, length, psn, count, mtu, landed)


def _judge(peer, request):
    """checks.RESPONDER's first verdict on `request` (None: taken), and what arriving in order means to the QP."""
    h = peer.header
    verdict = checks.first(checks.RESPONDER, request)
    if verdict is None or verdict.effect.in_order:
        if h[Q_TYPE] == IBV_QPT_UC:
            h[Q_EXPECTED_PSN] = request.psn   # UC never retries: a new message is taken from whatever PSN it starts at
        elif h[Q_SEQ_NAKED]:
            h[Q_SEQ_NAKED] = 0   # (the next request ahead is NAKed and counted anew)
    return verdict


def _respond(peer, wqe, payload, length, psn, count, mtu, landed):
    h = peer.header
    request = checks.Request.of(wqe, length, peer=peer, psn=psn, count=count, mtu=mtu)
    verdict = _judge(peer, request)
    if verdict is not None:
        if verdict.lands and wqe.opcode == READ:   # the responses the requester takes (checks.path_mtu) carry these
            return NO_ANSWER, request.seg.bytes[request.offset:request.offset + verdict.figures["landed"]]
        return _refuse(peer, verdict, wqe)
    opcode = wqe.opcode
    if opcode in CONSUMES_RECEIVE:
        return _into_receive(peer, h, wqe, payload, length, count, request, mtu, landed)
    seg, offset = request.seg, request.offset
    data = None
    if seg is None:   # a zero-length WRITE or READ names no memory
        data = b"" if opcode == READ else None
    elif opcode == WRITE:
        write(seg, offset + landed, _after(payload, landed), mtu)
        counters.copied_bytes += length - landed
        seg.ring()
    elif opcode == READ:
        data = seg.bytes[offset:offset + length]
    else:
        data = atomic(seg, offset, opcode, wqe._compare_add, wqe._swap).to_bytes(8, "little")
    h[Q_EXPECTED_PSN] = psn_add(psn, count)
    return ACK, data


def respond_partly(peer, wqe, prefix, length, psn, count, sent, mtu):
    """The first `sent` packets of a request of `count` (`prefix`, their bytes) arrive, and no more: its requester
    met a local error in the next (requester.local_error). The responder judges the request as it judges the whole
    (its first packet carries the RETH); a verdict is carried out as respond()'s. Accepted, the packets land as rxe
    writes each as it comes (probed on rxe0, tests/wild/rc_local_error_later_packet.py): a WRITE's into memory, a
    SEND's into the receive it takes, which never completes (unless they do not fit it: then it fails, as for a
    whole message); the QP expects the PSN after them. Returns the answer."""
    with LOCK:
        answer, request = begin(peer, wqe, length, psn, count, mtu)
        if request is None:
            return answer
        answer, _ = land(peer, wqe, request, 0, prefix, mtu)
        if answer is not None:
            return answer
        peer.header[Q_EXPECTED_PSN] = psn_add(psn, sent)
    return ACK


def begin(peer, wqe, length, psn, count, mtu, dry=False):
    """A message of `count` packets starts (rxe lands each packet as it comes): the responder judges it at its first
    packet, which carries the RETH, as a plain SEND or WRITE (a WRITE_WITH_IMM's first packets are a WRITE's, its
    receive asked for at the last). A SEND takes its receive here, from the SRQ if the QP has one, as rxe does;
    `dry`: looked for, not taken. Returns (answer, None), the refusal carried out; or (None, the request), whose
    memory (request.seg, request.offset) a WRITE's packets land in."""
    opcode = WRITE if wqe.opcode == WRITE_WITH_IMM else wqe.opcode
    request = checks.Request(opcode, length, wqe._rkey, wqe._remote_addr, wqe.imm_data, wqe.send_flags, peer=peer,
                             psn=psn, count=count, mtu=mtu, dry=dry)
    verdict = _judge(peer, request)
    if verdict is not None:
        return _refuse(peer, verdict, wqe)[0], None
    return None, request


def land(peer, wqe, request, at, payload, mtu=None):
    """Packets of a message begin() accepted, `at` bytes into it: a WRITE's into memory, a SEND's into the receive
    begin() found it (the QP's next one, or the one it took from its SRQ). Returns (answer, bytes placed): the
    answer None, or that of a receive that cannot take them: it fails, as for the whole message."""
    h = peer.header
    if request.seg is not None:
        write(request.seg, request.offset + at, payload, mtu)
        counters.copied_bytes += len(payload)
        request.seg.ring()
    elif request.opcode in CONSUMES_RECEIVE and h[Q_RQ_CONSUMED] != h[Q_RQ_POSTED]:
        verdict = peer.rq.scatter(h[Q_RQ_CONSUMED], payload, h[Q_PD], at)
        if verdict is not None:
            return _fail_receive(peer, verdict, wqe)[0], 0
    else:
        return None, 0
    return None, len(payload)


def _after(payload, n):
    """A message's bytes after its first n (no copy)."""
    return payload if not n else memoryview(payload)[n:]


def write(seg, offset, payload, mtu):
    """A WRITE's bytes into `seg` at `offset`. Packet by packet (`mtu` bytes each; None: at once) when they come
    from the same memory: rxe writes each packet as it comes, before its requester reads the next, so where source
    and destination overlap a later packet carries bytes an earlier one wrote (one memmove would not)."""
    length = len(payload)
    if mtu and length > mtu and type(payload) is memoryview and payload.obj is seg.bytes.obj:
        for at in range(0, length, mtu):
            seg.bytes[offset + at:offset + min(at + mtu, length)] = payload[at:at + mtu]
    else:
        seg.bytes[offset:offset + length] = payload


def _refuse(peer, verdict, wqe):
    """Carry out a verdict of checks.RESPONDER: its effect (checks.Effect: the counter rxe bumps), then its answer.
    Unanswered: drop the packets. RNR NAK: with the QP's timer. A NAK: an RC QP enters ERR and NAKs it
    with the verdict's status; a UC QP has nobody to tell, so it drops the message and carries on (as rxe
    does). A verdict that names a status for the receive the message took (verdict.receive) fails that
    receive and the QP enters ERR."""
    h, effect = peer.header, verdict.effect
    if effect.counter is not None and not (effect.once and h[Q_SEQ_NAKED]):
        h[Q_SEQ_NAKED] |= effect.once   # (a sequence error: the requests ahead after it are dropped uncounted)
        counters.count(effect.counter, effect.times)
    if verdict.answer == NO_ANSWER:
        return NO_ANSWER, None
    if verdict.answer == RNR_NAK:
        return RNR_NAK, verdict.figures["timer_ms"]
    if verdict.receive is not None:
        return _fail_receive(peer, verdict, wqe)
    if h[Q_TYPE] == IBV_QPT_UC:
        return NO_ANSWER, None
    enter(h, IBV_QPS_ERR)
    return verdict.answer, None


def _fail_receive(peer, verdict, wqe):
    """The receive the message took completes with the verdict's status, the QP enters ERR, its CQ is told."""
    h = peer.header
    peer.rq.complete(h[Q_RQ_CONSUMED], verdict.receive, 0, 0, 0, 0)
    enter(h, IBV_QPS_ERR)
    peer.announce(wqe.send_flags & IBV_SEND_SOLICITED)
    return verdict.answer, None


def _into_receive(peer, h, wqe, payload, length, count, request, mtu, landed=0):
    """SEND, SEND_WITH_IMM and WRITE_WITH_IMM: each consumes the peer's next posted receive (checks.RESPONDER
    found it posted); the data lands, in memory or in the receive's buffers, and the LANDING checks run."""
    consumed = h[Q_RQ_CONSUMED]
    if request.seg is not None:   # a WRITE_WITH_IMM (a zero-length one names no memory: only its receive counts)
        write(request.seg, request.offset + landed, _after(payload, landed), mtu)
        counters.copied_bytes += length - landed
        request.seg.ring()
    elif wqe.opcode != WRITE_WITH_IMM:
        verdict = peer.rq.scatter(consumed, _after(payload, landed), h[Q_PD], landed)
        if verdict is not None:   # the receive is too small, or names memory it may not use
            return _fail_receive(peer, verdict, wqe)
    if wqe.opcode == SEND_WITH_INV:   # (after the data, as rxe)
        verdict = checks.invalidation(request)
        if verdict is not None:   # a key it may not invalidate: rxe fails the receive and its QP, yet ACKs the SEND
            return _fail_receive(peer, verdict, wqe)
        invalidate(wqe.imm_data)
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
    h[Q_EXPECTED_PSN] = psn_add(h[Q_EXPECTED_PSN], count)
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
