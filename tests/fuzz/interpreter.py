"""Runs a short verbs program, given as plain JSON data, on one provider and records what it observes.

A program (tests/fuzz/generate.py writes them, with hypothesis, on the host; this file needs only
rdmalab and pyverbs, so it runs in the Soft-RoCE guest too):

    {"setup": {"state": "RTS", "sq_sig_all": 1, "max_send_wr": 4, "max_recv_wr": 4,
               "access_b": ["REMOTE_WRITE", "REMOTE_READ"], "max_dest_rd_atomic_b": 1},
     "steps": [{"op": "reg_mr", "size": 64, "access": ["LOCAL_WRITE", "REMOTE_WRITE"]},
               {"op": "post_send", "wrs": [{"opcode": "RDMA_WRITE", "signaled": true, "imm": 0,
                   "sges": [{"mr": 0, "off": 0, "len": 8, "lkey": "own"}],
                   "remote": {"mr": 2, "off": 0, "rkey": "own"}}]},
               {"op": "poll", "cq": "a", "n": 1}]}

The world every program starts in: one PD, two RC QPs `a` and `b` (each with its own 64-entry CQ,
two SGEs per WR), connected to each other and brought to `state` (RTS, or RTR, INIT, RESET), and
two 4096-byte MRs with every access (`mrs` 0 and 1); `reg_mr` appends to `mrs`. Only `a` posts
sends and only `b` posts receives, so every operation runs in one queue's order and the outcome
cannot depend on which of two QPs the device served first. Steps:

    reg_mr {size, access}         dereg_mr {mr}              create_cq {cqe}     destroy_cq {cq}
    modify {qp, state, mask}      mask: "right", "drop:<ATTR>" (a required one missing) or "add:<ATTR>"
    post_send {wrs: [wr, ...]}    a chain; wr: opcode, signaled, imm, sges, remote
    post_recv {wrs: [{sges}]}     sge: {mr, off, len, lkey: "own" | "bogus" | "mr:<i>"}
    poll {cq, n}                  the next n completions of CQ a or b
    query {qp}                    the QP's state, cached and queried

`mr` indices wrap around (i % len(mrs)), so deleting steps never makes a program invalid; a
deregistered MR keeps its old keys and address, to be used as stale ones. wr_ids are given in posting
order (sends 1, 2, ...; receives 1001, ...). Every MR is filled with a known pattern when registered.

Timing: the device completes work asynchronously, so after every step that can start work the
interpreter settles: it polls both CQs (keeping what it finds, in order, for later `poll` steps)
until the last WR posted has completed, or until nothing has come for `quiet` seconds (a WR that
never completes: unsignaled, waiting for a receive, a peer gone). A completion that is certain to
come is waited for up to `patience`, whatever `quiet` says: a SEND that was waiting out RNR NAKs and
has just been given its receive (rxe resends it only when its RNR timer fires, and a stall of the
guest's CPU must not move its completion to a later step). What a `poll` step reports is
therefore what the CQ will hold, not what happened to be there at one instant; the trace is the
same on every run, and a difference between providers is a difference in behaviour. One thing rxe
leaves to timing is skipped, and the trace says so: a receive posted while `b` may be in ERR (rxe
flushes it only if something later runs its responder).

Differences the fuzzer found (KNOWN) are recognised from the program's own facts when it reaches one (a WR
whose local SGEs fail past the first packet, ...) and marked with a "known difference" observation;
tests/fuzz/differential.py counts a marked program's difference as known where soft0's link does not model
the mark (UNMODELLED).
"""
import hashlib
import json
import os
import time
import types

from rdmalab.verbs.route import routable_gid_index

PORT = 1
BOGUS_KEY = 0xABCD12
ACCESS = ("LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC")
OPCODES = ("RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
           "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD")
# each transition's required attributes (FACTS.md; the kernel's ib_modify_qp_is_ok)
REQUIRED = {"INIT": ("PKEY_INDEX", "PORT", "ACCESS_FLAGS"),
            "RTR": ("AV", "PATH_MTU", "DEST_QPN", "RQ_PSN", "MAX_DEST_RD_ATOMIC", "MIN_RNR_TIMER"),
            "RTS": ("TIMEOUT", "RETRY_CNT", "RNR_RETRY", "SQ_PSN", "MAX_QP_RD_ATOMIC"),
            "RESET": (), "ERR": (), "SQD": ()}
MTU = 1024
REMOTE_ERRORS = (9, 10, 11)   # REM_INV_REQ_ERR, REM_ACCESS_ERR, REM_OP_ERR
CARRY_DATA = ("RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM")
CONSUME_RECEIVE = ("RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM")
# Differences the differential fuzzer found between rxe and soft0 as it was (docs/emulated-nic.md); soft0's
# links model them now, but the udp link the overlapping copy (tests/fuzz/test_fuzz.py: UNMODELLED). A program
# that reaches one is marked with a "known difference" observation (part of rxe0's recorded traces).
KNOWN = {
    "local error past the first packet": "rxe reads a WRITE's or SEND's local SGEs packet by packet, so the "
    "responder judges the first packets (and may NAK them: REM_ACCESS_ERR, both QPs in ERR) before the "
    "requester finds a bad local SGE further on; accepted, they land",
    "overlapping copy": "rxe moves a message of more than one packet packet by packet, so when its source "
    "and destination overlap, later packets carry bytes earlier ones wrote",
    "local error while a send waits for a receive": "on rxe a local error met while a SEND waits out RNR "
    "NAKs (a later WR's bad local SGE, or the SEND's own MR deregistered) leaves the QP stuck: nothing "
    "completes, even after the receive is posted, and both QPs stay in RTS until moved to ERR",
}
# the marks each of soft0's links does not model: shared memory models them all (issue 49); the udp link's
# requester reads a message's bytes once, at its first packet, and its NIC process sends a window of packets
# before it takes any in, so an overlapping WRITE's later packets carry the bytes from before it
UNMODELLED = {"shm": (), "udp": ("overlapping copy",)}
# Programs of the corpus whose difference no mark names, shrunk (python -m tests.fuzz.differential --shrink-known)
# and probed on rxe0 (Linux 6.1): not modelled, as it looks like a flaw of rxe's ring indices, not a rule. Each
# program names the observation where its trace parts from soft0's: any other difference is not excused.
RING_IN_ERR = ("with max_send_wr 2 (a ring of 3 WQEs), after a post of 3 WRs whose first failed locally (the QP "
               "to ERR, the other two flushed), WRs posted later in one call are neither flushed nor completed on "
               "rxe0, and hold the ring (a later post is ENOMEM); posted one by one, or after a first post of "
               "fewer than 3, they are flushed, as on soft0")
RXE_RING_FLAW = {"s14-034": "post_send", "s14-146": "end: completions of a", "s14-189": "end: completions of a",
                 "s14-222": "end: completions of a"}


def ring_flaw(name, expected, got):
    """RING_IN_ERR if program `name`'s trace parts from rxe0's `expected` where RXE_RING_FLAW says it does, else
    None."""
    parted = next((x for x, y in zip(expected, got) if x != y), None)
    return RING_IN_ERR if parted is not None and parted[0] == RXE_RING_FLAW.get(name) else None
DEFAULT_SETUP = dict(state="RTS", sq_sig_all=1, max_send_wr=8, max_recv_wr=8, access_b=list(ACCESS),
                     max_dest_rd_atomic_b=1)


def provider(name):
    """The pyverbs modules of `name` ("soft" or "pyverbs"), both loadable in one process."""
    import importlib
    package = "rdmalab.verbs.soft" if name == "soft" else "pyverbs"
    mods = {m: importlib.import_module(f"{package}.{m}") for m in ("device", "pd", "mr", "cq", "qp", "wr", "addr",
                                                                  "pyverbs_error")}
    try:
        mods["e"] = importlib.import_module(f"{package}.enums")
    except ImportError:     # pyverbs >= 59
        mods["e"] = importlib.import_module(f"{package}.libibverbs_enums")
    return types.SimpleNamespace(name=name, **mods)


class Device:
    """One opened device, reused by every program run on it (each program has its own PD and below)."""

    def __init__(self, provider_name, quiet=None, patience=None):
        scale = float(os.environ.get("RDMALAB_TIME_SCALE") or 1)   # 5 in the emulated guest
        quiet, patience = quiet or 0.02 * scale, patience or 3.0 * scale
        self.v = provider(provider_name)
        name = self.v.device.get_device_list()[0].name.decode()
        self.name = name
        self.ctx = self.v.device.Context(name=name)
        self.gid_index = routable_gid_index(self.ctx, PORT)
        self.gid = self.ctx.query_gid(PORT, self.gid_index)
        self.quiet, self.patience = quiet, patience

    def close(self):
        self.ctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, program):
        """The program's observations: a list of [what, value], as tests/conformance's trace has them."""
        run = Run(self, program)
        try:
            run.execute()
        except Exception as error:   # a PyverbsUserError or any other: its kind is an observation too
            run.observe("exception", type(error).__name__)
            self.last_error = error
        finally:
            run.close()
        return run.observations


def fill(mr, index):
    mr.write(bytes((i * 7 + index * 31) % 256 for i in range(mr.length)), mr.length)


class Run:
    def __init__(self, device, program):
        self.d, self.v, self.e = device, device.v, device.v.e
        self.program = program
        self.setup = {**DEFAULT_SETUP, **program.get("setup", {})}
        self.observations = []
        self.mrs, self.cqs, self.harvest = [], [], {"a": [], "b": []}
        self.next_send, self.next_recv, self.last_send, self.last_recv = 1, 1001, None, None
        self.seen = {"a": set(), "b": set()}  # wr_ids that completed, polled or not yet reported
        self.troubled = False   # a QP may be in ERR (or not where it was): receives may complete at once
        self.b_may_be_in_err = False
        self.kept = False       # a refused WR may wait in the send queue, to run or flush later
        self.state = {"a": "RESET", "b": "RESET"}   # as last set by modify (else only ERR can follow)
        self.consumers = self.receives = 0   # sends that take a receive, receives posted
        self.consumer_sends = []             # (wr_id, signaled) of each send that takes a receive, in order
        self.stuck = False      # a local error met while a send waits for a receive: rxe completes nothing
        self.receive_ranges = []             # (MR index, offset, length) of every receive SGE posted
        self.pd = self.qps = None

    # -- the world ---------------------------------------------------------------------------------
    def build(self):
        v, s = self.v, self.setup
        self.pd = v.pd.PD(self.d.ctx)
        self.cq = {"a": v.cq.CQ(self.d.ctx, 64, None, None, 0), "b": v.cq.CQ(self.d.ctx, 64, None, None, 0)}
        cap = v.qp.QPCap(max_send_wr=s["max_send_wr"], max_recv_wr=s["max_recv_wr"], max_send_sge=2,
                         max_recv_sge=2)
        self.qps = {side: v.qp.QP(self.pd, v.qp.QPInitAttr(qp_type=self.e.IBV_QPT_RC, scq=self.cq[side],
                                                             rcq=self.cq[side], cap=cap, sq_sig_all=s["sq_sig_all"]))
                    for side in "ab"}
        for _ in range(2):
            self.reg_mr(4096, list(ACCESS), observe=False)
        for state in ("INIT", "RTR", "RTS")[:("RESET", "INIT", "RTR", "RTS").index(s["state"])]:
            for side in "ab":
                self.modify(side, state, "right", observe=False)

    def close(self):
        for obj in [*(self.qps or {}).values(), *(m["mr"] for m in self.mrs), *getattr(self, "cq", {}).values(),
                    *self.cqs, self.pd]:
            if obj is not None:
                try:
                    obj.close()
                except Exception as error:
                    self.observe("close", type(error).__name__)

    def flags(self, names):
        value = 0
        for n in names:
            value |= getattr(self.e, f"IBV_ACCESS_{n}")
        return value

    def attr(self, side, state):
        """Every attribute a transition to `state` may take, with the values of a working connection."""
        e, v, s = self.e, self.v, self.setup
        a = v.qp.QPAttr(qp_state=getattr(e, f"IBV_QPS_{state}"), port_num=PORT, path_mtu=e.IBV_MTU_1024)
        a.pkey_index = 0
        a.qp_access_flags = self.flags(s["access_b"] if side == "b" else ACCESS)
        a.ah_attr = v.addr.AHAttr(port_num=PORT, is_global=1, gr=v.addr.GlobalRoute(
            dgid=self.d.gid, sgid_index=self.d.gid_index, hop_limit=64))
        a.dest_qp_num = self.qps["b" if side == "a" else "a"].qp_num
        a.rq_psn = a.sq_psn = 0
        a.max_dest_rd_atomic = s["max_dest_rd_atomic_b"] if side == "b" else 1
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = 1, 14, 7, 7, 1
        return a

    def mask(self, state, how):
        names = list(REQUIRED[state])
        if how.startswith("drop:"):
            names = [n for n in names if n != how[5:]]
        elif how.startswith("add:"):
            names.append(how[4:])
        value = self.e.IBV_QP_STATE
        for n in names:
            value |= getattr(self.e, f"IBV_QP_{n}")
        return value

    # -- observing ---------------------------------------------------------------------------------
    def observe(self, what, value):
        self.observations.append([what, value])

    def attempt(self, what, fn):
        """Run fn; observe the errno of the PyverbsRDMAError it raised (None if none)."""
        try:
            result = fn()
            code = None
        except self.v.pyverbs_error.PyverbsRDMAError as error:
            result, code = None, error.error_code
        self.observe(what, code)
        return code, result

    def poll_all(self):
        got = False
        for side in "ab":
            while True:
                n, wcs = self.cq[side].poll(8)
                if not n:
                    break
                got = True
                for w in wcs[:n]:
                    self.harvest[side].append(dict(wr_id=w.wr_id, status=w.status, opcode=w.opcode,
                                                   byte_len=w.byte_len, imm_data=w.imm_data, wc_flags=w.wc_flags))
                    self.seen[side].add(w.wr_id)
                    self.troubled |= w.status != self.e.IBV_WC_SUCCESS
                    # the responder fails too on REM_* errors, and on any error of its own
                    self.b_may_be_in_err |= w.status in REMOTE_ERRORS or (side == "b" and w.status != 0)
        return got

    def sent_all(self):
        return self.last_send is None or self.last_send in self.seen["a"]

    def received_all(self):
        return self.last_recv is None or self.last_recv in self.seen["b"]

    def settle(self, until=None, certain=False):
        """Collect the completions the last step caused. until=None: it caused none, poll once. Else poll
        until until() holds (then once more, for the other side), or nothing has come for `quiet` seconds
        (what is left will never complete: unsignaled, waiting for a receive, a peer in ERR). certain:
        what until() waits for will come, so only `patience` ends the wait."""
        start = last = time.monotonic()
        while until is not None and time.monotonic() - start < self.d.patience:
            if self.poll_all():
                last = time.monotonic()
            if until() or (not certain and time.monotonic() - last > self.d.quiet):
                break
            time.sleep(0.0002)
        self.poll_all()

    # -- steps -------------------------------------------------------------------------------------
    def execute(self):
        self.build()
        for step in self.program["steps"]:
            getattr(self, "step_" + step["op"])(step)
        self.settle()
        for side in "ab":
            self.observe(f"end: completions of {side}", self.harvest[side])
            self.harvest[side] = []
        for side in "ab":
            self.step_query({"qp": side}, settle=False)
        self.observe("end: memory sha256", [hashlib.sha256(m["mr"].read(m["mr"].length, 0)).hexdigest()[:12]
                                            if m["mr"] is not None else None for m in self.mrs])

    def reg_mr(self, size, access, observe=True):
        v = self.v
        try:
            mr = v.mr.MR(self.pd, size, self.flags(access))
        except v.pyverbs_error.PyverbsRDMAError as error:
            if observe:
                self.observe("reg_mr", error.error_code)
            return
        fill(mr, len(self.mrs))
        self.mrs.append(dict(mr=mr, lkey=mr.lkey, rkey=mr.rkey, buf=mr.buf, length=mr.length))
        if observe:
            self.observe("reg_mr (rkey is 0)", mr.rkey == 0)

    def step_reg_mr(self, step):
        self.reg_mr(step["size"], step["access"])

    def step_dereg_mr(self, step):
        if self.consumers > self.receives:
            self.known("local error while a send waits for a receive")
            self.stuck = True
        m = self.mrs[step["mr"] % len(self.mrs)]
        if m["mr"] is not None:
            m["mr"].close()
            m["mr"] = None
        self.observe("dereg_mr", None)

    def step_create_cq(self, step):
        code, cq = self.attempt("create_cq", lambda: self.v.cq.CQ(self.d.ctx, step["cqe"], None, None, 0))
        if cq is not None:
            self.cqs.append(cq)
            self.observe("cq.cqe", cq.cqe)

    def step_destroy_cq(self, step):
        if self.cqs:
            self.cqs.pop(step["cq"] % len(self.cqs)).close()
        self.observe("destroy_cq", None)

    def modify(self, side, state, how, observe=True):
        qp = self.qps[side]
        fn = lambda: qp.modify(self.attr(side, state), self.mask(state, how))  # noqa: E731
        code = self.attempt(f"modify {side} to {state} ({how})", fn)[0] if observe else fn()
        if code is None:
            self.state[side] = state
        return code

    def step_modify(self, step):
        failed = self.modify(step["qp"], step["state"], step["mask"])
        if not failed:
            self.troubled |= step["state"] in ("ERR", "RESET", "SQD")
            if step["qp"] == "b":
                self.b_may_be_in_err = step["state"] == "ERR"
            # to ERR: what is outstanding is flushed
            self.settle(lambda: self.sent_all() and not self.kept and (step["qp"] == "a" or self.received_all()))

    def known(self, what):
        """Mark the program as reaching a difference soft0 does not model (KNOWN, docs/emulated-nic.md)."""
        self.observe("known difference", what)

    def overlaps(self, spec):
        """Does a WR of more than one packet move bytes between overlapping ranges (its local SGEs, and
        the remote range or a receive's SGEs)?"""
        local = [(s["mr"] % len(self.mrs), s["off"], s["len"]) for s in spec["sges"] if s["len"]]
        length = sum(n for _, _, n in local)
        if length <= MTU or spec["opcode"].startswith("ATOMIC"):
            return False
        if "remote" in spec:
            r = spec["remote"]
            others = [(r["mr"] % len(self.mrs), r["off"], length)]
        else:
            others = self.receive_ranges
        return any(i == j and a < b + m and b < a + n for i, a, n in local for j, b, m in others)

    def local_fault(self, spec):
        """Where, in the bytes a WR carries, the first that its SGEs may not read lies (None: all may),
        as rxe finds it: SGE by SGE, a key that names no live MR, or an address outside the MR."""
        live = {m["lkey"]: m for m in self.mrs if m["mr"] is not None}
        position = 0
        for s in spec["sges"]:
            m = self.mrs[s["mr"] % len(self.mrs)]
            lkey = self.lkey(s)
            if s["len"]:
                mr, addr = live.get(lkey), m["buf"] + s["off"]
                if mr is None or not mr["buf"] <= addr < mr["buf"] + mr["length"]:
                    return position
                if addr + s["len"] > mr["buf"] + mr["length"]:
                    return position + mr["buf"] + mr["length"] - addr
            position += s["len"]
        return None

    def lkey(self, sge):
        """The key an SGE spec names. Another MR's key ("mr:<i>") only with an address inside the SGE's own
        MR: beyond it the address might lie in MR i on one provider and not on the other (where each
        allocates its buffers), so there it becomes the bogus key."""
        m = self.mrs[sge["mr"] % len(self.mrs)]
        key = sge.get("lkey", "own")
        if key == "own":
            return m["lkey"]
        if key == "bogus" or not 0 <= sge["off"] <= sge["off"] + sge["len"] <= m["length"]:
            return BOGUS_KEY
        return self.mrs[int(key[3:]) % len(self.mrs)]["lkey"]

    def sges(self, specs):
        """SGEs, and how many to use: a WR needs one to be built, so an empty one gets a placeholder
        and num_sge 0 (as a program that lowers num_sge after building it)."""
        if not specs:
            return [self.v.wr.SGE(self.mrs[0]["buf"], 8, self.mrs[0]["lkey"])], 0
        out = []
        for s in specs:
            m = self.mrs[s["mr"] % len(self.mrs)]
            out.append(self.v.wr.SGE(m["buf"] + s["off"], s["len"], self.lkey(s)))
        return out, len(out)

    def send_wr(self, spec):
        e = self.e
        opcode = getattr(e, f"IBV_WR_{spec['opcode']}")
        sg, count = self.sges(spec["sges"])
        flags = e.IBV_SEND_SIGNALED if spec.get("signaled", True) else 0
        wr = self.v.wr.SendWR(wr_id=self.next_send, opcode=opcode, num_sge=len(sg), sg=sg,
                              send_flags=flags, imm_data=spec.get("imm", 0))
        wr.num_sge = count
        self.next_send += 1
        r = spec.get("remote", {"mr": 1, "off": 0, "rkey": "own"})
        m = self.mrs[r["mr"] % len(self.mrs)]
        rkey = {"own": m["rkey"], "bogus": BOGUS_KEY, "zero": 0}[r.get("rkey", "own")]
        if spec["opcode"].startswith("ATOMIC"):
            wr.set_wr_atomic(rkey, m["buf"] + r["off"], spec.get("imm", 0) & 0xff, 7)
        elif spec["opcode"].startswith("RDMA"):
            wr.set_wr_rdma(rkey, m["buf"] + r["off"])
        return wr

    def chain(self, wrs):
        for w, nxt in zip(wrs, wrs[1:]):
            w.next_wr = nxt
        return wrs[0]

    def step_post_send(self, step):
        consumers = self.consumers
        for spec in step["wrs"]:
            fault = self.local_fault(spec) if spec["opcode"] in CARRY_DATA else None
            if fault is not None and fault >= MTU:
                self.known("local error past the first packet")
            if fault is not None and consumers > self.receives:
                self.known("local error while a send waits for a receive")
                self.stuck = True
            consumers += spec["opcode"] in CONSUME_RECEIVE
            if self.overlaps(spec):
                self.known("overlapping copy")
        wrs = [self.send_wr(s) for s in step["wrs"]]
        # Before RTS, rxe's provider queues the WRs and fails at the doorbell, leaving bad_wr unset, and
        # pyverbs then copies from a NULL pointer: a segmentation fault. So bad_wr only in RTS, SQD, ERR.
        bad = self.v.wr.SendWR(wr_id=999999, num_sge=1, sg=self.sges([])[0])
        has_bad = self.state["a"] in ("RTS", "SQD", "ERR")
        code, _ = self.attempt("post_send", lambda: self.qps["a"].post_send(self.chain(wrs), bad if has_bad else None))
        if code is not None and has_bad:
            self.observe("bad_wr", bad.wr_id)
        accepted = [w.wr_id for w in wrs if code is None or (has_bad and w.wr_id < bad.wr_id)]
        signals = self.setup["sq_sig_all"]
        self.consumer_sends += [(w.wr_id, bool(signals or s.get("signaled", True)))
                                for w, s in zip(wrs, step["wrs"]) if w.wr_id in accepted and s["opcode"] in CONSUME_RECEIVE]
        self.consumers = len(self.consumer_sends)
        if accepted:
            self.last_send = accepted[-1]
        self.kept |= code is not None
        self.settle(self.sent_all)

    def step_post_recv(self, step):
        if self.b_may_be_in_err:   # rxe flushes a receive posted in ERR only if its responder task runs later
            self.observe("post_recv skipped", "b may be in ERR, where the outcome depends on timing on rxe")
            return
        wrs = []
        for s in step["wrs"]:
            sg, count = self.sges(s["sges"])
            self.receive_ranges += [(g["mr"] % len(self.mrs), g["off"], g["len"]) for g in s["sges"]]
            wrs.append(self.v.wr.RecvWR(wr_id=self.next_recv, num_sge=len(sg), sg=sg))
            wrs[-1].num_sge = count
            self.next_recv += 1
        bad = self.v.wr.RecvWR(wr_id=999999, num_sge=1, sg=self.sges([])[0])
        has_bad = self.state["b"] != "RESET"     # as for post_send: in RESET rxe leaves bad_wr unset
        code, _ = self.attempt("post_recv", lambda: self.qps["b"].post_recv(self.chain(wrs), bad if has_bad else None))
        if code is not None and has_bad:
            self.observe("bad_wr", bad.wr_id)
        accepted = [w.wr_id for w in wrs if code is None or (has_bad and w.wr_id < bad.wr_id)]
        given = self.consumer_sends[self.receives:self.receives + len(accepted)]   # sends waiting for these
        self.receives += len(accepted)
        if accepted:
            self.last_recv = accepted[-1]
        certain = {wr_id for wr_id, signaled in given if signaled and wr_id not in self.seen["a"]}
        if certain and self.sure_to_complete():
            self.settle(lambda: certain <= self.seen["a"], certain=True)
        # a receive completes at once only for a send waiting for it, or flushed by a QP in ERR
        if not (self.sent_all() and not self.troubled):
            self.settle(lambda: self.sent_all() and (not self.troubled or self.received_all()))

    def sure_to_complete(self):
        """Does a send waiting out RNR NAKs complete once its receive is posted? Yes while nothing has
        gone wrong: both QPs where a send runs (a in RTS, b in RTR or RTS), no error seen, no WR kept
        back by a refused post, and no local error met while it waits (rxe completes nothing then)."""
        return (self.state["a"] == "RTS" and self.state["b"] in ("RTR", "RTS") and not self.troubled
                and not self.kept and not self.stuck)

    def step_poll(self, step):
        self.settle()    # once, for completions an earlier wait gave up on
        side, n = step["cq"], step["n"]
        got, self.harvest[side] = self.harvest[side][:n], self.harvest[side][n:]
        self.observe(f"poll {side} ({n})", got)

    def step_query(self, step, settle=True):
        if settle:
            self.settle()
        qp = self.qps[step["qp"]]
        cached = qp.qp_state
        attr, _ = qp.query(self.e.IBV_QP_STATE)
        self.observe(f"qp {step['qp']} state (cached, queried)", [cached, attr.qp_state])


def load(path):
    """A corpus file: {"seed": ..., "programs": {name: program}} (or one program)."""
    with open(path) as f:
        data = json.load(f)
    return data["programs"] if "programs" in data else {path: data}
