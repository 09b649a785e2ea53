"""RC's reliable transport, as the NIC process runs it for one queue pair: both halves, in packets.

The requester (`Requester`) turns work requests into packets: a message longer than the path MTU
goes out as FIRST, MIDDLE..., LAST packets, each with the next PSN; a READ request reserves one PSN
per response packet it asks for. It keeps up to WINDOW packets unacknowledged and asks for an ACK
(AckReq) on a message's last packet, and every ACK_EVERY packets inside a long one, as rxe does.
An answer moves it on:
- ACK (psn P): every packet up to P arrived; WRITEs and SENDs that end there are complete;
- READ responses and atomic ACKs carry the data: they complete READs and atomics;
- NAK "PSN sequence error" (psn P): a packet before P was lost: go back and send again from P
  ("go-back-N"), as the ACK timeout does when nothing at all comes back;
- RNR NAK: no receive was posted: wait the responder's min_rnr_timer, then send the message again;
- any other NAK: the work request fails with its status, and the QP enters ERR.
Retries are counted: retry_cnt for timeouts and sequence errors (7: forever, as rxe does) then
RETRY_EXC_ERR; rnr_retry for RNR NAKs (7: forever) then RNR_RETRY_EXC_ERR.
A WR whose local SGEs fail further on sends the whole packets before the bad bytes first, and its
status is the responder's NAK, if one comes, else its own (WQE.cut); a local error met while a
message waits out RNR NAKs halts the requester until ERR or RESET (Requester.halt), as on rxe.

The responder (`Responder`) takes a request's packets in PSN order. As rxe does, it judges a message
at its first packet (responder.begin: the RETH states a WRITE's whole length) and lands each packet as
it comes (responder.land), so a message whose requester stops short (a bad local SGE further on) leaves
what came; at its last packet it hands the message to soft0's own responder (responder.respond) on the
local QP, so every check (state, PSN, access flags, keys, receive queue) is the one the shared-memory
link makes. It answers:
- a packet after the PSN it expects: one NAK "PSN sequence error" naming the PSN it wants;
- a packet before it (a duplicate, sent again because an ACK was lost): an ACK again, never a second
  execution; a READ or atomic is answered from the responder resources it kept (rxe's cache of
  replies), so a duplicated FETCH_AND_ADD adds once;
- a PSN far ahead of any window: dropped and counted.

A UC QP (its Connection is `unreliable`) takes the same path without the answers: UC opcodes, no
AckReq, a message done once sent (Requester.pump), and a responder that drops what it does not
expect until the next message starts (Responder.unreliable).
"""
import struct
import time
from collections import deque

from .. import requester, responder as verbs_responder
from ..constants import (
    IBV_ACCESS_LOCAL_WRITE as LOCAL_WRITE, IBV_QPS_ERR,
    IBV_SEND_SOLICITED, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR,
    IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS,
    IBV_WC_WR_FLUSH_ERR,
    IBV_WR_ATOMIC_CMP_AND_SWP as CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD as FETCH_AND_ADD,
    IBV_WR_RDMA_READ as READ, IBV_WR_RDMA_WRITE as WRITE, IBV_WR_RDMA_WRITE_WITH_IMM as WRITE_WITH_IMM,
    IBV_WR_SEND_WITH_INV as SEND_WITH_INV)
from ..layout import Q_EXPECTED_PSN, Q_MIN_RNR_TIMER
from ..operations import ATOMICS, CARRIES_DATA, MESSAGE, OPERATIONS, WITH_IMM
from rdmalab.wire.psn import POSITIONS, ack_timeout, packets, psn_add, psn_diff
from .. import checks
from ..responder import ACK, NO_ANSWER, RNR_NAK, RNR_TIMER_MS
from rdmalab.wire import AETH, RETH, AtomicAckETH, AtomicETH, ImmDt, Op, Packet
from rdmalab.wire.packet import encode_fast
from rdmalab.wire.headers import (ACK as AETH_ACK, CREDITS_INVALID, IETH, NAK as AETH_NAK, NAK_INVALID_REQUEST, NAK_PSN_SEQUENCE_ERROR,
                            NAK_REMOTE_ACCESS_ERROR, NAK_REMOTE_OPERATIONAL_ERROR, RNR_NAK as AETH_RNR_NAK)

WINDOW = 128          # packets a requester may have unacknowledged
ACK_EVERY = 32        # inside a long message, ask for an ACK this often (rxe: RXE_MAX_UNACKED_PSNS)
KEPT_REPLIES = 16     # READ and atomic replies a responder keeps for duplicates (its "resources")
NAK_STATUS = {NAK_INVALID_REQUEST: IBV_WC_REM_INV_REQ_ERR, NAK_REMOTE_ACCESS_ERROR: IBV_WC_REM_ACCESS_ERR,
              NAK_REMOTE_OPERATIONAL_ERROR: IBV_WC_REM_OP_ERR}
NAK_CODE = {status: code for code, status in NAK_STATUS.items()}
_AETH_ACK = struct.Struct("!I")


class WQE:
    """A send work request as the NIC holds it, with the PSNs it was given."""
    __slots__ = ("seq", "wr_id", "opcode", "flags", "sges", "remote_addr", "rkey", "imm", "compare_add", "swap",
                 "inline", "status", "cut", "length", "first", "count", "data", "got", "landed", "done", "rnr_left")

    def __init__(self, seq, wr_id, opcode, flags, sges, remote_addr, rkey, imm, compare_add, swap, inline, status,
                 cut=0):
        """status: a local error the program's side found (checks.REQUESTER); cut: the packets of a WRITE or SEND
        so failing that go out before the bad bytes (requester.sent_before_error), as rxe reads a message's
        local SGEs packet by packet: the responder judges those, and its answer comes before the error."""
        self.seq, self.wr_id, self.opcode, self.flags, self.sges = seq, wr_id, opcode, flags, sges
        self.remote_addr, self.rkey, self.imm, self.compare_add, self.swap = remote_addr, rkey, imm, compare_add, swap
        self.inline, self.status, self.cut = inline, status, cut
        self.length = len(inline) if inline is not None else sum(sge[1] for sge in sges)
        self.first = self.count = self.landed = 0   # landed: a READ's bytes in so far (got: its responses)
        self.data, self.got, self.done, self.rnr_left = None, 0, False, None

    @property
    def last(self):
        return psn_add(self.first, self.count - 1)

    def holds(self, psn):
        return 0 <= psn_diff(psn, self.first) < self.count

    def waits_for_answer(self):
        """Not done, and completed by what comes back: a WR without a local error, or the packets of one cut short
        (its status is decided by the responder's answer to them, else its own)."""
        return not self.done and (not self.status or self.cut)


def packet_opcode(operation, index, count):
    """The opcode of packet `index` of a message of `count` packets (message_opcodes(), one at a time)."""
    position = 3 if count == 1 else 0 if index == 0 else 2 if index == count - 1 else 1
    return _OPCODE_AT[operation][position]


class DataPacket:
    """A WRITE's or SEND's packet, ready to encode: wire.packet.encode_fast() makes the bytes
    Packet(...).encode() would, in a third of the time."""
    __slots__ = ("opcode", "destqp", "psn", "payload", "headers", "a", "se")

    def __init__(self, opcode, destqp, psn, payload, headers, a, se):
        self.opcode, self.destqp, self.psn, self.payload, self.headers, self.a, self.se = \
            opcode, destqp, psn, payload, headers, a, se

    def encode(self, flow):
        return encode_fast(flow, self.opcode, self.destqp, self.psn, self.payload, self.headers, self.a, self.se)


class Requester:
    """The sending half of one RC QP (see the module's docstring)."""

    def __init__(self, conn):
        self.conn = conn
        self.wqes = deque()          # posted, not yet completed, in order
        self.psn = self.next = 0     # the PSN the next new WQE takes; the next packet to (re)send
        self.acked = None            # the last PSN acknowledged
        self.timeout = self.retry_cnt = self.rnr_retry = 0
        self.retries_left, self.deadline, self.rnr_until = 0, None, 0.0
        self.since_ack_req = 0
        self.highest_sent = None     # the furthest PSN sent: sending one before it again is a retransmission
        self.max_rd_atomic = 1       # READs and atomics it may have unanswered at once
        self.error = False
        self.draining = False        # the QP is in SQD: nothing goes out
        self.halted = False          # a local error met while a message waits out RNR NAKs (halt)

    def configure(self, psn, timeout, retry_cnt, rnr_retry, max_rd_atomic=1):
        self.max_rd_atomic = max(max_rd_atomic, 1)
        self.psn = self.next = psn
        self.acked = psn_add(psn, -1)
        self.timeout, self.retry_cnt, self.rnr_retry = timeout, retry_cnt, rnr_retry
        self.retries_left = retry_cnt

    # ------------------------------------------------------------ from the program

    def post(self, wqe):
        """A WQE rung at the doorbell: give it its PSNs (or, in ERR, flush it)."""
        if self.error or self.conn.state() == IBV_QPS_ERR:
            self.fail_all(IBV_WC_WR_FLUSH_ERR, [wqe])
            return
        wqe.first = self.psn
        wqe.count = requester.psns(wqe.opcode, wqe.length, self.conn.mtu) if not wqe.status else wqe.cut
        self.psn = psn_add(self.psn, wqe.count)
        self.wqes.append(wqe)
        if wqe.status and time.monotonic() < self.rnr_until and not self.draining:
            return self.halt()   # a local error met while a message waits out an RNR NAK
        self.complete_ready()

    def halt(self):
        """A local error met while a message waits out RNR NAKs (a WR behind it whose local SGEs fail, or the
        message's own memory gone at its resend, or a message cut short by one answered RNR NAK): rxe (Linux
        6.1) stops its requester and never resends, so nothing completes, even once a receive is posted, and
        both QPs stay in RTS, until the program moves the QP to ERR (every WR flushed) or RESET. (The shared-
        memory link's requester.SendQueue.halt.)"""
        self.halted, self.deadline, self.rnr_until = True, None, 0.0

    # ------------------------------------------------------------ sending

    def pump(self, nic, now):
        """Send what the window allows, from self.next on. UC: nobody answers, so what is sent is done."""
        self.send_window(nic, now)
        if self.conn.unreliable and self.highest_sent is not None:
            self.ack(self.highest_sent, now)

    def send_window(self, nic, now):
        if self.error or self.draining or self.halted or now < self.rnr_until:
            return
        reading = 0   # READs and atomics before this WQE still waiting for their answer
        for wqe in self.wqes:
            if wqe.status and not wqe.holds(self.next):   # a local error: nothing after it (and after the packets
                return                                    # of a cut one) goes out; at its turn the QP enters ERR
            if wqe.opcode == READ or wqe.opcode in ATOMICS:
                if reading >= self.max_rd_atomic and wqe.holds(self.next):
                    return   # as many as the responder keeps answers for are out: wait (rxe does)
                reading += not wqe.done
            while wqe.holds(self.next):
                if psn_diff(self.next, psn_add(self.acked, 1)) >= WINDOW:
                    return
                if not self.send_packet(nic, wqe, psn_diff(self.next, wqe.first)):
                    return
                if self.deadline is None and self.timeout:
                    self.deadline = now + ack_timeout(self.timeout)
        return

    def send_packet(self, nic, wqe, index):
        """Packet number `index` of `wqe` (a READ's request for the rest of its data from there)."""
        conn, mtu, op = self.conn, self.conn.mtu, wqe.opcode
        psn = psn_add(wqe.first, index)
        if op == READ:   # (index is wqe.got: the rest is asked for from the first byte not in)
            offset = wqe.landed
            pkt = Packet(Op.RC_RDMA_READ_REQUEST, conn.dest_qpn, psn, a=True,
                         reth=RETH(wqe.remote_addr + offset, wqe.rkey, wqe.length - offset))
            self.next = psn_add(wqe.first, wqe.count)
        elif op in ATOMICS:
            swap, cmp = (wqe.compare_add, 0) if op == FETCH_AND_ADD else (wqe.swap, wqe.compare_add)
            pkt = Packet(Op.RC_FETCH_ADD if op == FETCH_AND_ADD else Op.RC_COMPARE_SWAP, conn.dest_qpn, psn, a=True,
                         atomiceth=AtomicETH(wqe.remote_addr, wqe.rkey, swap, cmp))
            self.next = psn_add(psn, 1)
        else:
            data = self.gather(wqe)
            if data is None:   # its memory went away after it was posted
                if wqe.rnr_left is not None:   # (at a resend after RNR NAKs: rxe's requester halts)
                    self.halt()
                else:
                    self.finish(wqe, IBV_WC_LOC_PROT_ERR)
                return False
            last = index == wqe.count - 1 and not wqe.cut   # (a cut message's last packet is never sent)
            headers = []   # (packed: this is the data path, encoded without building a Packet)
            if index == 0 and op in (WRITE, WRITE_WITH_IMM):
                headers.append(RETH(wqe.remote_addr, wqe.rkey, wqe.length).pack())
            if last and op in WITH_IMM:
                headers.append(ImmDt.of_imm_data(wqe.imm).pack())
            if last and op == SEND_WITH_INV:
                headers.append(IETH(wqe.imm).pack())
            self.since_ack_req += 1
            ack_req = (last or self.since_ack_req >= ACK_EVERY or wqe.cut and index == wqe.count - 1) \
                and not conn.unreliable   # (a cut message asks whether its packets were taken)
            if ack_req:
                self.since_ack_req = 0
            opcode = packet_opcode(op, index, wqe.count if not wqe.cut else wqe.count + 1) | (UC if conn.unreliable else 0)
            pkt = DataPacket(opcode, conn.dest_qpn, psn,
                             data[index * mtu:(index + 1) * mtu], b"".join(headers), ack_req,
                             bool(last and wqe.flags & IBV_SEND_SOLICITED))
            self.next = psn_add(psn, 1)
        again = self.highest_sent is not None and psn_diff(psn, self.highest_sent) <= 0
        if not again:
            self.highest_sent = psn
        nic.send(pkt, conn, retransmit=again)
        return True

    def gather(self, wqe):
        """The bytes a WRITE or SEND carries, read from the program's registered memory (once); None if an SGE
        no longer may be read (its MR deregistered after the WR was checked)."""
        if wqe.data is None:   # (a cut message's: the bytes of the packets it sends)
            sges = requester.first_sges(wqe.sges, wqe.cut * self.conn.mtu) if wqe.cut else wqe.sges
            data = wqe.inline if wqe.inline is not None else \
                requester.payload_of(sges, lambda addr, length, lkey: self._memory(addr, length, lkey, 0))
            if type(data) is int:
                return None
            wqe.data = data
        return wqe.data

    def _memory(self, addr, length, lkey, need):
        """The program's memory an SGE names (Connection.local_memory: checks.memory), or LOC_PROT_ERR."""
        view = self.conn.local_memory(addr, length, lkey, need)
        return IBV_WC_LOC_PROT_ERR if view is None else view

    # ------------------------------------------------------------ answers

    def answer(self, pkt, nic, now):
        """An ACK, NAK, READ response or atomic ACK for this QP."""
        if self.error:
            return
        op = pkt.opcode
        if op == Op.RC_ACKNOWLEDGE:
            kind, value = pkt.aeth.kind, pkt.aeth.value
            if kind == AETH_ACK:
                self.ack(pkt.psn, now)
            elif kind == AETH_RNR_NAK:
                nic.count("rcvd_rnr_err")
                self.ack(psn_add(pkt.psn, -1), now)
                self.rnr(pkt.psn, value, now)
            elif kind == AETH_NAK:
                self.ack(psn_add(pkt.psn, -1), now)
                if value == NAK_PSN_SEQUENCE_ERROR:
                    nic.count("rcvd_seq_err")
                    if now >= self.rnr_until:   # (while it waits out an RNR NAK, it resends from there anyway)
                        self.go_back(pkt.psn, now, nic)
                else:
                    wqe = self.find(pkt.psn)
                    if wqe is not None:
                        self.finish(wqe, NAK_STATUS.get(value, IBV_WC_REM_OP_ERR))
        elif op == Op.RC_ATOMIC_ACKNOWLEDGE:
            wqe = self.find(pkt.psn)
            if wqe is None or wqe.opcode not in ATOMICS or wqe.done:
                return   # a duplicate answer
            self.ack(psn_add(pkt.psn, -1), now)
            old = pkt.atomicacketh.origremdt.to_bytes(8, "little")
            self.progress(now)
            self.finish(wqe, IBV_WC_SUCCESS if self.scatter(wqe, 0, old) else IBV_WC_LOC_PROT_ERR)
        else:   # a READ response
            wqe = self.find(pkt.psn)
            if wqe is None or wqe.opcode != READ or wqe.done:
                return
            expected = psn_add(wqe.first, wqe.got)
            if pkt.psn != expected:
                if psn_diff(pkt.psn, expected) > 0:   # one was lost: ask again from the missing one
                    nic.count("rcvd_seq_err")
                    self.go_back(expected, now, nic)
                return
            if pkt.aeth is not None:
                self.ack(psn_add(pkt.psn, -1), now)
            self.progress(now)
            if not self.scatter(wqe, wqe.landed, pkt.payload):
                self.finish(wqe, IBV_WC_LOC_PROT_ERR)
                return
            wqe.got += 1
            wqe.landed += len(pkt.payload)
            # done at the last response, all bytes in (as rxe's completer): a responder whose MTU is smaller
            # than ours sends more responses than we reserved PSNs for, and the ones past them are not ours
            if op in (Op.RC_RDMA_READ_RESPONSE_LAST, Op.RC_RDMA_READ_RESPONSE_ONLY) and wqe.landed >= wqe.length:
                self.finish(wqe, IBV_WC_SUCCESS)
        self.complete_ready()

    def ack(self, psn, now):
        """Everything up to `psn` arrived: WRITEs and SENDs that end there are done."""
        if self.acked is None or psn_diff(psn, self.acked) <= 0 or psn_diff(psn, self.psn) >= 0:
            return   # old news (or a PSN never sent)
        for wqe in self.wqes:
            if not wqe.waits_for_answer():
                continue
            if psn_diff(wqe.last, psn) > 0:
                break
            if wqe.opcode == READ or wqe.opcode in ATOMICS:   # done only by its answer
                if psn_diff(wqe.last, psn) < 0:   # acknowledged past it: its answer was lost, ask again
                    psn = psn_add(wqe.first, wqe.got - 1)
                    self.next = psn_add(wqe.first, wqe.got)
                break
            wqe.done = True
        if psn_diff(psn, self.acked) > 0:
            self.acked = psn
        self.progress(now)
        self.complete_ready()

    def progress(self, now):
        """An answer moved things on: the retry count starts again, and so does the ACK timer."""
        self.retries_left = self.retry_cnt
        self.deadline = now + ack_timeout(self.timeout) if self.timeout and self.outstanding() else None

    def outstanding(self):
        return any(w.waits_for_answer() for w in self.wqes)

    def go_back(self, psn, now, nic):
        """Send again from `psn` (go-back-N), if the retry count allows; else RETRY_EXC_ERR. (Halted: never.)"""
        if self.halted:
            return
        left = requester.spend(self.retries_left, nic.count, "retry_exceeded_err")
        if left is None:
            head = next((w for w in self.wqes if not w.done), None)
            if head is not None:
                self.finish(head, IBV_WC_RETRY_EXC_ERR)
            return
        self.retries_left = left
        nic.count("completer_retry_err")   # (as rxe's completer counts each retry it decides on)
        wqe = self.find(psn)
        if wqe is not None and wqe.opcode == READ:   # a READ is asked again from the first response missing
            psn = psn_add(wqe.first, wqe.got)
        self.next = psn
        self.since_ack_req = 0
        self.deadline = now + ack_timeout(self.timeout) if self.timeout else None

    def rnr(self, psn, timer, now):
        wqe = self.find(psn)
        if wqe is None:
            return
        if wqe.status or any(w.status and psn_diff(self.next, w.first) >= 0 for w in self.wqes):
            return self.halt()   # the requester met a local error (in this message, or sent on to one behind it)
        wqe.data = None   # (its resend reads its memory again, as rxe's does)
        wqe.rnr_left = requester.spend(self.rnr_retry if wqe.rnr_left is None else wqe.rnr_left, self.conn.nic.count,
                                   "retry_rnr_exceeded_err")
        if wqe.rnr_left is None:
            self.finish(wqe, IBV_WC_RNR_RETRY_EXC_ERR)
            return
        self.next = wqe.first
        self.rnr_until = now + RNR_TIMER_MS[timer % 32] / 1000.0
        self.deadline = None

    def timer(self, nic, now):
        """The ACK timeout: nothing came back for a while. Go back to the oldest unacknowledged packet."""
        if self.deadline is not None and now >= self.deadline and not self.error and not self.halted:
            if not self.outstanding():
                self.deadline = None
                return
            nic.count("ack_timeouts")
            head = next(w for w in self.wqes if w.waits_for_answer())
            if head.cut:   # nothing came back for a message cut short: its local error decides (rxe does not wait)
                return self.finish(head, head.status)
            start = psn_add(head.first, head.got) if head.opcode == READ else \
                psn_add(self.acked, 1) if head.holds(psn_add(self.acked, 1)) else head.first
            self.go_back(start, now, nic)

    def next_deadline(self):
        times = [t for t in (self.deadline, self.rnr_until if self.rnr_until else None) if t]
        return min(times) if times else None

    def find(self, psn):
        for wqe in self.wqes:
            if wqe.count and wqe.holds(psn):
                return wqe
        return None

    # ------------------------------------------------------------ completions

    def scatter(self, wqe, offset, data):
        """Put a READ's bytes (from `offset` in the message) or an atomic's old value into the local SGEs;
        False, having written nothing, if they cannot take them (too small, or forbidden)."""
        return requester.land(wqe.sges, offset, data, lambda addr, length, lkey: self._memory(addr, length, lkey, LOCAL_WRITE))

    def finish(self, wqe, status):
        wqe.done, wqe.status = True, status
        self.complete_ready()

    def complete_ready(self):
        """Report, in order, every WQE at the head that is done; an error puts the QP in ERR."""
        conn = self.conn
        while self.wqes:
            wqe = self.wqes[0]
            if wqe.status and not wqe.done and not wqe.cut:   # a local error found by the program: its turn has come
                wqe.done = True
            if not wqe.done:
                break
            self.wqes.popleft()
            conn.retired = wqe.seq
            if wqe.status and wqe.status != IBV_WC_SUCCESS:
                conn.completion(wqe.wr_id, *requester.completion_fields(wqe.opcode, wqe.status))
                self.fail_all(IBV_WC_WR_FLUSH_ERR)
                return
            if requester.signaled(wqe.flags, conn.sig_all):
                conn.completion(wqe.wr_id, *requester.completion_fields(wqe.opcode, IBV_WC_SUCCESS, wqe.length))
        if not self.outstanding():
            self.deadline = None

    def fail_all(self, status, more=()):
        """The QP is in ERR: every WQE still held, and `more`, completes with `status` (WR_FLUSH_ERR)."""
        self.error = True
        self.conn.enter_error()
        for wqe in list(self.wqes) + list(more):
            self.conn.retired = wqe.seq
            self.conn.completion(wqe.wr_id, *requester.completion_fields(wqe.opcode, status))
        self.wqes.clear()
        self.deadline = None


class Request:
    """What soft0's responder.respond() reads of a request: a work request's fields, from the packets, under
    the names a SendWR keeps them (wr.py: its target's are not pyverbs names, so they start with "_")."""
    __slots__ = ("opcode", "_remote_addr", "_rkey", "imm_data", "send_flags", "_compare_add", "_swap")

    def __init__(self, opcode, remote_addr=0, rkey=0, imm_data=0, send_flags=0, compare_add=0, swap=0):
        self.opcode, self._remote_addr, self._rkey, self.imm_data = opcode, remote_addr, rkey, imm_data
        self.send_flags, self._compare_add, self._swap = send_flags, compare_add, swap


def _packet_opcodes(operation):
    """The RC opcodes of a SEND's or WRITE's packets at each position (immediate data or an rkey to invalidate
    ride in the last packet only: the first and middle are a plain SEND's or WRITE's)."""
    op = OPERATIONS[operation]
    suffix = "_WITH_IMMEDIATE" if op.imm else "_WITH_INVALIDATE" if op.inv else ""
    return [Op[f"RC_{op.message}_{position}{suffix if position in ('LAST', 'ONLY') else ''}"] for position in POSITIONS]


_OPCODE_AT = {operation: _packet_opcodes(operation) for operation in CARRIES_DATA}   # operation -> opcodes by position
# wire opcode -> (operation, position): a last or only packet tells its operation; a first or middle one, a
# plain SEND's or WRITE's (which one becomes clear at the last)
_SEND_OPS = {opcode: (operation, position) for operation, opcodes in _OPCODE_AT.items()
             for position, opcode in enumerate(opcodes)
             if position >= 2 or not (OPERATIONS[operation].imm or OPERATIONS[operation].inv)}
UC = 0x20   # a UC opcode is its RC twin's with this bit set (SENDs and WRITEs only)
_SEND_OPS.update({Op(op | UC): what for op, what in _SEND_OPS.items() if op | UC in Op.__members__.values()
                  and Op(op | UC).name.startswith("UC_")})
_ONE_PACKET = {Op.RC_RDMA_READ_REQUEST: READ, Op.RC_COMPARE_SWAP: CMP_AND_SWP, Op.RC_FETCH_ADD: FETCH_AND_ADD}
REQUESTS = set(_SEND_OPS) | set(_ONE_PACKET)


_UNSOLICITED = Request(0)   # what a FIRST or MIDDLE packet tells a receive it fails (only a last one may solicit)


class Partial:
    """A SEND's or WRITE's packets received so far (`size`: its first's, the sender's MTU; `received`: its bytes);
    `begun`: the request its first packet was judged as (responder.begin), whose packets land as they come; `landed`:
    the bytes of it in place. What checks.PACKET reads of the message in progress (checks.Arrival.message)."""
    __slots__ = ("first", "kind", "reth", "chunks", "count", "size", "received", "begun", "landed")

    def __init__(self, first, kind, reth, size):
        self.first, self.kind, self.reth, self.chunks, self.count = first, kind, reth, [], 0
        self.size, self.received, self.begun, self.landed = size, 0, None, 0


_READ_RESPONSE = (Op.RC_RDMA_READ_RESPONSE_FIRST, Op.RC_RDMA_READ_RESPONSE_MIDDLE, Op.RC_RDMA_READ_RESPONSE_LAST,
                  Op.RC_RDMA_READ_RESPONSE_ONLY)


class Responder:
    """The receiving half of one RC QP (see the module's docstring)."""

    def __init__(self, conn):
        self.conn = conn
        self.partial = None
        self.msn = 0
        self.nak_sent = False
        self.replies = deque(maxlen=KEPT_REPLIES)   # (first psn, count, opcode, data): READ bytes / atomic old value

    def reset(self):
        self.partial, self.msn, self.nak_sent = None, 0, False
        self.replies.clear()

    def request(self, pkt, nic):
        """A request packet: checks.PACKET judges it (a UC one, checks.ARRIVAL: its PSNs are its own), then it joins
        its message, which lands as it comes (land) and is carried out at its last packet (responder.respond)."""
        conn, op, part = self.conn, pkt.opcode, self.partial
        peer = conn.peer()
        if peer is not None and (not peer.alive() or peer.owner_died()):   # (a dead program's QPs are gone with it)
            peer = None
        h = peer.header if peer is not None else None
        operation, position = _SEND_OPS.get(op) or (_ONE_PACKET[op], 3)
        expected = psn_add(part.first, part.count) if part else h[Q_EXPECTED_PSN] if h is not None else 0
        reth = pkt.reth if position in (0, 3) else part.reth if part is not None else None   # (its message's)
        arrival = checks.Arrival(h, pkt.psn, expected, MESSAGE[operation], position, len(pkt.payload),
                                 reth.dmalen if reth is not None and op in _SEND_OPS else None, part)
        if conn.unreliable:
            verdict = checks.first(checks.ARRIVAL, arrival)
            return self.refuse(verdict, pkt, nic) if verdict is not None else self.unreliable(pkt, arrival, peer, nic)
        verdict = checks.first(checks.PACKET, arrival)
        if verdict is not None:
            return self.refuse(verdict, pkt, nic, arrival.expected)
        self.nak_sent = False
        if position == 3 and op not in _SEND_OPS:   # a READ or an atomic
            return self.read_or_atomic(pkt, peer, nic)
        got = self.take(pkt, operation, position)
        if got is None:   # more packets to come: this one lands now, as rxe writes each packet as it comes
            answer = self.land(pkt, operation, position, peer)
            if answer is not None:
                return self.answer(answer, pkt.psn, pkt.psn, pkt.a, h, nic)
            if pkt.a:
                self.ack(nic, pkt.psn)
            return
        part, payload, request = got
        h[Q_EXPECTED_PSN] = part.first   # respond() judges the whole message from its first PSN, and moves it past
        answer, _ = verbs_responder.respond(peer, request, payload, len(payload), part.first, part.count,
                                            self.sender_mtu(part), part.landed)
        self.answer(answer, part.first, pkt.psn, pkt.a, h, nic)

    def refuse(self, verdict, pkt, nic, expected=None):
        """Carry out a verdict of checks.PACKET: its effect's counter, then its answer: none (dropped); a NAK "PSN
        sequence error" asking for the expected PSN, once until it comes (the packets after it, already on their
        way, are dropped without a word); a duplicate's answer again; else an invalid request (NAK, QP to ERR)."""
        effect = verdict.effect
        if effect.counter is not None and not (effect.once and self.nak_sent):
            nic.count(effect.counter, effect.times)
        answer = verdict.answer
        if answer == checks.SEQUENCE_NAK:
            if not self.nak_sent:
                self.nak_sent = True
                self.reply(nic, Op.RC_ACKNOWLEDGE, expected, aeth=AETH.nak(self.msn, NAK_PSN_SEQUENCE_ERROR))
        elif answer == checks.ANSWER_AGAIN:
            self.duplicate(pkt, expected, nic)
        elif answer != NO_ANSWER:
            self.invalid(pkt, nic)

    def land(self, pkt, operation, position, peer):
        """A FIRST or MIDDLE packet of a SEND or WRITE (its operation's first packets: a plain one's). At the FIRST
        the responder judges the message (responder.begin: by its RETH, a WRITE's whole length), then each packet
        lands as it comes, so a message its requester never finishes (a bad local SGE further on) leaves what came,
        as on rxe. Returns None, or the answer to a refusal (the message dropped)."""
        part = self.partial
        if position == 0:
            reth, mtu = pkt.reth, len(pkt.payload)
            length = reth.dmalen if reth is not None else mtu   # (a SEND's is known at its last packet)
            count = packets(length, mtu) if reth is not None else 2
            answer, part.begun = verbs_responder.begin(peer, Request(operation, reth.va if reth else 0,
                                                                     reth.r_key if reth else 0), length, part.first,
                                                       count, mtu, dry=False)   # (a SEND takes its receive here)
            if part.begun is None:
                self.partial = None
                return answer
        answer, placed = verbs_responder.land(peer, _UNSOLICITED, part.begun, part.landed, pkt.payload)
        if answer is not None:
            self.partial = None
            return answer
        part.landed += placed
        peer.header[Q_EXPECTED_PSN] = psn_add(pkt.psn, 1)   # (rq_psn moves with each packet, as rxe's resp.psn)
        return None

    def unreliable(self, pkt, arrival, peer, nic):
        """UC, as rxe's responder takes it: a packet it does not expect loses the message in progress, and
        everything until the next FIRST or ONLY, which starts a new message wherever its PSN is; so does a packet
        that does not fit its message (checks.FIT). Nothing is answered: no ACK, no NAK, no RNR NAK (a SEND with no
        receive posted is simply lost)."""
        operation, position = _SEND_OPS[pkt.opcode]
        starts = position in (0, 3)
        if arrival.psn != arrival.expected or (self.partial is None) != starts or \
                self.partial and self.partial.kind != MESSAGE[operation]:
            self.partial = arrival.message = None
            if not starts:
                nic.count("out_of_seq_request")
                return
        if checks.first(checks.FIT, arrival) is not None:
            self.partial = None   # (a packet that does not fit loses its message)
            return
        got = self.take(pkt, operation, position)
        if got is not None:
            part, payload, request = got
            verbs_responder.respond(peer, request, payload, len(payload), part.first, part.count,
                                    self.sender_mtu(part))   # (nobody hears)

    def take(self, pkt, operation, position):
        """Add a SEND's or WRITE's packet, which checks.PACKET found fits, to its message: None while more are to
        come; at its last packet (part, payload, Request). Whether the sender's MTU fits ours is respond()'s to judge
        (sender_mtu)."""
        if position in (0, 3):
            self.partial = Partial(pkt.psn, MESSAGE[operation], pkt.reth, len(pkt.payload))
        part = self.partial
        part.chunks.append(pkt.payload)
        part.count += 1
        part.received += len(pkt.payload)
        if position in (0, 1):
            return None
        self.partial = None
        payload = part.chunks[0] if part.count == 1 else b"".join(part.chunks)
        reth = part.reth
        return part, payload, Request(operation, reth.va if reth else 0, reth.r_key if reth else 0,
                                      pkt.immdt.imm_data if pkt.immdt else pkt.ieth.r_key if pkt.ieth else 0,
                                      IBV_SEND_SOLICITED if pkt.se else 0)

    @staticmethod
    def sender_mtu(part):
        """The MTU a message's packets say their sender used: its first packet's size (all of a one-packet
        message's). respond() holds it to the responder's path MTU (checks.path_mtu), as the shared-memory
        link holds the requester's."""
        return len(part.chunks[0])

    def read_or_atomic(self, pkt, peer, nic):
        h, mtu = peer.header, self.conn.mtu
        if pkt.opcode == Op.RC_RDMA_READ_REQUEST:
            reth = pkt.reth
            request, length = Request(READ, reth.va, reth.r_key), reth.dmalen
            count = packets(length, mtu)
        else:
            a = pkt.atomiceth
            if pkt.opcode == Op.RC_FETCH_ADD:
                request = Request(FETCH_AND_ADD, a.va, a.r_key, compare_add=a.swapdt)
            else:
                request = Request(CMP_AND_SWP, a.va, a.r_key, compare_add=a.cmpdt, swap=a.swapdt)
            length, count = 8, 1
        answer, data = verbs_responder.respond(peer, request, None, length, pkt.psn, count)
        if answer != ACK:
            return self.answer(answer, pkt.psn, pkt.psn, True, h, nic)
        self.msn = psn_add(self.msn, 1)   # (an MSN is 24-bit too)
        data = bytes(data)
        self.replies.append((pkt.psn, count, pkt.opcode, data))
        self.send_reply(pkt.psn, count, pkt.opcode, data, 0, nic)

    def send_reply(self, first, count, opcode, data, start, nic):
        """Answer a READ (its responses, from response number `start` on) or an atomic (its old value)."""
        if opcode != Op.RC_RDMA_READ_REQUEST:
            self.reply(nic, Op.RC_ATOMIC_ACKNOWLEDGE, first, aeth=AETH.ack(self.msn),
                       atomicacketh=AtomicAckETH(int.from_bytes(data, "little")))
            return
        mtu = self.conn.mtu
        for i in range(start, count):
            op = _READ_RESPONSE[3 if count == 1 else 0 if i == 0 else 2 if i == count - 1 else 1]
            aeth = None if op == Op.RC_RDMA_READ_RESPONSE_MIDDLE else AETH.ack(self.msn)
            self.reply(nic, op, psn_add(first, i), aeth=aeth, payload=data[i * mtu:(i + 1) * mtu])

    def answer(self, answer, first, psn, ack_req, h, nic):
        """What soft0's responder answered, on the wire."""
        if answer == ACK:
            self.msn = psn_add(self.msn, 1)   # (an MSN is 24-bit too)
            if ack_req:
                self.ack(nic, psn)
        elif answer == RNR_NAK:
            nic.count("send_rnr_err")
            self.nak_sent = True   # the packets after it, already on their way, are dropped without a word
            self.reply(nic, Op.RC_ACKNOWLEDGE, first, aeth=AETH.rnr_nak(self.msn, int(h[Q_MIN_RNR_TIMER]) % 32))
        elif answer == NO_ANSWER:
            nic.count("dropped_qp_not_ready")
        else:
            nic.count("nak_sent")
            self.nak_sent = True
            self.reply(nic, Op.RC_ACKNOWLEDGE, first, aeth=AETH.nak(self.msn, NAK_CODE.get(answer,
                                                                                        NAK_REMOTE_OPERATIONAL_ERROR)))

    def invalid(self, pkt, nic):
        """A packet out of the opcode sequence, or of the wrong length: NAK invalid request, QP to ERR (rxe)."""
        self.partial = None
        verbs_responder.enter(self.conn.peer().header, IBV_QPS_ERR)
        nic.count("nak_sent")
        self.reply(nic, Op.RC_ACKNOWLEDGE, pkt.psn, aeth=AETH.nak(self.msn, NAK_INVALID_REQUEST))

    def duplicate(self, pkt, expected, nic):
        """A request sent again: answer it again, without doing it again."""
        op = pkt.opcode
        if op == Op.RC_RDMA_READ_REQUEST or op == Op.RC_COMPARE_SWAP or op == Op.RC_FETCH_ADD:
            for first, count, kind, data in self.replies:
                if kind == op and 0 <= psn_diff(pkt.psn, first) < count:
                    self.send_reply(first, count, kind, data, psn_diff(pkt.psn, first), nic)
                    return
            nic.count("dropped_duplicate_unanswerable")
            return
        if pkt.a:
            self.reply(nic, Op.RC_ACKNOWLEDGE, psn_add(expected, -1), aeth=AETH.ack(self.msn))

    def ack(self, nic, psn):
        """ACK everything up to `psn`: the commonest answer, encoded as the data packets are (DataPacket)."""
        aeth = _AETH_ACK.pack(AETH_ACK << 29 | CREDITS_INVALID << 24 | self.msn)   # AETH.ack(self.msn).pack()
        nic.send(DataPacket(Op.RC_ACKNOWLEDGE, self.conn.dest_qpn, psn, b"", aeth, False, False), self.conn)

    def reply(self, nic, opcode, psn, **fields):
        nic.send(Packet(opcode, self.conn.dest_qpn, psn, **fields), self.conn)
