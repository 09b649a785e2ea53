"""When it breaks: a working pair broken on purpose, one way at a time, and what each failure looks like
(the failures lesson). Each run returns a Broken: the completion's status (or that none came: a hang),
both QPs' states, the port counters that moved, and how long the failure took to show.

    mine = failures.break_pair(my_break, ctx, pd)   # my_break(sender, target) changes one thing
    b = failures.run("wrong PSN", ctx, pd)          # b.status 12, b.states ("ERR", "RTS"), b.moved {...}

What each side's QP is given on its way to RTS is a Side (the sender's also its WRITE): the learner's
function changes one field of a working pair's, the lesson's KINDS change theirs: a wrong address (a GID
no port has), a wrong PSN (the target expects an earlier one), path MTUs that differ (the sender's larger
or smaller than the target's: rxe's responder refuses a packet that is not exactly its path MTU), an MR
without REMOTE_WRITE (the target's NIC refuses), no receive posted (RNR), and the QP in ERR afterwards
(every WR flushed) with the way back.
"""
import html
import ipaddress
import os
import textwrap
import time

from rdmalab import verbs as v
from rdmalab.errors import MLX5_ERROR_COUNTERS, RXE_ERROR_COUNTERS as ERROR_COUNTERS, explain_status, status_name
from rdmalab.lessons.fixtures import state_of
from rdmalab.verbs import emulated
from rdmalab.wire.psn import psn_add
from rdmalab.verbs import rc

KINDS = ("wrong address", "wrong PSN", "path MTUs differ", "no REMOTE_WRITE", "no receive", "flushed")
RETRY_CNT = 2      # resends before RETRY_EXC_ERR: a wrong address or PSN shows in 3 ACK timeouts
TIMEOUT = 12       # 4.096 us * 2**12 = 16.8 ms per ACK timeout
RNR_RETRY = 2      # resends of a SEND that finds no receive, before RNR_RETRY_EXC_ERR
HANG_S = 5.0       # break_pair's wait for the WRITE's completion: none by then is a hang
SHOWN_COUNTERS = (*ERROR_COUNTERS, "rcvd_seq_err", *MLX5_ERROR_COUNTERS)


def port_counters(device=None, port=1):
    """The port's counters now: the device's hw_counters in sysfs on a real device (rxe's names on rxe,
    mlx5's on a ConnectX), soft0's own on soft0 (its shared-memory link names them as rxe does; its udp
    link's NIC process counts under names of its own); {} where there are none."""
    found = emulated.counters()   # (None on a real device)
    if found is not None:
        return found
    device = device or v.choose_route().device
    folder = f"/sys/class/infiniband/{device}/ports/{port}/hw_counters"
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            found[name] = int(open(os.path.join(folder, name)).read())
        except (OSError, ValueError):
            continue
    return found


class Broken:
    """What one failure looked like."""

    def __init__(self, kind):
        self.kind, self.status, self.states, self.moved, self.seconds = kind, None, None, {}, 0.0
        self.refused = None      # an error raised at modify() or post_send() instead of a completion
        self.hung = False        # no completion came within the wait (the sender may still be resending)
        self.changed = []        # what break_pair's function changed: "target.rq_psn 7 -> 12"
        self.later = []          # statuses of the WRs posted after the first failed (flushed)
        self.recovered = None    # the status of a READ after the way back (RESET, INIT, RTR, RTS)
        self.wc = None           # the failed completion
        self.gids = ("", "")     # (ours, the peer's as we were told it)

    def __repr__(self):
        return (f"Broken({self.kind!r}, status={self.status}, states={self.states}, moved={self.moved}, "
                f"seconds={self.seconds:.3f}, refused={self.refused!r}, hung={self.hung}, changed={self.changed}, "
                f"later={self.later}, recovered={self.recovered})")


class Side:
    """What one side's QP is given on its way to RTR and RTS, under QPAttr's names: what it was told of its
    peer (dest_qp_num; rq_psn, the PSN the peer sends from; the peer's address, dgid on RoCE or dlid on
    InfiniBand: its ah_attr's) and its own attributes. A working pair's values until someone changes one."""
    __slots__ = ("dest_qp_num", "rq_psn", "sq_psn", "dgid", "dlid", "path_mtu", "qp_access_flags", "timeout",
                 "retry_cnt", "rnr_retry", "min_rnr_timer", "max_rd_atomic", "max_dest_rd_atomic")
    name = "side"

    def values(self):
        """{field: value}, enum members as the plain numbers they are."""
        return {f: _plain(getattr(self, f, None)) for f in type(self).fields()}

    @classmethod
    def fields(cls):
        return [f for c in reversed(cls.__mro__) for f in getattr(c, "__slots__", ())]

    def __repr__(self):
        return f"{self.name}: " + ", ".join(f"{f}={x!r}" for f, x in self.values().items())


def _plain(value):
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Sender(Side):
    """The sender's Side, and the RDMA WRITE it posts: `length` bytes into the target's memory at
    `remote_addr`, with the target's `rkey`."""
    __slots__ = ("rkey", "remote_addr", "length")
    name = "sender"


class Target(Side):
    """The target's Side: the QP the WRITE goes to."""
    __slots__ = ()
    name = "target"


def _unused_gid(gid):
    """A GID in the same IPv4 subnet as `gid` that no port has: the next address up, ::ffff:a.b.c.(d+99)."""
    words = gid.split(":")
    ip = ipaddress.IPv4Address(int("".join(words[6:]), 16))
    other = int(ip) + 99 if ip.packed[3] < 150 else int(ip) - 99
    hexed = f"{other:08x}"
    return ":".join(words[:6] + [hexed[:4], hexed[4:]])


def _pair(ctx, pd, b_mr_access=None):
    """Two sides (Resources), a and b, not connected yet."""
    e = v.enums
    full = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a = rc.Resources(ctx=ctx, pd=pd, access=full, cq_depth=16, max_send_wr=8, max_recv_wr=8)
    b = rc.Resources(ctx=ctx, pd=pd, access=full if b_mr_access is None else b_mr_access, cq_depth=16,
                     max_send_wr=8, max_recv_wr=8)
    return a, b


def _post(side, rkey, addr, opcode, wr_id=1, length=64):
    e = v.enums
    w = v.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[v.wr.SGE(side.mr.buf, length, side.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
    if opcode != e.IBV_WR_SEND:
        w.set_wr_rdma(rkey, addr)
    side.qp.post_send(w)


def settings(side, remote, cls=Side):
    """What side.qp is given to connect to `remote` (its endpoint): the lesson's short timers (RETRY_CNT
    resends TIMEOUT apart, RNR_RETRY after an RNR NAK), the port's path MTU; the peer may write and read."""
    e = v.enums
    route = v.route_of(side.ctx, "this device")
    s = cls()
    s.dest_qp_num, s.rq_psn, s.sq_psn = remote["qp_num"], remote["psn"], side.psns[0]
    s.dgid, s.dlid, s.path_mtu = remote["gid"], remote.get("lid", 0), route.path_mtu
    s.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    s.timeout, s.retry_cnt, s.rnr_retry, s.min_rnr_timer = TIMEOUT, RETRY_CNT, RNR_RETRY, rc.MIN_RNR_TIMER
    s.max_rd_atomic, s.max_dest_rd_atomic = rc.MAX_RD_ATOMIC, rc.MAX_DEST_RD_ATOMIC
    if cls is Sender:
        s.rkey, s.remote_addr, s.length = remote.get("rkey"), remote.get("addr"), 64
    return s


def _to_rts(side, s):
    """side.qp through INIT and RTR to RTS with what `s` (a Side) gives it."""
    route = v.route_of(side.ctx, "this device")
    a = v.qp.QPAttr(port_num=route.port, path_mtu=s.path_mtu)
    a.pkey_index, a.qp_access_flags = 0, s.qp_access_flags
    a.ah_attr = rc.address_vector(route, {"gid": s.dgid, "lid": s.dlid})
    a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic = s.dest_qp_num, s.rq_psn, s.max_dest_rd_atomic
    a.min_rnr_timer, a.sq_psn, a.timeout, a.retry_cnt = s.min_rnr_timer, s.sq_psn, s.timeout, s.retry_cnt
    a.max_rd_atomic, a.rnr_retry = s.max_rd_atomic, s.rnr_retry
    side.qp.to_rts(a)


def connect(side, remote, path_mtu=None):
    """side.qp to RTS, connected to `remote` with the lesson's settings(); path_mtu: another path MTU."""
    s = settings(side, remote)
    if path_mtu is not None:
        s.path_mtu = path_mtu
    _to_rts(side, s)


def _other_mtu(mtu):
    """A path MTU other than `mtu`: 4096, or 1024 where `mtu` is 4096 already."""
    e = v.enums
    return e.IBV_MTU_1024 if mtu == e.IBV_MTU_4096 else e.IBV_MTU_4096


def _wrong_address(sender, target):
    if sender.dlid:   # an InfiniBand port, addressed by LID
        sender.dlid = 0xBFFE   # among the last unicast LIDs: a subnet manager rarely assigns them
    else:
        sender.dgid = _unused_gid(sender.dgid)


CHANGES = {   # what each kind changes in a working pair (the others change the MR, or post a SEND)
    "wrong address": _wrong_address,
    "wrong PSN": lambda sender, target: setattr(target, "rq_psn", psn_add(sender.sq_psn, -1000)),
    "path MTUs differ": lambda sender, target: (setattr(sender, "path_mtu", _other_mtu(target.path_mtu)),
                                                setattr(sender, "length", 4096)),
}


def break_pair(change, ctx, pd, wait_s=HANG_S):
    """A working pair, changed by change(sender, target) (a Sender and a Target: see Side), then one RDMA
    WRITE from sender to target. Returns what it looked like (a Broken): .changed says what was changed,
    .hung that no completion came within wait_s seconds (the sender may be resending still)."""
    return _run("your change", ctx, pd, change=change, wait_s=wait_s)


def run(kind, ctx, pd, timeout=30.0):
    """Break a fresh pair the way `kind` says, and return what it looked like (a Broken)."""
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not one of the failures: {', '.join(KINDS)}")
    e = v.enums
    no_write = kind in ("no REMOTE_WRITE", "flushed")
    return _run(kind, ctx, pd, change=CHANGES.get(kind), wait_s=timeout,
                b_mr_access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ if no_write else None,
                opcode=e.IBV_WR_SEND if kind == "no receive" else e.IBV_WR_RDMA_WRITE)


def _run(kind, ctx, pd, change=None, wait_s=30.0, b_mr_access=None, opcode=None):
    e = v.enums
    opcode = e.IBV_WR_RDMA_WRITE if opcode is None else opcode
    out = Broken(kind)
    a, b = _pair(ctx, pd, b_mr_access)
    try:
        a_end, b_end = a.endpoint(mr=a.mr), b.endpoint(mr=b.mr)
        sender, target = settings(a, b_end, Sender), settings(b, a_end, Target)
        working = (sender.values(), target.values())
        if change is not None:
            change(sender, target)
        out.changed = [f"{s.name}.{f} {old!r} -> {s.values()[f]!r}" for s, was in zip((sender, target), working)
                       for f, old in was.items() if s.values()[f] != old]
        out.gids = (a_end["gid"], sender.dgid)
        before, started = port_counters(), time.monotonic()
        try:
            _to_rts(a, sender)
            _to_rts(b, target)
            _post(a, sender.rkey, sender.remote_addr, opcode, length=sender.length)
        except (v.pyverbs_error.PyverbsError, TypeError, ValueError, OverflowError) as error:
            out.refused = f"{type(error).__name__}: {error}"
        else:
            try:
                out.wc = rc.wait_for_completion(a.cq, timeout=wait_s)
                out.status = out.wc.status
            except TimeoutError:
                out.hung = True
            out.seconds = time.monotonic() - started
            if kind == "flushed":
                for wr_id in (2, 3):   # posted on a QP in ERR: each completes at once, flushed
                    _post(a, b_end["rkey"], b_end["addr"], e.IBV_WR_RDMA_WRITE, wr_id=wr_id)
                    out.later.append(rc.wait_for_completion(a.cq, timeout=wait_s).status)
        out.states = (state_of(a.qp), state_of(b.qp))
        out.moved = _moved(before, port_counters())
        if kind == "flushed":   # the way back: RESET, then INIT, RTR and RTS again, with fresh PSNs
            for side in (a, b):
                side.qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
                side.psns[0] = psn_add(side.psns[0], 4096)
            connect(a, b.endpoint(mr=b.mr))
            connect(b, a.endpoint(mr=a.mr))
            _post(a, b_end["rkey"], b_end["addr"], e.IBV_WR_RDMA_READ)   # b's MR allows READs
            out.recovered = rc.wait_for_completion(a.cq, timeout=wait_s).status
        return out
    finally:
        b.close()
        a.close()


class Stuck:
    """A pair stuck in ERR, for the way back (when-it-breaks.way-back): a working pair whose target had two
    receives posted, then a WRITE with a wrong rkey, refused by the target's NIC (REM_ACCESS_ERR): both QPs in
    ERR, the receives flushed (WR_FLUSH_ERR). `qps` is (the sender's QP, the target's); `sender` and `target`
    (a Sender and a Target) what each was given on its way to RTS, which to_rts() gives them again;
    `old_psn`, the PSN the refused WRITE went out with. Close it when done (or use `with`)."""

    def __init__(self, ctx, pd):
        e = v.enums
        self.a, self.b = _pair(ctx, pd)
        try:
            end_a, end_b = self.a.endpoint(mr=self.a.mr), self.b.endpoint(mr=self.b.mr)
            self.sender, self.target = settings(self.a, end_b, Sender), settings(self.b, end_a, Target)
            self.rkey, self.addr, self.old_psn = end_b["rkey"], end_b["addr"], self.sender.sq_psn
            _to_rts(self.a, self.sender)
            _to_rts(self.b, self.target)
            self.posted = 0
            self.post_recv(2)
            _post(self.a, self.rkey ^ 0x5A5A00, self.addr, e.IBV_WR_RDMA_WRITE)   # a key the target never gave
            self.refused = rc.wait_for_completion(self.a.cq).status
            self.flushed, deadline = [], time.monotonic() + 2.0   # (a device moves its QPs to ERR, and flushes
            while time.monotonic() < deadline and (len(self.flushed) < 2 or self.states() != ("ERR", "ERR")):
                n, wcs = self.b.cq.poll(2)                        # the receives, as its own work: wait for both)
                self.flushed += [wc.status for wc in wcs[:n]]
                time.sleep(0.001 if not n else 0)
        except BaseException:
            self.close()
            raise
        self.qps = (self.a.qp, self.b.qp)

    def to_rts(self):
        """Both QPs through INIT, RTR and RTS, each with what `sender` and `target` say now (from RESET only:
        from any other state the device refuses, errno 22)."""
        _to_rts(self.a, self.sender)
        _to_rts(self.b, self.target)

    def post_recv(self, n=2):
        """Post `n` receives of 64 bytes on the target's QP (refused, errno 22, before INIT)."""
        for _ in range(n):
            self.posted += 1
            self.b.qp.post_recv(v.wr.RecvWR(wr_id=100 + self.posted, num_sge=1,
                                            sg=[v.wr.SGE(self.b.mr.buf + 1024, 64, self.b.mr.lkey)]))

    def states(self):
        """(the sender's QP state, the target's), as the device reports them."""
        return state_of(self.a.qp), state_of(self.b.qp)

    def psns(self):
        """{"sender": (sq_psn, rq_psn), "target": (...)}: what each QP holds now (query), before any traffic."""
        e = v.enums
        out = {}
        for name, qp in (("sender", self.a.qp), ("target", self.b.qp)):
            attr, _ = qp.query(e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN)
            out[name] = (attr.sq_psn, attr.rq_psn)
        return out

    def traffic(self, wait_s=5.0):
        """A WRITE of 64 bytes into the target's memory, then a SEND of 64 to it: (the WRITE's status, whether
        its bytes landed, the SEND's status, the target's receive's status or None)."""
        e = v.enums
        pattern = bytes(range(7, 71))
        self.a.mr.write(pattern, 64, 0)
        _post(self.a, self.rkey, self.addr, e.IBV_WR_RDMA_WRITE, wr_id=11)
        wrote = rc.wait_for_completion(self.a.cq, timeout=wait_s).status
        landed = wrote == 0 and self.b.mr.read(64, 0) == pattern
        if wrote != 0:
            return wrote, landed, None, None
        _post(self.a, None, None, e.IBV_WR_SEND, wr_id=12)
        sent = rc.wait_for_completion(self.a.cq, timeout=wait_s).status
        received, deadline = None, time.monotonic() + (wait_s if sent == 0 else 0.1)
        while received is None and time.monotonic() < deadline:
            n, wcs = self.b.cq.poll(8)
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_WR_FLUSH_ERR:   # (a receive posted in ERR is flushed at once)
                    received = wc.status
            time.sleep(0 if n else 0.001)
        return wrote, landed, sent, received

    def close(self):
        for side in (getattr(self, "b", None), getattr(self, "a", None)):
            if side is not None:
                side.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _moved(before, after):
    return {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}


def meaning(broken):
    """What a Broken says, in a sentence: the status and what it most likely means, or the hang, or the
    refusal; and which side knows."""
    if broken.refused:
        return (f"Refused before any packet: {broken.refused}. The device checked what it was given when the QP "
                f"moved to RTR or RTS, or when the WR was posted.")
    if broken.hung:
        return (f"No completion in {broken.seconds:.0f} s: the sender is still resending, or waiting for an answer "
                f"that will not come (retry_cnt 7 means 'for ever' on rxe and soft0, rnr_retry 7 everywhere; timeout 0 "
                f"means no ACK timer; a long one waits (retry_cnt + 1) x 4.096 us x 2^timeout). In a training job "
                f"this is a hang: every GPU waits on this AllReduce.")
    if broken.status == 0:
        return "Nothing broke: the WRITE completed. Change one field in your function and run both cells again."
    states = dict(zip(("sender", "target"), broken.states or ()))
    unaware = [who for who, state in states.items() if state == "RTS"]
    return (f"Status {explain_status(broken.status)}. " +
            (f"The {' and '.join(unaware)}'s QP is still in RTS: it knows nothing of the failure."
             if unaware else "Both QPs are in ERR."))


# ---------------------------------------------------------------- what a training job prints

def _wc_opcode_name(opcode):
    """ibvWcOpcodeStr's name (NCCL's src/misc/ibvwrap.cc): an error completion's opcode is not defined
    (ibv_poll_cq(3)), and NCCL prints whatever the device left there."""
    names = ("IBV_WC_SEND", "IBV_WC_RDMA_WRITE", "IBV_WC_RDMA_READ", "IBV_WC_COMP_SWAP", "IBV_WC_FETCH_ADD",
             "IBV_WC_BIND_MW", "IBV_WC_RECV", "IBV_WC_RECV_RDMA_WITH_IMM")
    return next((n for n in names if getattr(v.enums, n, None) == opcode), "UNKNOWN_OPCODE")


def _gid_text(gid):
    """A GID as NCCL prints it (inet_ntop of the 16 bytes): ::ffff:10.10.0.1."""
    packed = bytes.fromhex(gid.replace(":", ""))
    if len(packed) != 16:
        return gid
    address = ipaddress.IPv6Address(packed)
    return f"::ffff:{address.ipv4_mapped}" if address.ipv4_mapped else str(address)


# NCCL's WARN for a failed completion, by version (NVIDIA/nccl's tags): up to 2.28.3 in src/transport/net_ib.cc,
# numbers only, the (%s) its request's type; 2.28.7 and 2.28.9 named the status and opcode (with reqSize and
# req_type); from 2.29.2 ncclIbLogCompletionWithError (src/transport/net_ib/p2p.cc) prints the form below.
# Both print " localGid " GID " remoteGids" GID on RoCE (no space before the peer's GID), nothing on InfiniBand.
NCCL_FORMS = ("up to 2.28.3", "2.29.2 and later")


def nccl_lines(broken, peer="10.0.0.2<47513>", device=None, ethernet=True):
    """{NCCL versions: the WARN line} NCCL's IB transport prints for this failed completion, in the two
    formats most logs show (NCCL_FORMS). `peer` stands for the peer's bootstrap socket."""
    wc = broken.wc
    device = device or v.choose_route().device
    gids = f" localGid {_gid_text(broken.gids[0])} remoteGids{_gid_text(broken.gids[1])}" if ethernet else ""
    head = f"NET/IB: Got completion from peer {peer} with "
    return {NCCL_FORMS[0]: f"{head}status={wc.status} opcode={wc.opcode} len={wc.byte_len} vendor err "
                           f"{wc.vendor_err} (Send){gids} hca {device}",
            NCCL_FORMS[1]: f"{head}status=IBV_WC_{status_name(wc.status)}({wc.status}) opcode="
                           f"{_wc_opcode_name(wc.opcode)}({wc.opcode}) vendor_err={wc.vendor_err} {gids} hca {device}"}


# NCCL's hints after that line, from 2.30.7 (printIbWcStatusHint, src/transport/net_ib/common.h): each an
# INFO(NCCL_NET, ...) line, so printed only with NCCL_DEBUG=INFO and NET in NCCL_DEBUG_SUBSYS (whose default
# is INIT,BOOTSTRAP,ENV). Its switch has no break between cases: LOC_PROT_ERR prints all three groups.
HINTS = {
    4: ["HINT: In many cases this error occurs when ACS is enabled which would break GPU Direct RDMA protocol.",
        "HINT: To confirm and fix the problem, you can set NCCL_NET_GDR_LEVEL=0 to disable ACS following vendor "
        "documentation."],
    5: ["HINT: In many cases this error occurs when NIC on the same instance cannot talk to each other."],
    12: ["HINT: In many cases this error occurs when the NCCL_IB_TIMEOUT is set too short.",
         "HINT: Default value is 20, which is ~30 seconds before error.",
         "HINT: To confirm, try increasing the value of NCCL_IB_TIMEOUT and see if the error persists.",
         "HINT: See https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-timeout for more "
         "information."],
}


def nccl_hints(status):
    """The HINT lines NCCL 2.30.7 and later prints after a failed completion of `status` (none for most)."""
    order = [4, 5, 12]
    return [line for s in order[order.index(status):] for line in HINTS[s]] if status in order else []


def nccl_report(results, width=96):
    """NCCL's WARN line for each failed completion in `results` as most logs show it (up to 2.28.3), the first
    one also as 2.29.2 and later print it, then the hints 2.30.7 and later add, once for each status: text
    wrapped at `width` (NCCL writes each line whole, after its own prefix)."""
    ethernet = v.choose_route().link_layer != v.enums.IBV_LINK_LAYER_INFINIBAND
    old, new = NCCL_FORMS
    out, later, hinted = [f"{old}:"], [], set()
    for b in results:
        if b.wc is None:
            out.append(f"  {b.kind}: no completion to report: " + (
                "refused before any packet, so NCCL fails while it connects" if b.refused else "a hang"))
            continue
        lines = nccl_lines(b, ethernet=ethernet)
        out.append(textwrap.fill(f"{b.kind}: {lines[old]}", width, initial_indent="  ", subsequent_indent="      "))
        if not later:
            later = [f"{new}, the same {b.kind}:",
                     textwrap.fill(lines[new], width, initial_indent="  ", subsequent_indent="      ")]
        if nccl_hints(b.status) and b.status not in hinted:
            hinted.add(b.status)
            later.append(f"from 2.30.7, with NCCL_DEBUG=INFO and NET in NCCL_DEBUG_SUBSYS, after status {b.status}:")
            later += [textwrap.fill(h, width, initial_indent="  ", subsequent_indent="      ") for h in nccl_hints(b.status)]
    return "\n".join(out + later)


def show(broken):
    """One Broken as a row of the lesson's table (nothing recorded: see table())."""
    return FailureTable([broken])


def next_lesson(slug="when-it-breaks"):
    """The lesson after `slug`, as the lessons name each other (series.title), or None after the last."""
    from rdmalab.lessons import series
    slugs = [s for s, _ in series.LESSONS]
    after = slugs.index(slug) + 1
    return series.title(slugs[after]) if after < len(slugs) else None


def table(results):
    """The lesson's table of failures: one row each, as HTML with a text fallback. What it shows is kept for the
    last lesson's answer (record())."""
    record(results)
    return FailureTable(results)


def record(results):
    """Keep each failure's status, QP states, time to show and the counters that moved (rdmalab.lessons.evidence,
    key "when-it-breaks"), for the last lesson: {"failures": {kind: {...}}}."""
    from rdmalab.lessons import evidence
    return evidence.record("when-it-breaks", failures={
        b.kind: {"status": b.status, "states": list(b.states or ()), "ms": b.seconds * 1e3, "moved": dict(b.moved),
                 "refused": b.refused} for b in results})


class FailureTable:
    HEAD = ("what broke", "completion", "QP states (sender, target)", "error counters that moved", "after")

    def __init__(self, results):
        self.results = results

    def rows(self):
        for b in self.results:
            what = (f"refused: {b.refused}" if b.refused else f"none (hung: still none after {b.seconds:.0f} s)"
                    if b.hung else f"{b.status} {status_name(b.status)}" if b.status is not None else "none")
            moved = ", ".join(f"{k} +{n}" for k, n in sorted(b.moved.items()) if k in SHOWN_COUNTERS)
            kind = ("; ".join(b.changed) or "nothing changed") if b.kind == "your change" else b.kind
            yield kind, what, " / ".join(b.states or ()), moved or "-", "-" if b.refused else f"{b.seconds * 1e3:.0f} ms"

    def __str__(self):
        return "\n".join(" | ".join(row) for row in [self.HEAD, *self.rows()])

    __repr__ = __str__

    def _repr_html_(self):
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in self.HEAD)
        body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
                       for row in self.rows())
        return f"<table><tr>{head}</tr>{body}</table>"
