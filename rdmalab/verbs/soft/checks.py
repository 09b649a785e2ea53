"""Every check soft0's NIC makes of a request, in one ordered list, as rxe's requester and responder walk
their states (rxe_req.c; rxe_resp.c: CHK_PSN, CHK_OP_VALID, CHK_RESOURCE, CHK_LENGTH, CHK_RKEY, EXECUTE).

A check reads a request (`Request`: the WR's fields, and the QPs and memory it names) and passes (None) or
gives a `Verdict`: which check, what the NIC answers (a completion status; NO_ANSWER: the packets are
dropped and the requester times out; RNR_NAK), the rule in words, the figures it compared, and for a
message that had taken a receive, the status that receive completes with.

REQUESTER holds the checks of the initiator's own NIC, RESPONDER the target's, each in the order the NIC
makes them; PACKET, those a request's every packet meets before it joins its message (rxe's CHK_PSN,
CHK_OP_SEQ, CHK_LENGTH), which only the udp link's responder runs, as only it moves packets. Who runs them:
- requester.attempt and responder.respond, on every request the fast path does not carry (and the udp
  link's doorbell and responder, through the same two); they act on the first verdict. A datagram meets
  DATAGRAM at its destination (datagram.land, on both links), and a memory-window bind BIND
  (requester.local_operation); each ends in the same Verdict.
- requester.Shortcut repeats a request shape these checks passed, at the target QP's generation; it
  re-tests what belongs to one request (its PSN, its bounds) and, on any doubt, hands the WR back here.
- glassbox.walk (the step mode's prediction) runs them without posting; lessons.explain runs them after a
  completion failed, and names the verdict that gave its status.
Checks marked LANDING are made as the data lands (ReceiveQueue.scatter, SGE by SGE, as rxe's copy_data:
the SGEs before a bad one keep their bytes); the step mode and explain run them without landing anything.

Adding a rule: a function here, its place in a list (REQUESTER, RESPONDER, LANDING, SENDING_DATAGRAM, DATAGRAM,
BIND, INVALIDATE, PACKET), its verdict's Effect if it has one (what the responder does besides answering:
responder._refuse, or the udp link's Responder.refuse, carries it out without asking which rule gave it), and its
test (tests/soft/test_checks.py). A rule on a request's own fields beyond its PSN and bounds must also be re-tested
by requester.Shortcut, which repeats a request shape these lists passed.
"""
from enum import Enum
from typing import NamedTuple

from . import mr as mrmod
from .constants import (
    IBV_ACCESS_LOCAL_WRITE as LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC as REMOTE_ATOMIC,
    IBV_ACCESS_MW_BIND, IBV_ACCESS_REMOTE_READ as REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_MW_TYPE_2, IBV_QPS_RTR,
    IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_WC_MW_BIND_ERR,
    IBV_SEND_INLINE, IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR,
    IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS, IBV_WR_RDMA_WRITE as WRITE, IBV_WR_RDMA_WRITE_WITH_IMM as WRITE_WITH_IMM,
    IBV_WR_RDMA_READ as READ, IBV_WR_SEND_WITH_INV as SEND_WITH_INV)
from .layout import (M_ACCESS, M_ADDR, M_LENGTH, M_MW_TYPE, M_PD, M_QP, M_VALID, Q_ACCESS, Q_ALIVE,
                     Q_EXPECTED_PSN, Q_MAX_DEST_RD_ATOMIC, Q_MIN_RNR_TIMER, Q_NUM, Q_PATH_MTU, Q_PD, Q_QKEY, Q_RQ_CONSUMED,
                     Q_RQ_POSTED, Q_SRQ, Q_STATE, Q_TYPE, R_NUM_SGE, R_SGES)
from .operations import ANSWERS_DATA, ATOMICS, CARRIES_DATA, CONSUMES_RECEIVE, NEEDS_ACCESS, OPERATIONS
from rdmalab.wire.psn import psn_diff

ACK, NO_ANSWER, RNR_NAK = IBV_WC_SUCCESS, -1, -2   # what a responder answers, besides a NAK's status
# what a packet is answered besides (PACKET): a NAK "PSN sequence error" naming the PSN expected (once, until
# that packet comes), and a duplicate's answer given again (an ACK; a READ's or atomic's kept reply)
SEQUENCE_NAK, ANSWER_AGAIN = -3, -4
FAR_AHEAD = 1 << 16   # a request PSN further ahead than this is out of any window: dropped
RECEIVING = (IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD)   # the states a QP takes requests in (SQD drains sends only)
# min_rnr_timer encodings (IB spec table 45), in milliseconds
RNR_TIMER_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96,
                1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92,
                122.88, 163.84, 245.76, 327.68, 491.52]
ACCESS_NAMES = (("LOCAL_WRITE", 1), ("REMOTE_WRITE", 2), ("REMOTE_READ", 4), ("REMOTE_ATOMIC", 8))


def access_names(access):
    return " | ".join(name for name, bit in ACCESS_NAMES if access & bit) or "no access flags"


class Check(str, Enum):
    """The rules' names, as verdicts carry them: code compares these members (`verdict.check is Check.PSN`), never
    their text, so a rule renamed here is renamed everywhere, and a misspelt one is an AttributeError."""
    PSN = "PSN"
    QP_STATE = "QP state"
    Q_KEY = "Q_Key"
    ALIGNMENT = "alignment"
    DATAGRAM_QP = "datagram QP"
    DATAGRAM_SIZE = "datagram size"
    KEY_TO_INVALIDATE = "key to invalidate"
    LOCAL_ACCESS = "local access"
    LOCAL_BOUNDS = "local bounds"
    LOCAL_KEY = "local key"
    LOCAL_ROOM = "local room"
    OPCODE_SEQUENCE = "opcode sequence"
    OPERATION = "operation"
    OPERATION_ALLOWED = "operation allowed"
    PACKET_LENGTH = "packet length"
    PATH_MTU = "path MTU"
    RECEIVE_BUFFER = "receive buffer"
    RECEIVE_POSTED = "receive posted"
    RECEIVE_ROOM = "receive room"
    RESOURCES = "resources"
    RKEY = "rkey"
    TARGET_QP = "target QP"

    __str__, __format__ = str.__str__, str.__format__   # (shown as its text, as before)


class Effect(NamedTuple):
    """What a responder does about a refusal besides answering it, as rxe's responder states carry it (the rest
    follows from the verdict: no answer drops the packets; a NAK puts an RC QP in ERR; a status for the receive
    fails the receive the message took, and the QP). The responder carries it out (responder._refuse) without
    asking which rule gave it: a new rule with a new effect is a check here and, at most, a field here."""
    counter: str = None     # the counter rxe bumps (rdmalab.verbs.soft.counters), `times` times
    times: int = 1
    once: bool = False      # counted once, until a request comes in order (rxe's sequence error: the first NAKed)
    in_order: bool = True   # the packets reached the QP in order (False: refused for its state or their PSN)


TAKEN = Effect()                                    # nothing besides the answer
DROPPED = Effect(in_order=False)                    # a QP not ready, or a PSN it cannot take
SEQUENCE_ERROR = Effect("out_of_seq_request", once=True, in_order=False)   # ahead: counted once, dropped
RNR = Effect("send_rnr_err")                        # no receive posted: RNR NAK


class Verdict(NamedTuple):
    check: "Check"        # the rule's name ("local key", "rkey", "receive room"...: an entry of the lists may
                          # make several checks, as "local keys" checks each SGE's key, access and bounds)
    answer: int           # a completion status for the requester (a NAK's), NO_ANSWER or RNR_NAK
    rule: str             # the rule, in words, with the figures
    figures: dict         # what it compared
    receive: int = None   # the status the target's receive completes with, when the message had taken one
    lands: bool = False   # the data lands before the refusal takes effect (the refusal comes after it)
    effect: Effect = TAKEN   # what else the responder does about it

    @property
    def status(self):
        """The status the requester's completion ends with, once its retries are spent: RETRY_EXC_ERR when
        nobody answers, RNR_RETRY_EXC_ERR after RNR NAKs, else the answer."""
        return {NO_ANSWER: IBV_WC_RETRY_EXC_ERR, RNR_NAK: IBV_WC_RNR_RETRY_EXC_ERR}.get(self.answer, self.answer)


class Request:
    """A request as the checks read it. The requester's side: its QP type and PD (a PD object), its SGEs
    and flags. The responder's: `peer` (responder.PeerQP, or None: no QP answers) or a bare header `h`, the
    PSN and packet count it arrives with, and the requester's path MTU (None: not compared). The memory
    checks leave what they found in `seg` and `offset`: what the responder then copies to or from."""
    __slots__ = ("opcode", "qp_type", "pd", "sges", "flags", "rkey", "remote_addr", "imm", "length", "peer", "h",
                 "psn", "count", "mtu", "dry", "seg", "offset")

    def __init__(self, opcode, length=0, rkey=0, remote_addr=0, imm=0, flags=0, sges=(), qp_type=IBV_QPT_RC,
                 pd=None, peer=None, h=None, psn=0, count=1, mtu=None, dry=False):
        self.opcode, self.length, self.rkey, self.remote_addr, self.imm, self.flags = \
            opcode, length, rkey, remote_addr, imm, flags
        self.sges, self.qp_type, self.pd, self.peer = sges, qp_type, pd, peer
        self.h = peer.header if h is None and peer is not None else h
        self.psn, self.count, self.mtu, self.dry, self.seg, self.offset = psn, count, mtu, dry, None, None

    @classmethod
    def of(cls, wqe, length, **more):
        """A request from a WR (or a WQE with a WR's fields: opcode, send_flags, imm_data, _rkey, _remote_addr)."""
        return cls(wqe.opcode, length, wqe._rkey, wqe._remote_addr, wqe.imm_data, wqe.send_flags, **more)


# ---------------------------------------------------------------- the requester's checks (our own memory)

def operation(r):
    """The QP type carries the operation out (operations.TABLE); else the WR fails with LOC_QP_OP_ERR."""
    return carried_out(r.qp_type, r.opcode)


def carried_out(qp_type, opcode):
    """operation() for a QP type and an opcode."""
    op = OPERATIONS.get(opcode)
    if op is None or qp_type not in op.qp_types:
        return Verdict(Check.OPERATION, IBV_WC_LOC_QP_OP_ERR, "this QP type does not carry that operation out",
                       {"opcode": opcode, "qp_type": qp_type})
    return None


def local_sge(pd, addr, length, lkey, need=0):
    """An SGE of our own memory: its lkey names an MR of the QP's PD (else LOC_QP_OP_ERR), granting `need`
    (the NIC writes a READ's or atomic's answer there: LOCAL_WRITE) and holding [addr, addr+length) (else
    LOC_PROT_ERR). An SGE of length 0 names nothing: rxe checks no key for it."""
    if not length:
        return None
    mr = mrmod.REGISTERED.get(lkey)
    if mr is None or mr._pd is not pd:
        return Verdict(Check.LOCAL_KEY, IBV_WC_LOC_QP_OP_ERR, f"lkey {lkey:#x} is no MR of this QP's PD",
                       {"lkey": lkey, "exists": mr is not None})
    figures = {"lkey": lkey, "start": mr._buf, "length": mr._length, "access": mr._access, "need": need}
    if need and not mr._access & need:
        return Verdict(Check.LOCAL_ACCESS, IBV_WC_LOC_PROT_ERR, f"the MR of lkey {lkey:#x} lacks {access_names(need)}",
                       figures)
    offset = addr - mr._buf
    if offset < 0 or offset + length > mr._length:
        by = -offset if offset < 0 else offset + length - mr._length
        where = "before the start" if offset < 0 else "past the end"
        return Verdict(Check.LOCAL_BOUNDS, IBV_WC_LOC_PROT_ERR,
                       f"[{addr:#x}, +{length}) runs {by} bytes {where} of the MR of lkey {lkey:#x} "
                       f"[{mr._buf:#x}, +{mr._length})", {**figures, "by": by, "where": where})
    return None


def sources(r):
    """A WRITE's or SEND's SGEs, read by our NIC (inline data was copied at post time: nothing to check)."""
    if r.opcode not in CARRIES_DATA or r.flags & IBV_SEND_INLINE:   # (a READ's land: LANDING; a bind's: none)
        return None
    for addr, length, lkey in r.sges:
        verdict = local_sge(r.pd, addr, length, lkey)
        if verdict is not None:
            return verdict
    return None


def landing(r):
    """Where a READ's bytes or an atomic's old value land (checked when the answer comes back): our SGEs
    hold it all, and each is writable by the NIC; else LOC_PROT_ERR (the remote side has done its part)."""
    if r.opcode not in ANSWERS_DATA:
        return None
    room = sum(sge[1] for sge in r.sges)
    if room < (8 if r.opcode in ATOMICS else r.length):
        return Verdict(Check.LOCAL_ROOM, IBV_WC_LOC_PROT_ERR, f"the SGEs hold {room} bytes, fewer than the answer",
                       {"room": room})
    for addr, length, lkey in r.sges:
        verdict = local_sge(r.pd, addr, length, lkey, LOCAL_WRITE)
        if verdict is not None:
            return verdict._replace(answer=IBV_WC_LOC_PROT_ERR)   # (an answer that cannot land: always LOC_PROT_ERR)
    return None


# ---------------------------------------------------------------- the responder's checks (the target's QP and memory)

def target(r):
    """A QP answers at the destination number and GID; else nobody answers."""
    if r.h is None:
        return Verdict(Check.TARGET_QP, NO_ANSWER, "no QP answers at that number and address", {})
    return None


def state(r):
    """The target QP is in RTR, RTS or SQD (and alive); else it drops the packets, unanswered."""
    h = r.h
    if h is not None and (h[Q_STATE] not in RECEIVING or not h[Q_ALIVE]):
        return Verdict(Check.QP_STATE, NO_ANSWER, "a QP takes requests only in RTR, RTS or SQD",
                       {"state": int(h[Q_STATE]), "alive": bool(h[Q_ALIVE])}, effect=DROPPED)
    return None


def sequence(r):
    """The request starts at the PSN the RC QP expects (UC takes a message from whatever PSN it starts at).
    Behind it: duplicates, dropped (rxe counts each such packet), or, if the message began behind and runs
    into the expected PSN, an invalid request. Ahead: a sequence error, dropped (the requester resends)."""
    h = r.h
    if h is None or h[Q_TYPE] == IBV_QPT_UC or h[Q_EXPECTED_PSN] == r.psn:
        return None
    expected = int(h[Q_EXPECTED_PSN])
    behind = psn_diff(expected, r.psn)   # (negative: the PSN is ahead of the expected one)
    figures = {"expected": expected, "psn": r.psn, "behind": behind, "count": r.count}
    if behind < 0:
        return Verdict(Check.PSN, NO_ANSWER, f"PSN {r.psn:#x} is ahead of the expected {expected:#x}", figures,
                       effect=SEQUENCE_ERROR)
    if behind < r.count:
        return Verdict(Check.PSN, IBV_WC_REM_INV_REQ_ERR, f"the message began {behind} packets behind the expected PSN "
                       f"{expected:#x}: the packet at that PSN continues a message never seen to begin", figures,
                       effect=DROPPED)
    return Verdict(Check.PSN, NO_ANSWER, f"PSN {r.psn:#x} was taken already (the QP expects {expected:#x}): a duplicate",
                   figures, effect=Effect("duplicate_request", times=min(behind, r.count), in_order=False))


def allowed(r):
    """The target QP's qp_access_flags allow the operation (set in its RESET to INIT modify, whatever the MR
    allows); else an invalid request."""
    need, h = NEEDS_ACCESS.get(r.opcode, 0), r.h
    if h is not None and need and not h[Q_ACCESS] & need:
        return Verdict(Check.OPERATION_ALLOWED, IBV_WC_REM_INV_REQ_ERR,
                       f"the target QP's qp_access_flags are {access_names(h[Q_ACCESS])}: the operation needs "
                       f"{access_names(need)} there too", {"qp_access": int(h[Q_ACCESS]), "need": need})
    return None


def resources(r):
    """A READ or an atomic needs responder resources (max_dest_rd_atomic > 0, set in the INIT to RTR modify)."""
    h = r.h
    if h is not None and NEEDS_ACCESS.get(r.opcode, 0) & (REMOTE_READ | REMOTE_ATOMIC) and not h[Q_MAX_DEST_RD_ATOMIC]:
        return Verdict(Check.RESOURCES, IBV_WC_REM_INV_REQ_ERR,
                       "the target QP has max_dest_rd_atomic 0: no resources for READs and atomics", {})
    return None


def receive(r):
    """A SEND or a WRITE_WITH_IMM takes the target's next posted receive (from its SRQ, if it has one:
    taking it is this check's one act, as in rxe's check_resource; not when dry); none posted: RNR NAK.
    A WRITE_WITH_IMM of several packets asks at its last (last_packet_receive): the first are a WRITE's."""
    if r.opcode == WRITE_WITH_IMM and r.count > 1:
        return None
    return receive_posted(r)


def last_packet_receive(r):
    """receive() for a WRITE_WITH_IMM of several packets, asked after the checks its first packet meets (rkey,
    path MTU), as rxe's responder asks at WRITE_LAST_WITH_IMMEDIATE."""
    if r.opcode == WRITE_WITH_IMM and r.count > 1:
        return receive_posted(r)
    return None


def receive_posted(r):
    h = r.h
    if h is None or r.opcode not in CONSUMES_RECEIVE or h[Q_RQ_CONSUMED] != h[Q_RQ_POSTED]:
        return None
    if h[Q_SRQ] and (r.peer.shared_receives() if r.dry else r.peer.take_shared_receive()):
        return None
    timer = RNR_TIMER_MS[h[Q_MIN_RNR_TIMER] % 32]
    return Verdict(Check.RECEIVE_POSTED, RNR_NAK, "no receive is posted: the responder answers RNR NAK",
                   {"timer_ms": timer}, effect=RNR)


def memory(seg, addr, length, pd, need, qp_num=0):
    """The checks of a key's memory, in rxe's order (check_rkey): the key names a valid MR or window
    (mr.find found `seg`), of the QP's PD, granting `need`, holding [addr, addr+length), and if it is a
    type 2 window, bound to this QP (qp_num; 0: not asked). (offset, None) when all pass, else (None, (rule,
    figures)). The responder's keys, a receive's buffers and the udp link's local memory all pass here."""
    if seg is None:
        return None, ("no such key", {})
    m = seg.header
    start, size = m[M_ADDR], m[M_LENGTH]
    offset = addr - start
    if m[M_VALID] and m[M_PD] == pd and m[M_ACCESS] & need == need and offset >= 0 and offset + length <= size \
            and not (qp_num and m[M_QP] and m[M_QP] != qp_num):
        return offset, None
    figures = {"start": int(start), "length": int(size), "access": int(m[M_ACCESS]), "need": need}
    if not m[M_VALID]:
        return None, ("key invalidated", figures)
    if m[M_PD] != pd:
        return None, ("another PD", figures)
    if m[M_ACCESS] & need != need:
        return None, ("access", figures)
    if offset < 0:
        return None, ("before the start", {**figures, "by": -offset})
    if offset + length > size:
        return None, ("past the end", {**figures, "by": offset + length - size})
    return None, ("window of another QP", {**figures, "qp_num": int(m[M_QP])})


def rkey(r):
    """The request's rkey and range: memory() for the target QP (a WRITE's, READ's, atomic's or
    WRITE_WITH_IMM's). A zero-length WRITE or READ names no memory: no key is checked. Refused: REM_ACCESS_ERR
    (for an RC WRITE_WITH_IMM of one packet, whose receive was taken, that receive fails too; one of several
    packets is refused at its first, a plain WRITE's, before it takes a receive)."""
    need, h = NEEDS_ACCESS.get(r.opcode, 0), r.h
    if h is None or not need:
        return None
    reach = 8 if r.opcode in ATOMICS else r.length
    if not reach:
        return None
    seg = r.seg = mrmod.find(r.rkey)
    r.offset, refused = memory(seg, r.remote_addr, reach, h[Q_PD], need, h[Q_NUM])
    if refused is None:
        return None
    rule, figures = refused
    said = {"no such key": f"rkey {r.rkey:#x} names no MR or memory window the target may use",
            "key invalidated": f"rkey {r.rkey:#x} was invalidated or its MR deregistered",
            "another PD": "the rkey's MR is registered in another PD than the target QP's",
            "access": f"the rkey's MR allows {access_names(figures.get('access', 0))}, not {access_names(need)}",
            "window of another QP": f"rkey {r.rkey:#x} is a type 2 window bound to another QP",
            }.get(rule) or (f"{reach} bytes at {r.remote_addr:#x} run {figures['by']} bytes {rule} of the MR of rkey "
                            f"{r.rkey:#x} [{figures['start']:#x}, +{figures['length']})")
    takes_receive = r.opcode in CONSUMES_RECEIVE and h[Q_TYPE] != IBV_QPT_UC and r.count == 1
    return Verdict(Check.RKEY, IBV_WC_REM_ACCESS_ERR, said,
                   {**figures, "rule": rule, "rkey": r.rkey, "reach": reach, "need": need},
                   receive=IBV_WC_REM_ACCESS_ERR if takes_receive else None)


def path_mtu(r):
    """A WRITE (or WRITE_WITH_IMM) sent in packets of the requester's MTU fits the responder's path MTU as rxe
    (Linux 6.1's check_rkey) checks it: while more than one MTU is left, a packet carries exactly one MTU;
    the last, all that is left. So both sides must agree on the MTU for a WRITE of more than the smaller one
    (else an invalid request; a WRITE_WITH_IMM had taken a receive, which fails with it). A SEND is not held
    to it. A READ is answered in packets of the responder's MTU: if that is smaller than the requester's, and
    the READ longer, the requester takes the responses for the PSNs it reserved (one per packet of its own
    MTU) and no more, and resends until retry_cnt runs out (RETRY_EXC_ERR; what it took has landed)."""
    h = r.h
    if h is None or r.opcode not in (WRITE, WRITE_WITH_IMM, READ) or not r.mtu or not r.length:
        return None
    own = 128 << h[Q_PATH_MTU]
    if r.opcode == READ:
        if r.mtu <= own or r.length <= own:
            return None
        landed = min(r.length, own * r.count)
        return Verdict(Check.PATH_MTU, NO_ANSWER, f"the READ's answer comes in packets of the target's path MTU of {own} "
                       f"bytes, not {r.mtu}: the requester takes {landed} bytes of {r.length} and waits for the rest",
                       {"mtu": r.mtu, "responder_mtu": own, "length": r.length, "landed": landed}, lands=True)
    first = min(r.length, r.mtu)
    if (first == own) if r.length > own else (first == r.length):
        return None
    return Verdict(Check.PATH_MTU, IBV_WC_REM_INV_REQ_ERR,
                   f"packets of {r.mtu} bytes do not fit the target's path MTU of {own} bytes",
                   {"mtu": r.mtu, "responder_mtu": own, "length": r.length},
                   receive=IBV_WC_REM_INV_REQ_ERR if r.opcode == WRITE_WITH_IMM and h[Q_TYPE] != IBV_QPT_UC
                   and r.count == 1 else None)   # (one of several packets is refused at its first: no receive yet)


def mtu_agrees(h, mtu):
    """The two sides' path MTUs are the same: every later WRITE passes path_mtu (requester.Shortcut asks)."""
    return 128 << h[Q_PATH_MTU] == mtu


def alignment(r):
    """An atomic names an 8-byte-aligned word (post_send refuses others; an extended QP's wr_atomic_* sends
    them); else an invalid request."""
    if r.opcode in ATOMICS and r.h is not None and r.remote_addr & 7:
        return Verdict(Check.ALIGNMENT, IBV_WC_REM_INV_REQ_ERR, f"an atomic needs an 8-byte-aligned address, not "
                       f"{r.remote_addr:#x}", {"remote_addr": r.remote_addr})
    return None


def receive_room(r):
    """LANDING. The receive's SGEs hold the SEND's bytes (else nothing lands: REM_OP_ERR, and the receive
    fails with LOC_QP_OP_ERR), and each takes its bytes (its lkey an MR of the QP's PD with LOCAL_WRITE,
    the range inside: the SGEs before a bad one keep theirs)."""
    h = r.h
    if h is None or r.peer is None or r.opcode not in CONSUMES_RECEIVE or NEEDS_ACCESS.get(r.opcode):
        return None
    if h[Q_RQ_CONSUMED] != h[Q_RQ_POSTED]:   # the receive it takes: the QP's own next one
        return receive_buffers(r.peer.rq, h[Q_RQ_CONSUMED], r.length, h[Q_PD])
    ring = r.peer.shared_ring() if r.dry and h[Q_SRQ] else None   # (dry: the SRQ's next one, not taken)
    return receive_buffers(ring, ring.next_receive(), r.length, h[Q_PD]) if ring is not None and ring.count() else None


def receive_buffers(rq, n, length, pd, landing=None):
    """receive_room() for receive number n of `rq`: None, or the verdict. `landing`, a list, gets (segment,
    offset, bytes) for each SGE the bytes may land in, in order (ReceiveQueue.scatter copies into those)."""
    w, base = rq.words, rq.slot(n)
    sges = [w[base + R_SGES + 3 * i:base + R_SGES + 3 * i + 3] for i in range(w[base + R_NUM_SGE])]
    room = sum(size for _, size, _ in sges)
    if room < length:
        return Verdict(Check.RECEIVE_ROOM, IBV_WC_REM_OP_ERR, f"the receive holds {room} bytes, fewer than the "
                       f"message's {length}", {"room": room, "length": length}, receive=IBV_WC_LOC_QP_OP_ERR)
    done = 0
    for addr, size, lkey in sges:
        take = min(size, length - done)
        if take <= 0:
            if done == length:
                break
            continue
        seg = mrmod.find(lkey)
        offset, refused = memory(seg, addr, take, pd, LOCAL_WRITE)
        if refused is not None:
            return Verdict(Check.RECEIVE_BUFFER, IBV_WC_REM_OP_ERR, f"the receive's SGE [{addr:#x}, +{size}) lkey "
                           f"{lkey:#x} may not take the bytes ({refused[0]})", {**refused[1], "landed": done},
                           receive=IBV_WC_LOC_QP_OP_ERR, lands=True)
        if landing is not None:
            landing.append((seg, offset, take))
        done += take
    return None


def invalidation(r):
    """LANDING. A SEND_WITH_INV's key may be invalidated (invalidable()). Else the data has landed all the
    same and the SEND is ACKed, but the receive fails with REM_INV_REQ_ERR and the target QP enters ERR
    (as rxe does)."""
    if r.opcode != SEND_WITH_INV or r.h is None:
        return None
    return invalidable(r.imm)


def local_invalidation(key):
    """LOCAL_INV, our own NIC's work: the key (the WR's invalidate_rkey) may be invalidated (invalidable()); else the
    WR fails with LOC_QP_OP_ERR, and the QP enters ERR, as any failed WR puts it."""
    verdict = invalidable(key)
    return None if verdict is None else verdict._replace(answer=IBV_WC_LOC_QP_OP_ERR, receive=None, lands=False)


def invalidable(key):
    """A key LOCAL_INV or SEND_WITH_INV may invalidate: a valid type 2 memory window's (rxe invalidates only
    those and fast-registered MRs, which soft0 has not). None, or the verdict of a SEND_WITH_INV."""
    seg = mrmod.find(key) if key & mrmod.WINDOW_KEY else None
    if seg is not None and seg.header[M_MW_TYPE] == IBV_MW_TYPE_2 and seg.header[M_VALID]:
        return None
    return Verdict(Check.KEY_TO_INVALIDATE, ACK, f"key {key:#x} is no valid type 2 memory window: it cannot be "
                   "invalidated", {"key": key}, receive=IBV_WC_REM_INV_REQ_ERR, lands=True)


# ---------------------------------------------------------------- a datagram (UD): as it is sent, at its destination

def one_packet(r):
    """A UD message rides one packet, so it fits the port's MTU (r.mtu bytes); a longer one completes, as on rxe,
    but never leaves: nothing answers a datagram, so its sender never learns."""
    if r.length > r.mtu:
        return Verdict(Check.DATAGRAM_SIZE, NO_ANSWER, f"a datagram of {r.length} bytes does not fit one packet of the "
                       f"port's MTU, {r.mtu}: it is lost", {"length": r.length, "mtu": r.mtu})
    return None


def datagram_qp(r):
    """A UD QP, ready (RTR, RTS or SQD) and alive, takes datagrams; anything else drops them (nothing answers a
    datagram: the sender never learns)."""
    h = r.h
    if h is None:
        return Verdict(Check.TARGET_QP, NO_ANSWER, "no QP takes datagrams at that number and address", {})
    if h[Q_TYPE] != IBV_QPT_UD or h[Q_STATE] not in RECEIVING or not h[Q_ALIVE]:
        return Verdict(Check.DATAGRAM_QP, NO_ANSWER, "only a UD QP in RTR, RTS or SQD takes a datagram",
                       {"qp_type": int(h[Q_TYPE]), "state": int(h[Q_STATE]), "alive": bool(h[Q_ALIVE])})
    return None


def qkey(r):
    """The datagram's Q_Key (the AH's remote_qkey in the WR) is the destination QP's; else it is dropped."""
    if r.h[Q_QKEY] != r.rkey:
        return Verdict(Check.Q_KEY, NO_ANSWER, f"the datagram's Q_Key {r.rkey:#x} is not the QP's {int(r.h[Q_QKEY]):#x}",
                       {"qkey": r.rkey, "qp_qkey": int(r.h[Q_QKEY])})
    return None


def datagram_receive(r):
    """A receive is posted; else the datagram is lost (UD has no RNR NAK)."""
    if r.h[Q_RQ_CONSUMED] == r.h[Q_RQ_POSTED]:
        return Verdict(Check.RECEIVE_POSTED, NO_ANSWER, "no receive is posted: the datagram is lost (UD has no RNR)", {})
    return None


# ---------------------------------------------------------------- binding a memory window (the NIC's own work)

# ---------------------------------------------------------------- a packet's checks (PACKET: the udp link's responder)

class Arrival:
    """A request packet as a responder judges it before it joins its message: the QP it reaches (`h`, its header; None:
    no QP, or its program is gone), its PSN and the one expected (the next of the message in progress, else the QP's),
    what it is (`kind`: its operations.MESSAGE, "SEND", "RDMA_WRITE", or "RDMA_READ" or "ATOMIC", each one packet;
    `position`: 0 FIRST, 1 MIDDLE, 2 LAST, 3 ONLY; `size`: its payload's bytes; `length`: its WRITE's length, from
    the RETH of its first packet, else None) and the message in progress it would join (`message`, None: none; its
    `kind`, `size`, its first packet's, and `received`, its bytes so far)."""
    __slots__ = ("h", "psn", "expected", "kind", "position", "size", "length", "message")

    def __init__(self, h, psn, expected, kind, position, size, length, message):
        self.h, self.psn, self.expected, self.kind, self.position, self.size, self.length, self.message = \
            h, psn, expected, kind, position, size, length, message


def arrival_qp(a):
    """A QP answers at the packet's destination number, owned by a living program; else it is dropped."""
    if a.h is None:
        return Verdict(Check.TARGET_QP, NO_ANSWER, "no QP answers at that number", {},
                       effect=Effect("dropped_unknown_qp", in_order=False))
    return None


def arrival_state(a):
    """The QP takes requests (RTR, RTS, SQD); else the packet is dropped and its requester times out."""
    if a.h[Q_STATE] not in RECEIVING:
        return Verdict(Check.QP_STATE, NO_ANSWER, "the target QP is not in RTR, RTS or SQD",
                       {"state": int(a.h[Q_STATE])}, effect=Effect("dropped_qp_not_ready", in_order=False))
    return None


def arrival_psn(a):
    """The packet's PSN is the one expected (rxe's check_psn). Ahead: one was lost, so a NAK "PSN sequence error"
    asks for it (once: the packets after it, already on their way, are counted and dropped), unless it is out of any
    window; behind: a duplicate (an ACK was lost), answered again and never carried out again."""
    ahead = psn_diff(a.psn, a.expected)
    if not ahead:
        return None
    figures = {"psn": a.psn, "expected": a.expected, "ahead": ahead}
    if ahead > FAR_AHEAD:
        return Verdict(Check.PSN, NO_ANSWER, f"PSN {a.psn:#x} is out of any window ahead of {a.expected:#x}", figures,
                       effect=Effect("dropped_out_of_window", in_order=False))
    if ahead > 0:
        return Verdict(Check.PSN, SEQUENCE_NAK, f"PSN {a.psn:#x} is ahead of the expected {a.expected:#x}: one was "
                       f"lost", figures, effect=SEQUENCE_ERROR)   # (counted once, with the NAK, as rxe counts it)
    return Verdict(Check.PSN, ANSWER_AGAIN, f"PSN {a.psn:#x} was taken already (the QP expects {a.expected:#x}): a "
                   f"duplicate", figures, effect=Effect("duplicate_request", in_order=False))


def opcode_sequence(a):
    """rxe's check_op_seq: a FIRST or ONLY packet (a READ, an atomic) comes between messages; a MIDDLE or LAST
    continues a message of its kind. Else an invalid request: NAK, and the QP enters ERR."""
    m = a.message
    if (a.position in (0, 3)) == (m is None) and (m is None or m.kind == a.kind):
        return None
    rule = ("a message's first packet while another is in progress" if m is not None and a.position in (0, 3) else
            f"a {('MIDDLE', 'LAST')[a.position - 1]} packet with no FIRST before it" if m is None else
            f"a {a.kind} packet inside a {m.kind}")
    return Verdict(Check.OPCODE_SEQUENCE, IBV_WC_REM_INV_REQ_ERR, rule, {"position": a.position, "kind": a.kind})


def packet_length(a):
    """rxe's check_length: a FIRST packet carries bytes, a MIDDLE exactly what its FIRST did (the sender's MTU), a
    LAST no more; and a WRITE's packets, which land as they come, never carry more than its RETH's length, and
    at the last add up to it. Else an invalid request."""
    m = a.message   # (a MIDDLE or LAST has one: opcode_sequence came first)
    first, received = (m.size, m.received + a.size) if m is not None else (a.size, a.size)
    if a.position == 0 and not a.size or a.position == 1 and a.size != first or a.position == 2 and a.size > first:
        return Verdict(Check.PACKET_LENGTH, IBV_WC_REM_INV_REQ_ERR, f"a packet of {a.size} bytes in a message whose "
                       f"first carried {first}", {"size": a.size, "first": first})
    if a.position in (0, 1) and a.length is not None and received >= a.length:
        return Verdict(Check.PACKET_LENGTH, IBV_WC_REM_INV_REQ_ERR, f"the WRITE's packets carry {received} bytes before "
                       f"its last, its RETH says {a.length}", {"received": received, "length": a.length})
    if a.position in (2, 3) and a.length is not None and received != a.length:
        return Verdict(Check.PACKET_LENGTH, IBV_WC_REM_INV_REQ_ERR, f"the WRITE's packets carry {received} bytes, its "
                       f"RETH says {a.length}", {"received": received, "length": a.length})
    return None


class Bind(NamedTuple):
    """A BIND_MW WR as the checks read it: the window, the QP that binds it (number, PD object), the window key the
    WR names, and its bind_info (the MR, addr, length, mw_access_flags)."""
    mw: object
    qp_num: int
    pd: object
    mw_key: int
    info: object


def bind_rules(b):
    """rxe_bind_mw's checks, in its order; each refusal completes the WR with MW_BIND_ERR, changing nothing."""
    mw, mr, addr, length, access = b.mw, b.info._mr, b.info.addr, b.info.length, b.info.mw_access_flags
    figures = {"mw_key": b.mw_key, "addr": addr, "length": length, "mw_access": access}
    if mw._closed or b.mw_key != mw._nic_key:
        return _bind_error("window key", f"the WR names window key {b.mw_key:#x}, not the window's current key "
                           f"{mw._nic_key:#x}" if not mw._closed else "the window was deallocated", figures)
    if length and mr.closed:
        return _bind_error("MR", "the MR to bind the window in was deregistered", figures)
    if mw._type == IBV_MW_TYPE_2:
        if mw._window is not None and mw._window.header[M_VALID]:
            return _bind_error("type 2 window free", "a type 2 window binds only while unbound: invalidate it "
                               "first (LOCAL_INV, or a SEND_WITH_INV from the peer)", figures)
        if b.pd is not mw._pd:
            return _bind_error("type 2 window PD", "a type 2 window binds on a QP of its own PD", figures)
        if not length:
            return _bind_error("type 2 window length", "a type 2 window binds to some memory (length 0 unbinds "
                               "a type 1 window only)", figures)
    if not length:
        return None
    if not mr._access & IBV_ACCESS_MW_BIND:
        return _bind_error("MR allows binding", f"the MR's access is {access_names(mr._access)}: it lacks MW_BIND",
                           {**figures, "mr_access": mr._access})
    if access & (IBV_ACCESS_REMOTE_WRITE | REMOTE_ATOMIC) and not mr._access & LOCAL_WRITE:
        return _bind_error("MR allows writes", "a window granting REMOTE_WRITE or REMOTE_ATOMIC needs an MR with "
                           "LOCAL_WRITE", {**figures, "mr_access": mr._access})
    if addr < mr.buf or addr + length > mr.buf + mr.length:
        return _bind_error("bounds", f"[{addr:#x}, +{length}) does not lie in the MR [{mr.buf:#x}, +{mr.length})",
                           {**figures, "mr_start": mr.buf, "mr_length": mr.length})
    return None


def _bind_error(check, rule, figures):
    return Verdict(check, IBV_WC_MW_BIND_ERR, rule, figures)


REQUESTER = (("operation", operation), ("local keys", sources))
RESPONDER = (("target QP", target), ("QP state", state), ("PSN", sequence), ("operation allowed", allowed),
             ("resources", resources), ("receive posted", receive), ("rkey", rkey), ("path MTU", path_mtu),
             ("alignment", alignment), ("receive at the last packet", last_packet_receive))
LANDING = (("receive room", receive_room), ("key to invalidate", invalidation), ("answer lands", landing))
SENDING_DATAGRAM = (("datagram size", one_packet),)   # as a UD QP sends it (DatagramQueue.send_now)
DATAGRAM = (("datagram QP", datagram_qp), ("Q_Key", qkey), ("receive posted", datagram_receive))
ARRIVAL = (("target QP", arrival_qp), ("QP state", arrival_state))   # what a UC packet meets (its PSNs are its own)
FIT = (("opcode sequence", opcode_sequence), ("packet length", packet_length))
PACKET = ARRIVAL + (("PSN", arrival_psn),) + FIT
BIND = (("bind", bind_rules),)
INVALIDATE = (("key to invalidate", local_invalidation),)   # a LOCAL_INV (a key: its invalidate_rkey)


def first(checks, r):
    """The first verdict of `checks` (a list: REQUESTER, RESPONDER, ...) on request `r`, or None: all passed."""
    for _, check in checks:
        verdict = check(r)
        if verdict is not None:
            return verdict
    return None


def every(r):
    """Every check, in order, run dry on `r` (nothing taken, nothing landed): [(name, verdict or None)].
    What the step mode and explain read; a refusal does not stop the ones after it."""
    r.dry = True
    return [(name, check(r)) for name, check in REQUESTER + RESPONDER + LANDING]


def names_of(entries, *checks):
    """The names of a list's entries (of those checks only, if given): what every() names them by."""
    return {name for name, check in entries if not checks or check in checks}
