"""The requester half of soft0's NIC: what a NIC does with the work requests a program posts.

It reads the local buffers (lkey), carries each request to the target QP, and completes the work
request when the answer comes back: an ACK completes it; no answer is retried every ACK timeout,
`retry_cnt` times, then fails with RETRY_EXC_ERR; an RNR NAK is retried after the target's
min_rnr_timer, `rnr_retry` times (7: forever), then fails with RNR_RETRY_EXC_ERR; a NAK fails it
with the responder's status. After any error the QP is in ERR and every later WR is flushed.
Binding a memory window (BIND_MW) and invalidating one (LOCAL_INV) never leave the NIC: it does them
in turn with the QP's other WRs (local_operation()).

Here the requester runs in the initiating process, straight after post_send(), and reaches the
target through rdmalab.verbs.soft.responder.respond(): the initiator's CPU does what a NIC's DMA
engine would do, and the target's process runs no code, which is the property the lab measures.
Its timers run whenever the initiator's program calls into the NIC (polls, posts, waits for an event).
A message waiting out RNR NAKs is also "parked" where the receiver's NIC sees it, so that a receive
posted there lets it in at once (carry_parked): rxe's kernel resends it whatever the sender's program
does, and that program may be blocked elsewhere, waiting for the receiver.
Local checks run first, as in rxe: an unknown lkey is LOC_QP_OP_ERR, an SGE out of bounds
LOC_PROT_ERR, and nothing is sent, unless the bad bytes lie past the first packet: rxe has sent the packets
before them when it finds out, so the responder judges the request first (local_error). A local error met
while a message waits out RNR NAKs stops the queue, as on rxe (SendQueue.halt).

Like a NIC, it caches what it looked up: once a request of one shape (opcode, local key, remote
key) has been carried out on a connection, a Shortcut remembers where both buffers are. A later
request of the same shape repeats none of the checks while nothing they depended on has changed
(the target QP's generation, which every change of its state or access flags bumps, and the keys'
validity); it checks only what is its own (its PSN, its bounds) and copies. That is the path the
lab's benchmarks measure; anything else takes the general path.
"""
import contextlib
import copy
import ctypes
import fcntl
import struct
import threading
import time
from collections import deque

from rdmalab.errors import WR_OPCODE_NAMES

from . import checks, counters, cq as cqmod, mr as mrmod, responder
from .hardware import GIDS
from .constants import (
    IBV_QPS_ERR, IBV_QPS_SQD, IBV_QPT_RC, IBV_QPT_UC, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED,
    IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS,
    IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR,
    IBV_WR_RDMA_READ as READ, IBV_WR_RDMA_WRITE as WRITE, IBV_WR_RDMA_WRITE_WITH_IMM as WRITE_WITH_IMM,
    IBV_WR_SEND as SEND, IBV_WR_SEND_WITH_INV as SEND_WITH_INV,
    IBV_WR_BIND_MW as BIND_MW)
from .layout import (C_ARMED, M_VALID, P_ANSWER, P_COUNT, P_DEST, P_FLAGS, P_IMM, P_LENGTH,
                     P_NUM_SGE, P_OPCODE, P_PSN, P_REMOTE_ADDR, P_RKEY, P_SGES, P_STATE, Q_EXPECTED_PSN, Q_GENERATION,
                     Q_NUM, Q_PATH_MTU, Q_PD, Q_TYPE, Q_RNR_WAITING, Q_RQ_CONSUMED, Q_RQ_POSTED, Q_STATE,
                     R_NUM_SGE, R_SGES, R_STATUS, W_BELL, W_SLEEPERS)
from .mr import REGISTERED
from .operations import (ATOMICS, CARRIES_DATA, CONSUMES_RECEIVE, LOCAL_OPERATIONS, NEEDS_ACCESS, WC_OPCODE,
                         WITH_IMM)
from rdmalab.wire.psn import ack_timeout, packets, psn_add
from .responder import ACK, COMPLETION, NO_ANSWER, RNR_NAK, invalidate, respond

# a receive slot's R_NUM_SGE and first SGE (addr, length, lkey), in one read (the words between skipped)
RECEIVE_SGE = struct.Struct(f"={R_NUM_SGE * 8}xQ{(R_SGES - R_NUM_SGE - 1) * 8}x3Q")
SHORTCUTS_KEPT = 64   # request shapes a send queue remembers, as a NIC caches translations
PEER_CHECK_S = 0.02   # how often a send queue makes sure its peer's process still lives (a clock read per WR)
IDLE, PARKED, ANSWERED = 0, 1, 2   # a QP's parked message (layout.P_STATE): none, waiting, carried out by the peer


class Queue:
    """A send queue as its QP (qp.py) and CQ (cq.py) use it, whichever link carries its work: the interface
    of SendQueue and UnansweredQueue here, datagram.DatagramQueue, and the udp link's WireSendQueue and
    WireDatagramQueue (link/doorbell.py). modify() sets where it sends and how: dest_qp_num, psn, timeout,
    retry_cnt, rnr_retry, dgid, mtu (qp.APPLIED); the rest it asks through these methods."""
    qp_type = None
    nic = None   # the udp link's NIC process its work goes through (the receive CQ watches it too); None on shm

    def checked_mtu(self):
        """The MTU a responder holds this queue's requests to (checks.path_mtu), or None: none (UC, whose
        requester learns nothing of the responder, and the udp link, whose responder checks no MTU)."""
        return None

    def post(self, wr):
        """A WR post_send checked, with the QP in RTS or ERR: carry it out, or queue it."""
        raise NotImplementedError

    def hold(self, wr):
        """A WR posted before RTS (refused, yet kept as rxe keeps it): it runs at the first post in RTS, and
        a move to ERR flushes it."""
        raise NotImplementedError

    def progress(self):
        """Do what is due (retries, flushes, the NIC's news): the CQ calls it as it is polled."""
        raise NotImplementedError

    def next_retry(self):
        """When progress() is due again for a timer (monotonic seconds), or None."""
        return None

    def slots_held(self):
        """Send-queue slots its WRs hold now (post_send counts the free ones from it)."""
        raise NotImplementedError

    def waiting(self, before_rts):
        """[(wr_id, its opcode, what it waits for)] of the WRs it holds: the glass-box view (glassbox.look)."""
        raise NotImplementedError

    def peer(self):
        """The QP it sends to as this process's NIC reaches it (responder.PeerQP), or None: what the checks
        read of the target when they are run without posting (glassbox.walk, glassbox.verdicts)."""
        return None

    def modified(self, state, max_rd_atomic=1):
        """modify() moved the QP to `state`: what the queue knew of its destination may be stale."""

    def reset(self):
        """RESET: emptied, without completions."""
        raise NotImplementedError

    def close(self):
        """The QP is destroyed."""


class Pending:
    """A send WQE that is waiting: for an RNR timer, or for an ACK that did not come (acking). A WQE
    waiting out RNR NAKs is parked at its peer (SendQueue.park)."""

    def __init__(self, wqe):
        self.wqe, self.deadline, self.rnr_left, self.retries_left, self.acking = wqe, 0.0, None, None, False
        self.parked = False



class SendQueue(Queue):
    """A QP's sending state, which its NIC owns: where it sends (destination QP and GID, path MTU),
    the next PSN, its timers and retry counts, the WQEs waiting for a timer, and the CQ it completes
    on. The QP sets the attributes modify() gives it; the NIC does the rest."""
    qp_type = IBV_QPT_RC

    def __init__(self, header, qp_num, pd, cq, sig_all):
        self.header, self.qp_num, self.pd, self.cq, self.sig_all = header, qp_num, pd, cq, sig_all
        self.pending, self.shortcuts = deque(), {}
        self.next_peer_check = 0.0
        self.reset()

    def reset(self):
        if self.pending:
            self.unpark(self.pending[0])
        self.pending.clear()
        self.shortcuts.clear()
        self.halted = False
        self.dest_qp_num = self.psn = self.timeout = self.retry_cnt = self.rnr_retry = 0
        self.dgid, self.mtu = None, 1024
        self.connected, self.connected_to = None, None   # the peer's PeerQP, and its number, once found

    # ------------------------------------------------------------ what the QP and its CQ call (Queue)

    def slots_held(self):
        return len(self.pending)

    def checked_mtu(self):
        return self.mtu

    def waiting(self, before_rts):
        return [(p.wqe.wr_id, WR_OPCODE_NAMES.get(p.wqe.opcode, "?"),
                 "posted before RTS: carried out at the first post in RTS" if before_rts
                 else "stopped: a local error was met while the queue waited out an RNR NAK (rxe's requester halts "
                      "until the QP is moved to ERR)" if self.halted
                 else "queued behind the WR before it" if n or not p.deadline
                 else f"waiting for an ACK ({p.retries_left} resends left)" if p.acking else "waiting out an RNR NAK")
                for n, p in enumerate(list(self.pending))]

    def modified(self, state, max_rd_atomic=1):
        self.shortcuts.clear()   # the destination or the MTU may have changed

    def post(self, wr):
        """Ring the doorbell for one checked WR: carry it out now if nothing waits before it, else queue it."""
        if self.connected is not None and time.monotonic() >= self.next_peer_check:
            self.check_peer()
        if self.pending or self.header[Q_STATE] == IBV_QPS_ERR:
            self.pending.append(Pending(snapshot(wr)))
            if self.waiting_for_receive() and local_check(self, wr):
                self.halt()
            self.progress()
            return
        sges = wr._sges
        if len(sges) == 1:
            shortcut = self.shortcuts.get((wr.opcode, sges[0][2], wr._rkey))
            if shortcut is not None and shortcut.carry(self, wr, *sges[0]):
                return
        outcome = attempt(self, wr, None)
        if outcome is not None:   # it must wait: keep a copy at the head of the queue
            pending = Pending(snapshot(wr, counted=True))   # (its inline data was copied, and counted, just now)
            pending.deadline, pending.rnr_left, pending.retries_left, pending.acking = outcome
            self.pending.append(pending)
            self.cq.wait_for_timer(self)
            if not pending.acking and not self.halted and self.park(pending):   # a receive came as we parked it
                pending.deadline = 0.0
                self.progress()

    def hold(self, wr):
        """Keep a WR the QP refused to post (before RTS): rxe leaves it in the send ring, where the next
        post in RTS carries it out first, and a move to ERR flushes it."""
        self.pending.append(Pending(snapshot(wr)))

    def waiting_for_receive(self):
        """The head of the queue waits out an RNR NAK while the requester sends on (not in SQD, where it sends
        nothing new)."""
        head = self.pending[0] if self.pending else None
        return head is not None and head.rnr_left is not None and not head.acking and not self.halted \
            and self.header[Q_STATE] != IBV_QPS_SQD

    def halt(self):
        """A local error met while a message waits out RNR NAKs (a WR behind it whose local SGEs fail, as rxe's
        requester finds at once, sending on while the message waits; or the message's own, at its retry): rxe
        (Linux 6.1) stops its requester there and never resends, so nothing completes, even once a receive is
        posted, and the QP stays in RTS, until the program moves it to ERR (every WR flushed) or RESET. (A
        receive that carried the parked message in just before answers it: it completes, and the queue goes on,
        as on rxe when the ACK comes first.)"""
        answer = self.unpark(self.pending[0]) if self.pending else None
        if answer is not None:
            self.answered(self.pending.popleft(), answer)
            return
        self.halted = True

    def check_peer(self):
        """A peer whose process died is gone (responder.PeerQP.owner_died): what we send it from now on
        goes unanswered, as to a QP that a dead process's host destroyed. Its segments stay mapped here,
        so without this check its memory would go on taking WRITEs. Looked at every PEER_CHECK_S."""
        self.next_peer_check = time.monotonic() + PEER_CHECK_S
        self.connected.owner_died()

    def progress(self):
        """Work through the waiting WQEs: flush them in ERR, retry what waited long enough."""
        if self.connected is not None and time.monotonic() >= self.next_peer_check:
            self.check_peer()
        queue = self.pending
        while queue:
            head = queue[0]
            if head.parked and (self.header[P_STATE] == ANSWERED or self.header[Q_STATE] == IBV_QPS_ERR
                                or time.monotonic() >= head.deadline):
                answer = self.unpark(head)   # (before we retry, flush or fail it ourselves)
                if answer is not None:       # the peer's NIC carried it out meanwhile
                    queue.popleft()
                    self.answered(head, answer)
                    continue
            if self.header[Q_STATE] == IBV_QPS_ERR:
                queue.popleft()
                complete(self, head.wqe, IBV_WC_WR_FLUSH_ERR)
                continue
            if self.halted or head.deadline and time.monotonic() < head.deadline:
                return
            if self.header[Q_STATE] == IBV_QPS_SQD:
                return   # draining, as rxe's requester: no resend, nothing new (until RTS and the next doorbell)
            if head.acking:   # its ACK timeout ran out: resend it, if retry_cnt allows
                head.retries_left = spend(head.retries_left, counters.count, "retry_exceeded_err")
                if head.retries_left is None:
                    queue.popleft()
                    fail(self, head.wqe, IBV_WC_RETRY_EXC_ERR)
                    continue
                counters.count("completer_retry_err")   # (as rxe's completer counts each retry it decides on)
            outcome = attempt(self, head.wqe, head)
            if self.halted:
                return
            if outcome is not None:
                head.deadline, head.rnr_left, head.retries_left, head.acking = outcome
                if head.acking or not self.park(head):
                    return
                head.deadline = 0.0   # a receive came as we parked it: retry now
                continue
            queue.popleft()
        self.cq.wait_for_timer(self, False)

    # ------------------------------------------------------------ a message parked at its peer

    def park(self, head):
        """The peer answered RNR NAK: leave the message where the peer's NIC finds it (our QP's header,
        layout.P_*, and in the peer's Q_RNR_WAITING our number), so that a receive posted there carries it
        out at once (carry_parked). True if a receive was posted meanwhile: the caller retries now."""
        wqe, peer = head.wqe, self.connected
        sges = wqe._sges if not wqe.send_flags & IBV_SEND_INLINE else ()
        length = len(wqe._inline_data) if wqe.send_flags & IBV_SEND_INLINE else sum(sge[1] for sge in sges)
        with parked_words(self.segment()) as p:
            p[P_DEST], p[P_OPCODE], p[P_FLAGS], p[P_IMM] = self.dest_qp_num, wqe.opcode, wqe.send_flags, wqe.imm_data
            p[P_RKEY], p[P_PSN], p[P_LENGTH] = wqe._rkey, self.psn, length
            p[P_REMOTE_ADDR] = wqe._remote_addr - (1 << 64 if wqe._remote_addr >> 63 else 0)   # (a signed word)
            p[P_COUNT], p[P_NUM_SGE] = packets(length, self.mtu), len(sges)
            for i, (addr, size, lkey) in enumerate(sges):
                p[P_SGES + 3 * i], p[P_SGES + 3 * i + 1], p[P_SGES + 3 * i + 2] = addr, size, lkey
            if not sges and length:   # inline data: its bytes
                self.segment().mm[P_SGES * 8:P_SGES * 8 + length] = wqe._inline_data
            p[P_STATE] = PARKED
            peer.header[Q_RNR_WAITING] = self.qp_num
        head.parked = True
        return peer.header[Q_RQ_POSTED] != peer.header[Q_RQ_CONSUMED]

    def unpark(self, head):
        """Take a parked message back: None, or the answer (ACK, or a NAK's status) the peer's NIC gave it."""
        if not head.parked:
            return None
        head.parked = False
        with parked_words(self.segment()) as p:
            answer = p[P_ANSWER] if p[P_STATE] == ANSWERED else None
            p[P_STATE] = IDLE
        try:
            if self.connected.header[Q_RNR_WAITING] == self.qp_num:
                self.connected.header[Q_RNR_WAITING] = 0
        except (TypeError, ValueError):   # the peer is gone
            pass
        return answer

    def answered(self, head, answer):
        """Complete a message the peer's NIC carried out for us (carry_parked), with the answer it got."""
        if answer != ACK:
            return fail(self, head.wqe, answer)   # a NAK: the responder is in ERR already
        self.psn = psn_add(self.psn, self.header[P_COUNT])
        return complete(self, head.wqe, IBV_WC_SUCCESS, self.header[P_LENGTH])

    def segment(self):
        """Our QP's shared segment (where a parked message lies)."""
        return responder.LOCAL_QPS[self.qp_num].segment

    def next_retry(self):
        """When the head of the queue wants to be retried (monotonic seconds), or None."""
        return self.pending[0].deadline if self.pending and not self.halted else None

    def peer(self):
        """The QP we send to, if a packet from us would reach it (else None: nobody answers)."""
        if self.dgid not in GIDS:
            return None   # a GID that is not soft0's: nobody answers, and the requester times out
        found = responder.peer_qp(self.dest_qp_num)
        if found is None or not found.alive():
            return None   # no such QP (yet): nobody answers
        if found is not self.connected and found.owner_died():   # found now: a QP whose process died is gone from
            return None   # its first request on (a dead process's host destroys its QPs), not after a first check
        self.connected, self.connected_to = found, self.dest_qp_num
        return found


class UnansweredQueue(SendQueue):
    """A send queue whose requests nobody answers (UC, UD): no ACK, no NAK, no RNR, no retry. Each WR
    is carried out when posted and completes at once, successfully unless our own side found it
    wrong; what became of it at the responder, the requester never learns."""
    qp_type = IBV_QPT_UC

    def checked_mtu(self):
        return None

    def post(self, wr):
        if self.pending or self.header[Q_STATE] == IBV_QPS_ERR:
            self.pending.append(Pending(snapshot(wr)))
            self.progress()
            return
        self.send_now(wr)

    def progress(self):
        """WRs held before RTS go out now; in ERR they are flushed."""
        while self.pending:
            wqe = self.pending.popleft().wqe
            if self.header[Q_STATE] == IBV_QPS_ERR:
                complete(self, wqe, IBV_WC_WR_FLUSH_ERR)
            else:
                self.send_now(wqe)

    def send_now(self, wqe):
        """UC: SEND and WRITE (with or without immediate) only: READs and atomics need an answer, and UC
        has no SEND with invalidate; and the work our own NIC does (binding and invalidating memory windows)."""
        refused = checks.carried_out(self.qp_type, wqe.opcode)
        if refused is not None:
            return fail(self, wqe, refused.answer)
        if wqe.opcode in LOCAL_OPERATIONS:
            return local_operation(self, wqe)
        payload = gather(self, wqe)
        if type(payload) is int:
            return fail(self, wqe, payload)
        length = len(payload)
        count = psns(wqe.opcode, length, self.mtu)
        peer = self.peer()
        if peer is not None:
            try:
                respond(peer, wqe, payload, length, self.psn, count)   # (whatever it answers, nobody hears)
            except ValueError:   # the peer was a QP of this process, closed since
                pass
        self.psn = psn_add(self.psn, count)
        return complete(self, wqe, IBV_WC_SUCCESS, length)


class Shortcut:
    """What the NIC remembers after carrying out one shape of request on this connection: the target
    QP (and the generation its checks passed at), our buffer, the remote buffer (for a key), and for
    a SEND the buffer of the receive it used. carry() does a request of that shape again, checking
    only what belongs to the request (PSN, bounds, a posted receive in the same buffer); it returns
    False, having done nothing, whenever anything else may have changed: attempt() then decides."""
    __slots__ = ("opcode", "peer", "header", "generation", "lkey", "local", "local_base", "local_length",
                 "remote", "remote_base", "remote_length", "remote_header", "remote_segment",
                 "receive_key", "receive", "receive_base", "receive_length", "receive_header",
                 "rq_raw", "rq_size", "rq_stride", "wc_opcode", "wc_flags", "cq", "cq_header")

    @classmethod
    def remember(cls, sq, wqe, peer, generation):
        if not checks.mtu_agrees(peer.header, sq.mtu):   # the two sides disagree: a later WRITE may not fit
            return
        addr, length, lkey = wqe._sges[0]
        shortcut, mr = cls(), REGISTERED[lkey]
        shortcut.opcode, shortcut.peer, shortcut.header, shortcut.generation = wqe.opcode, peer, peer.header, generation
        shortcut.lkey, shortcut.local, shortcut.local_base, shortcut.local_length = lkey, mr._memory, mr._buf, mr._length
        shortcut.remote = shortcut.receive = None
        if NEEDS_ACCESS[wqe.opcode]:
            seg = mrmod.find(wqe._rkey)
            if seg is None:   # deregistered by its owner since the request was carried out: nothing to remember
                return
            if seg.bytes.obj is mr._memory.obj:   # our own MR: a message of several packets must move packet by
                return                               # packet (responder.write), which the general path does
            h = seg.header
            shortcut.remote_segment, shortcut.remote_header, shortcut.remote = seg, h, seg.bytes
            shortcut.remote_base, shortcut.remote_length = responder.region_of(seg)
        if wqe.opcode in CONSUMES_RECEIVE:
            # what responder.received() looks up for every message: the receive queue, the completion, the CQ
            rq, shortcut.cq = peer.rq, peer.cq_segment()
            if shortcut.cq is None:
                return
            shortcut.rq_raw, shortcut.rq_size, shortcut.rq_stride, shortcut.cq_header = rq.raw, rq.size, rq.stride * 8, shortcut.cq.header
            shortcut.wc_opcode, shortcut.wc_flags = responder.receive_completion(wqe.opcode)
            if not NEEDS_ACCESS[wqe.opcode]:   # a SEND: the receive just used, whose buffer is likely the next one's
                num_sge, _, _, shortcut.receive_key = RECEIVE_SGE.unpack_from(rq.raw, rq.slot(peer.header[Q_RQ_CONSUMED] - 1) * 8)
                if num_sge != 1:
                    return
                seg = mrmod.find(shortcut.receive_key)
                if seg is None:   # (the receiver deregistered that buffer as soon as its message arrived)
                    return
                shortcut.receive, shortcut.receive_header = seg.bytes, seg.header
                shortcut.receive_base, shortcut.receive_length = responder.region_of(seg)
        if len(sq.shortcuts) >= SHORTCUTS_KEPT:
            sq.shortcuts.clear()
        sq.shortcuts[wqe.opcode, lkey, wqe._rkey] = shortcut

    def carry(self, sq, wr, addr, length, lkey):
        peer = self.header
        try:
            if peer[Q_GENERATION] != self.generation or peer[Q_EXPECTED_PSN] != sq.psn or lkey not in REGISTERED \
                    or wr.send_flags & IBV_SEND_INLINE:
                return False
            start, opcode = addr - self.local_base, self.opcode
            if start < 0 or start + length > self.local_length:
                return False
            reach = 8 if opcode in ATOMICS else length
            count = 1 if reach <= sq.mtu else packets(reach, sq.mtu)
            if self.remote is not None:
                offset = wr._remote_addr - self.remote_base
                if not self.remote_header[M_VALID] or offset < 0 or offset + reach > self.remote_length:
                    return False
            if opcode == WRITE:
                self.remote[offset:offset + length] = self.local[start:start + length]
                counters.copied_bytes += length
                self.remote_segment.ring()
            elif opcode == READ:
                self.local[start:start + length] = self.remote[offset:offset + length]
                counters.copied_bytes += length
            elif opcode in ATOMICS:
                if length < 8 or wr._remote_addr & 7:
                    return False
                old = responder.atomic(self.remote_segment, offset, opcode, wr._compare_add, wr._swap)
                self.local[start:start + 8] = old.to_bytes(8, "little")
            elif not self._into_receive(wr, start, length, offset if self.remote is not None else 0):
                return False
        except ValueError:   # a QP or MR of this process, closed since
            return False
        sq.psn = peer[Q_EXPECTED_PSN] = psn_add(sq.psn, count)   # (the peer expected sq.psn: see above)
        if wr.send_flags & IBV_SEND_SIGNALED or sq.sig_all:
            complete(sq, wr, IBV_WC_SUCCESS, length)
        return True

    def _into_receive(self, wr, start, length, offset):
        """A message that takes a receive: responder.received()'s work, with what it looks up remembered
        (carry() then advances the PSN the peer expects)."""
        peer, raw = self.header, self.rq_raw
        with responder.LOCK:
            consumed = peer[Q_RQ_CONSUMED]
            if consumed == peer[Q_RQ_POSTED]:
                return False   # no receive posted: attempt() gets the RNR NAK
            slot = consumed % self.rq_size * self.rq_stride
            if self.opcode == WRITE_WITH_IMM:
                self.remote[offset:offset + length] = self.local[start:start + length]
                self.remote_segment.ring()
            else:
                num_sge, addr, room, key = RECEIVE_SGE.unpack_from(raw, slot)
                at = addr - self.receive_base
                if num_sge != 1 or key != self.receive_key or length > room or at < 0 \
                        or at + room > self.receive_length or not self.receive_header[M_VALID]:
                    return False
                self.receive[at:at + length] = self.local[start:start + length]
            counters.copied_bytes += length
            COMPLETION.pack_into(raw, slot + R_STATUS * 8, IBV_WC_SUCCESS, self.wc_opcode, length,
                                 wr.imm_data if self.opcode != SEND else 0, self.wc_flags, 0)
            peer[Q_RQ_CONSUMED] = consumed + 1   # publish last: the owner's poll reads up to here
        cq = self.cq_header   # cq.announce_to(), with Segment.ring() inlined: the CQ's bell, or its event if armed
        if cq[C_ARMED]:
            cqmod.announce_to(self.cq, wr.send_flags & IBV_SEND_SOLICITED)
        else:
            cq[W_BELL] = (cq[W_BELL] + 1) & 0x7FFFFFFF
            if cq[W_SLEEPERS]:
                self.cq.bell.wake()
        return True


def snapshot(wr, counted=False):
    """Copy a posted WR, as the hardware copies it into its queue (inline data is read now). `counted`: its
    inline data was copied (and counted) already, as the WR was carried out."""
    wqe = copy.copy(wr)
    wqe._next = None
    if wr.send_flags & IBV_SEND_INLINE:   # the CPU copies inline data into the WQE (a NIC's too, over MMIO)
        wqe._inline_data = inline_payload(wr)
        if not counted:
            counters.copied_bytes += len(wqe._inline_data)
    return wqe


def inline_payload(wr):
    return b"".join(ctypes.string_at(addr, length) for addr, length, _ in wr._sges)


# ---------------------------------------------------------------- the requester's rules, on both links
# The shared-memory link carries a message in one call (attempt()); the udp link's NIC process carries it in
# packets (link/transport.Requester). Both take the PSNs, read the data, land an answer, spend their retries and
# build their completions here.

def psns(opcode, length, mtu):
    """The PSNs a request takes: one per packet of the data it carries, or asks for (a READ's responses take its
    PSNs), and one for an atomic (its 8 bytes)."""
    return packets(8 if opcode in ATOMICS else length, mtu)


def spend(left, count, counter):
    """One retry from a budget of `left` (retry_cnt or rnr_retry as modify() set it; 7: forever): what is left after
    it, or None when none was and the WR fails (RETRY_EXC_ERR, RNR_RETRY_EXC_ERR), counted in `counter` with
    `count` (the link's counters)."""
    if left == 0:
        count(counter)
        return None
    return left if left == 7 else left - 1


def signaled(send_flags, sig_all):
    """Whether a WR that succeeds has a completion: signaled, or its QP signals every WR."""
    return send_flags & IBV_SEND_SIGNALED or sig_all


def completion_fields(opcode, status, byte_len=0):
    """A send completion's (status, opcode, byte_len, wc_flags): a success names the WR's operation (and
    WITH_IMM), an error only its status."""
    if status != IBV_WC_SUCCESS:
        return status, 0, 0, 0
    return status, WC_OPCODE[opcode], byte_len, IBV_WC_WITH_IMM if opcode in WITH_IMM else 0


def payload_of(sges, view):
    """The bytes a WRITE or SEND carries, through `view(addr, length, lkey)` (the link's view of its memory, or the
    status its check gave): one SGE's view as it is (the responder copies straight from it), several joined (a
    copy, counted); or the first status."""
    pieces = [view(*sge) for sge in sges if sge[1]]
    for piece in pieces:
        if type(piece) is int:
            return piece
    if len(pieces) == 1:
        return pieces[0]
    counters.copied_bytes += sum(map(len, pieces))
    return memoryview(b"".join(pieces))


def land(sges, offset, data, writable):
    """Write `data`, the bytes of an answer from `offset` on (a READ's response; an atomic's old value, at 0), into
    the SGEs, through `writable(addr, length, lkey)` (a view, or the status the link's check gave): True; or
    False, having written nothing, when they cannot take it all."""
    pieces, at, end = [], 0, offset + len(data)
    for addr, length, lkey in sges:
        lo, hi = max(offset, at), min(end, at + length)
        if lo < hi:
            view = writable(addr + lo - at, hi - lo, lkey)
            if type(view) is int:
                return False
            pieces.append((view, lo - offset, hi - offset))
        at += length
    if sum(hi - lo for _, lo, hi in pieces) != len(data):
        return False
    for view, lo, hi in pieces:
        view[:] = data[lo:hi]
    return True


# ---------------------------------------------------------------- one WQE, end to end

def attempt(sq, wqe, pending):
    """Carry out one WQE. Returns None when it completed (well or not), else (deadline, rnr_left,
    retries_left, acking) for the timer it now waits on (acking: an ACK timeout, else an RNR timer)."""
    opcode = wqe.opcode
    status = local_check(sq, wqe)   # (checks.REQUESTER: the operation, then the data's SGEs)
    if status and opcode not in CARRIES_DATA:
        return fail(sq, wqe, status)
    if opcode in LOCAL_OPERATIONS:
        return local_operation(sq, wqe)
    peer = sq.connected if sq.connected_to == sq.dest_qp_num else sq.peer()
    sges = wqe._sges
    if opcode in CARRIES_DATA:
        payload = status or (local_bytes(sq, *sges[0]) if len(sges) == 1 and not wqe.send_flags & IBV_SEND_INLINE
                             else gather(sq, wqe))
        if type(payload) is int:   # an SGE it may not read (or its MR deregistered since, by another thread)
            if pending is not None and pending.rnr_left is not None and not pending.acking:   # an RNR retry: its MR
                return sq.halt()                                                              # is gone
            return local_error(sq, wqe, payload, peer)
        length = len(payload)
    else:
        payload, length = None, sum(sge[1] for sge in sges)
    count = psns(opcode, length, sq.mtu)
    try:
        generation = peer.header[Q_GENERATION] if peer else None   # what the checks below will have seen
        answer, data = respond(peer, wqe, payload, length, sq.psn, count, sq.mtu) if peer else (NO_ANSWER, None)
    except ValueError:   # the peer was a QP of this process, closed since: nobody answers now
        sq.connected_to, answer, data = None, NO_ANSWER, None
    if answer == ACK:
        sq.psn = psn_add(sq.psn, count)
        refused = _scatter(sq, wqe, data) if data is not None else None   # a READ's or atomic's answer, into our memory
        if refused is not None:
            return fail(sq, wqe, refused.answer)
        complete(sq, wqe, IBV_WC_SUCCESS, length)
        if len(sges) == 1 and length and not wqe.send_flags & IBV_SEND_INLINE and pending is None \
                and opcode != SEND_WITH_INV:   # (each of those invalidates a key: no shortcut for them)
            Shortcut.remember(sq, wqe, peer, generation)
        return None
    if answer == NO_ANSWER:
        if data is not None:   # a READ's first responses, before the rest went past its PSNs (checks.path_mtu)
            _scatter(sq, wqe, data)
        return _wait_for_ack(sq, wqe, pending)
    if answer == RNR_NAK:
        return _wait_for_receive(sq, wqe, pending, data)
    return fail(sq, wqe, answer)   # a NAK: the responder is in ERR already


def local_check(sq, wr):
    """What our side finds wrong with a WR before anything is sent (0: nothing): checks.REQUESTER's status (an
    operation the QP type does not carry out, an unknown lkey, an SGE out of its MR), for the data a WRITE or
    SEND carries; READs and atomics are checked when their answer comes back. Each link's requester checks
    each WR so (attempt; the udp link's doorbell), and a send queue whose head waits out RNR NAKs each WR
    queued behind it (SendQueue.halt)."""
    refused = checks.first(checks.REQUESTER, checks.Request(wr.opcode, flags=wr.send_flags, sges=wr._sges,
                                                            qp_type=sq.header[Q_TYPE], pd=sq.pd))
    return refused.answer if refused is not None else 0


def readable(sq, sges):
    """How many of the bytes a WR's SGEs carry our NIC may read, counted from the first, as rxe's requester
    finds out packet by packet (copy_data): up to the first SGE whose key or range check fails, and within it,
    up to its MR's end."""
    done = 0
    for addr, length, lkey in sges:
        refused = checks.local_sge(sq.pd, addr, length, lkey)
        if refused is None:
            done += length
            continue
        if refused.figures.get("where") == "past the end":   # the bytes before the MR's end may be read (none if
            done += max(0, length - refused.figures["by"])   # the SGE starts beyond it)
        return done
    return done


def sent_before_error(sq, wr):
    """How many whole packets of a WR whose local SGEs fail a check rxe sends before it meets the bad bytes
    (readable): none for inline data (copied whole at the post) or an operation that carries no data."""
    if wr.send_flags & IBV_SEND_INLINE or wr.opcode not in CARRIES_DATA:
        return 0
    return readable(sq, wr._sges) // sq.mtu


def local_error(sq, wqe, status, peer):
    """A WRITE's or SEND's local SGEs fail a check (status). rxe reads them packet by packet as it sends: when
    the first packet is readable, it goes out (and the packets after it, up to the one the bad bytes are in), so
    the responder judges the request before the requester finds its error; a NAK from it decides the WR's
    status, both QPs entering ERR; an accepted WRITE keeps the packets that landed. `peer`: whom it sends to."""
    sent = sent_before_error(sq, wqe)
    if sent and peer is not None:
        length = sum(sge[1] for sge in wqe._sges)
        prefix = gather(sq, _first_bytes(wqe, sent * sq.mtu))
        try:
            answer = responder.respond_partly(peer, wqe, prefix, length, sq.psn, psns(wqe.opcode, length, sq.mtu),
                                              sent, sq.mtu)
        except ValueError:   # the peer was a QP of this process, closed since: nobody answers
            answer = NO_ANSWER
        if answer == RNR_NAK:   # no receive for it: the message waits, and its requester met the error meanwhile
            counters.count("rcvd_rnr_err")
            sq.halt()
            return float("inf"), sq.rnr_retry, None, False   # (kept at the head of the queue, never resent)
        if answer not in (ACK, NO_ANSWER):
            return fail(sq, wqe, answer)
        sq.psn = psn_add(sq.psn, sent)
    return fail(sq, wqe, status)


def _first_bytes(wqe, n):
    """A copy of `wqe` whose SGEs name its first n bytes."""
    part = copy.copy(wqe)
    part._sges = first_sges(wqe._sges, n)
    return part


def first_sges(sges, n):
    """The SGEs (addr, length, lkey) that name the first n bytes of `sges`."""
    cut, left = [], n
    for addr, length, lkey in sges:
        if left <= 0:
            break
        cut.append((addr, min(length, left), lkey))
        left -= length
    return cut


def local_operation(sq, wqe):
    """BIND_MW binds a memory window (MW_BIND_ERR if a rule forbids it); LOCAL_INV invalidates a type 2
    window by its key, wr.imm_data (ibv_send_wr's invalidate_rkey shares imm_data's place): anything
    else is LOC_QP_OP_ERR. Either error moves the QP to ERR, as any failed WR does."""
    if wqe.opcode == BIND_MW:
        refused = checks.first(checks.BIND, checks.Bind(wqe._bind_mw, sq.qp_num, sq.pd, wqe._mw_rkey, wqe._bind_info))
        if refused is not None:
            return fail(sq, wqe, refused.answer)
        wqe._bind_mw._bind(sq.qp_num, wqe._rkey, wqe._bind_info)
    else:
        refused = checks.first(checks.INVALIDATE, wqe.imm_data)
        if refused is not None:
            return fail(sq, wqe, refused.answer)
        invalidate(wqe.imm_data)
    return complete(sq, wqe, IBV_WC_SUCCESS)


def complete(sq, wqe, status, byte_len=0):
    """Post the requester's completion: always on error, on success only if signaled."""
    if status == IBV_WC_SUCCESS and not signaled(wqe.send_flags, sq.sig_all):
        return None
    status, opcode, byte_len, flags = completion_fields(wqe.opcode, status, byte_len)
    sq.cq.push(wqe.wr_id, status, opcode, byte_len, sq.qp_num, 0, flags)
    return None


def fail(sq, wqe, status):
    """An error completion: the QP goes to ERR, and everything after it will be flushed."""
    responder.enter(sq.header, IBV_QPS_ERR)
    return complete(sq, wqe, status)


def gather(sq, wqe):
    """The data a WRITE or SEND carries (a view of our memory for one SGE), or an error status."""
    if wqe.send_flags & IBV_SEND_INLINE:
        data = getattr(wqe, "_inline_data", None)
        if data is None:   # carried out as it is posted: its inline data is copied now
            data = inline_payload(wqe)
            counters.copied_bytes += len(data)
        return memoryview(data)
    return payload_of(wqe._sges, lambda addr, length, lkey: local_bytes(sq, addr, length, lkey))


def local_bytes(sq, addr, length, lkey):
    """Our memory that an SGE names, as a view; or the status checks.local_sge gives it (LOC_QP_OP_ERR: no such
    key in our PD; LOC_PROT_ERR: out of its bounds). An SGE of length 0 names nothing."""
    refused = checks.local_sge(sq.pd, addr, length, lkey)
    if refused is not None:
        return refused.answer
    if not length:
        return memoryview(b"")
    mr = REGISTERED[lkey]
    offset = addr - mr._buf
    return mr._memory[offset:offset + length]


def _scatter(sq, wqe, data):
    """Write a READ's bytes or an atomic's old value into the local SGEs; None, or checks.landing's verdict
    when it may not land (an atomic's 8 bytes into fewer: the remote word has changed all the same, as on rxe)."""
    refused = checks.landing(checks.Request(wqe.opcode, len(data), sges=wqe._sges, pd=sq.pd))
    if refused is not None:
        return refused
    land(wqe._sges, 0, data, lambda addr, length, lkey: local_bytes(sq, addr, length, lkey))
    if wqe.opcode == READ:   # (an atomic's old value is an answer, not a payload)
        counters.copied_bytes += len(data)
    return None


def _wait_for_receive(sq, wqe, pending, timer_ms):
    """RNR NAK: the peer has no receive posted. Retry after its min_rnr_timer, rnr_retry times (7: forever)."""
    counters.count("rcvd_rnr_err")
    first = pending is None or pending.rnr_left is None
    rnr_left = spend(sq.rnr_retry if first else pending.rnr_left, counters.count, "retry_rnr_exceeded_err")
    if rnr_left is None:
        return fail(sq, wqe, IBV_WC_RNR_RETRY_EXC_ERR)
    retries_left = None if pending is None else pending.retries_left
    return time.monotonic() + timer_ms / 1000.0, rnr_left, retries_left, False


def _wait_for_ack(sq, wqe, pending):
    """No answer: retransmit after the ACK timeout (psn.ack_timeout: 4.096 us * 2**timeout; 0 = never), retry_cnt times;
    once the last resend's timeout runs out too, SendQueue.progress fails it with RETRY_EXC_ERR (as rxe:
    retry_cnt 2 sends it 3 times, over 3 timeouts). As in rxe, retry_cnt 7 retries forever (the spec
    reserves that meaning for rnr_retry only)."""
    first = pending is None or pending.retries_left is None
    retries_left = sq.retry_cnt if first else pending.retries_left   # (progress() spends one at each timeout)
    wait = ack_timeout(sq.timeout)
    rnr_left = None if pending is None else pending.rnr_left
    return time.monotonic() + wait, rnr_left, retries_left, True


# ---------------------------------------------------------------- a message parked at its peer

PARKING = threading.Lock()   # a parked message's words, across this process's threads


@contextlib.contextmanager
def parked_words(seg):
    """Hold the words of the message parked in QP segment `seg` (layout.P_*) against every other NIC:
    this process's other threads, and other processes by an fcntl record lock on P_STATE (which dies
    with its holder). Yields the segment's header."""
    with PARKING:
        fcntl.lockf(seg.fd, fcntl.LOCK_EX, 8, P_STATE * 8)
        try:
            yield seg.header
        finally:
            fcntl.lockf(seg.fd, fcntl.LOCK_UN, 8, P_STATE * 8)


class ParkedWQE:
    """A parked message's fields as respond() reads them from a WQE."""
    __slots__ = ("opcode", "send_flags", "imm_data", "_rkey", "_remote_addr")

    def __init__(self, p):
        self.opcode, self.send_flags, self.imm_data, self._rkey = p[P_OPCODE], p[P_FLAGS], p[P_IMM], p[P_RKEY]
        self._remote_addr = p[P_REMOTE_ADDR] % (1 << 64)


def carry_parked(receiver):
    """A receive was posted at `receiver` (a PeerQP of this process) while a peer's message is parked
    there, waiting out RNR NAKs (layout.Q_RNR_WAITING): carry it out now, as the sender's NIC would at its
    next retry, and leave the answer in the sender's QP, whose NIC completes the WR when it next runs
    (SendQueue.progress). On rxe the kernel's timer resends whatever the sender's program does; soft0's
    NIC is that program, which may be blocked elsewhere, waiting for us. A message that cannot go now
    (its memory deregistered, our QP not ready) stays parked: the sender's own retries deal with it."""
    h = receiver.header
    sender = responder.peer_qp(h[Q_RNR_WAITING])
    h[Q_RNR_WAITING] = 0
    if sender is None or not sender.alive() or sender.owner_died():   # (a dead process's QP sends nothing)
        return
    with parked_words(sender.segment) as p:
        if p[P_STATE] != PARKED or p[P_DEST] != h[Q_NUM] or p[Q_STATE] in (IBV_QPS_ERR, IBV_QPS_SQD):
            return   # (a sender in SQD resends nothing: rxe's requester drains)
        payload = parked_payload(sender.segment)
        if payload is None:
            return
        try:
            answer, _ = respond(receiver, ParkedWQE(p), payload, len(payload), p[P_PSN], p[P_COUNT],
                                128 << p[Q_PATH_MTU])   # (sent in packets of the sender's path MTU)
        except ValueError:   # our QP was closed meanwhile (by another thread)
            return
        if answer != NO_ANSWER and answer != RNR_NAK:
            p[P_ANSWER], p[P_STATE] = answer, ANSWERED


def parked_payload(seg):
    """The bytes the message parked in QP segment `seg` carries: its inline data, or what its SGEs name in
    the sender's MRs; None if an SGE no longer may be read (its MR deregistered, of another PD, too small)."""
    p = seg.header
    if p[P_FLAGS] & IBV_SEND_INLINE:
        return seg.mm[P_SGES * 8:P_SGES * 8 + p[P_LENGTH]]
    pieces = []
    for i in range(p[P_NUM_SGE]):
        addr, length, lkey = p[P_SGES + 3 * i], p[P_SGES + 3 * i + 1], p[P_SGES + 3 * i + 2]
        if not length:
            continue
        mr = mrmod.find(lkey)
        offset, refused = checks.memory(mr, addr, length, p[Q_PD], 0)
        if refused is not None:
            return None
        pieces.append(bytes(mr.bytes[offset:offset + length]))
    payload = b"".join(pieces)
    counters.copied_bytes += len(payload) * (1 if len(pieces) == 1 else 2)   # out of each MR; then joined
    return payload
