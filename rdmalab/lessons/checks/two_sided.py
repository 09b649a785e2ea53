"""The two-sided lesson (two-sided): its exercises, each a check (raising Wrong with a hint) and a reference
solution.

two-sided.cm-client: the learner writes an rdma_cm client, ask(cm, address, port, text): resolve, post a receive
for the answer before connect(), connect, SEND the text, take both completions, read the answer, disconnect.
cm_exchange() runs it against a CMPeer (another process, which answers one message in capitals), handing it
rdma_cm's module with one change: CMID() returns a real CMID that notes each call made on it (CMIDNotes). The
check judges that order and what came back, not timing: a receive posted after connect() is named even when it
happened to be in time. A call that would wait for ever (a completion for a SEND never posted, an answer with no
receive posted) is refused at once.

two-sided.flow-control: the learner's receive_all(qp, cq, mr, peer_sends) takes 32 messages that a peer QP SENDs
in bursts (peer_sends(n), rnr_retry=0), on a lessons.Pair. peer_sends() waits for the sender's completions, so a
message that found no receive (RNR_RETRY_EXC_ERR) or did not fit one (REM_OP_ERR on rxe and soft0,
REM_INV_REQ_ERR on most hardware) is named at once, by its number: with the receives counted, that tells a
receive posted too late from too few and from none re-posted. Then: receive completions left unpolled, and the
messages returned against those sent (receives sharing one buffer return the last message of a burst).
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab import verbs as v
from rdmalab.verbs import rc

# ---------------------------------------------------------------- two-sided.cm-client

TEXT = b"hello, rdma_cm"
CM_HINT = ("In this order: me.post_recv(reply) (before connect: the peer may SEND as soon as the connection is up); "
           "me.connect(); me.post_send(msg, length=len(text)); me.get_send_comp(); wc = me.get_recv_comp(); "
           "answer = reply.read(wc.byte_len, 0); me.disconnect(); me.close().")


class CMIDNotes:
    """A CMID as ask() gets it: the real one, whose calls are noted in `calls` (name, details) in order.
    `numbers`: lessons.qp_numbers() of its QP when it was made and once connect() returned.

    Two things it does besides, so that no wrong answer hangs the lesson: get_*_comp() refuse a wait that could
    never end; disconnect() first takes the peer's answer if it is due and was not taken (the peer, its answer
    unacknowledged, would never see the disconnect, and a synchronous disconnect() waits for it). And as
    librdmacm, which gives a CM id's QP a send CQ and a receive CQ of its own, get_send_comp() returns only send
    completions and get_recv_comp() only receive ones, even where the learner's QPInitAttr put both on one CQ
    (a completion of the other kind is kept for the other call)."""

    def __init__(self, cmid):
        from rdmalab.lessons.cm_peer import qp_numbers
        self._cmid, self.calls, self._kept = cmid, [], {True: [], False: []}
        try:
            self.numbers = {"made": qp_numbers(cmid)}
        except Exception:   # (a CMID made without a QP)
            self.numbers = {"made": {}}

    def __getattr__(self, name):   # everything not noted below: the CMID's own
        return getattr(self._cmid, name)

    def _count(self, name):
        return sum(1 for call, _ in self.calls if call == name)

    def post_recv(self, mr, length=None):
        done = self._cmid.post_recv(mr) if length is None else self._cmid.post_recv(mr, length)
        self.calls.append(("post_recv", {"length": length or mr.length}))
        return done

    def connect(self, *args, **kwargs):
        from rdmalab.lessons.cm_peer import qp_numbers
        self.calls.append(("connect", {}))
        self._cmid.connect(*args, **kwargs)
        self.numbers["connected"] = qp_numbers(self._cmid)

    def post_send(self, mr, *args, length=None, **kwargs):
        if length is not None:
            kwargs["length"] = length
        try:
            done = self._cmid.post_send(mr, *args, **kwargs)
        except Exception:
            self.calls.append(("post_send failed", {}))
            raise
        self.calls.append(("post_send", {"length": length or mr.length}))
        return done

    def _completion(self, receive):
        """The next completion of a receive (receive=True) or of a send, as librdmacm's two CQs give them."""
        e = v.enums
        if self._kept[receive]:
            return self._kept[receive].pop(0)
        while True:
            wc = self._cmid.get_recv_comp() if receive else self._cmid.get_send_comp()
            if wc.status != e.IBV_WC_SUCCESS or bool(wc.opcode & e.IBV_WC_RECV) == receive:
                return wc
            self._kept[not receive].append(wc)

    def get_send_comp(self):
        if self._count("get_send_comp") >= self._count("post_send"):
            raise Wrong("you wait for a SEND's completion, but no SEND is posted whose completion you have not "
                        "taken already: that wait would never end.", CM_HINT)
        wc = self._completion(False)
        self.calls.append(("get_send_comp", {"status": wc.status}))
        return wc

    def get_recv_comp(self):
        if not self._count("post_recv"):
            raise Wrong("you wait for the answer, but no receive is posted: it could never land (the peer's NIC "
                        "would be answered RNR, receiver not ready, for ever), so that wait would never end.", CM_HINT)
        if not self._count("post_send"):
            raise Wrong("you wait for the answer before SENDing anything: the peer answers your message, so that "
                        "wait would never end.", CM_HINT)
        if self._count("get_recv_comp") >= self._count("post_recv"):
            raise Wrong("you wait for a second receive's completion, with one receive posted: the peer answers "
                        "once, so that wait would never end.", CM_HINT)
        wc = self._completion(True)
        self.calls.append(("get_recv_comp", {"status": wc.status, "byte_len": wc.byte_len}))
        return wc

    def disconnect(self):
        if "connect" in (name for name, _ in self.calls):
            if not self._count("post_send"):
                raise Wrong("you disconnect without having SENT the text: the peer waits for your message.", CM_HINT)
            if not self._count("get_recv_comp"):   # the answer is due: take it, so that the peer sees the disconnect
                if not self._count("post_recv"):
                    self._cmid.post_recv(self._cmid.reg_msgs(64))
                self._completion(True)
        self.calls.append(("disconnect", {}))
        return self._cmid.disconnect()

    def close(self):
        self.calls.append(("close", {}))
        return self._cmid.close()


class NotingCM:
    """rdma_cm's module (verbs.cmid) as ask() gets it: the same names, but CMID() makes a CMIDNotes."""

    def __init__(self):
        self.made = []

    def __getattr__(self, name):
        return getattr(v.cmid, name)

    def CMID(self, *args, **kwargs):   # noqa: N802 (pyverbs' name)
        made = CMIDNotes(v.cmid.CMID(*args, **kwargs))
        self.made.append(made)
        return made


def cm_exchange(ask, text=TEXT):
    """Run `ask(cm, address, port, text)` against a CMPeer. Returns {"answer": what ask returned, "calls": the
    calls it made on its CMID, "before" and "mine": its QP's numbers when made and when connected, "theirs": the
    peer's once it accepted, "error": what ask raised, or None}. Everything is closed after, whatever happened."""
    from rdmalab.lessons.cm_peer import CMPeer
    cm = NotingCM()
    out = {"answer": None, "calls": [], "before": None, "mine": None, "theirs": None, "error": None}
    with CMPeer() as peer:
        try:
            out["answer"] = ask(cm, peer.address, peer.port, text)
        except Exception as error:   # (a Wrong from a refused wait too)
            out["error"] = error
        finally:
            for made in cm.made:
                if not _closed(made):
                    try:
                        made._cmid.close()
                    except Exception:   # (already closed some other way: nothing left to close)
                        pass
        if cm.made:
            made = cm.made[0]
            out["calls"], out["before"] = made.calls, made.numbers["made"]
            out["mine"] = made.numbers.get("connected")
            if out["mine"] is not None:
                out["theirs"] = peer.report()
    return out


def _closed(made):
    return any(call == "close" for call, _ in made.calls)


@exercise("two-sided.cm-client", "Write an rdma_cm client: connect, SEND a message, take the answer, disconnect",
          hints=[CM_HINT])
def _check_cm_client(ask):
    if not callable(ask):
        raise Wrong(f"answer with your function ask(cm, address, port, text), not {type(ask).__name__}.")
    run = cm_exchange(ask)
    error, calls = run["error"], run["calls"]
    if isinstance(error, NotImplementedError):
        raise NotYet()
    if isinstance(error, Wrong):
        raise error
    names = [name for name, _ in calls]
    if error is not None:
        early = "post_send failed" in names and "connect" not in names
        raise Wrong(f"your function raised {type(error).__name__}: {error}" + (
            " (a SEND may be posted only once connect() has returned: before it, the QP is in INIT)"
            if early else ""), CM_HINT)
    if not run["before"] and run["answer"] is None:
        raise NotYet("no CMID was made: your function is still the skeleton.")
    if not set(names) - {"close"} and run["answer"] is None:
        raise NotYet("nothing was called on the CMID but close(): your function is still the skeleton.")
    if run["before"] is None:
        raise Wrong("no CMID was made through the cm your function was given: create it with cm.CMID(...).", CM_HINT)
    for needed, why in (("connect", "connect() sends your QP's number and PSN and brings the QP to RTS"),
                        ("post_recv", "the peer's answer is a SEND: it needs a receive posted for it"),
                        ("post_send", "SEND the text: me.post_send(msg, length=len(text))")):
        if needed not in names:
            raise Wrong(f"no {needed}() was called: {why}.", CM_HINT)
    connected, received = names.index("connect"), names.index("post_recv")
    if received > connected:
        late = "after your SEND" if received > names.index("post_send") else "after connect()"
        raise Wrong(f"you posted the receive {late}. From the moment connect() returns, the peer may SEND (this "
                    "one answers your message at once; other servers greet first): a SEND that finds no receive "
                    "posted is answered RNR (receiver not ready) and retried, or fails. If it came in time here, "
                    "that was luck; rdma_post_recv(3): the receive must be posted before the peer posts its send.",
                    "Post the receive before me.connect(), as rdma-core's rdma_client example does.")
    sent = dict(calls)["post_send"]["length"]
    if sent != len(TEXT):
        whole = f": post_send without length= sends the whole registered buffer ({sent} bytes)" if sent == 64 else ""
        raise Wrong(f"you SENT {sent} bytes, not the {len(TEXT)} of the text{whole}, and the peer answers every "
                    "byte it gets.", "me.post_send(msg, length=len(text)).")
    if "get_send_comp" not in names:
        raise Wrong("you never took the SEND's completion (get_send_comp): until it is polled you do not know the "
                    "SEND was delivered, its buffer may not be reused, and its completions fill the send CQ.",
                    CM_HINT)
    if "get_recv_comp" not in names:
        raise Wrong("you never took the answer's completion (get_recv_comp): until it is polled nothing says the "
                    "answer has landed in your buffer.", CM_HINT)
    answer, expected = run["answer"], TEXT.upper()
    if answer is None:
        raise Wrong("your function returned None: return the answer's bytes.", CM_HINT)
    answer = bytes(answer) if isinstance(answer, (bytearray, memoryview)) else answer
    if answer != expected:
        byte_len = dict(calls)["get_recv_comp"]["byte_len"]
        if isinstance(answer, bytes) and answer.startswith(expected):
            raise Wrong(f"you returned {len(answer)} bytes; the answer is {byte_len} ({expected!r}): the rest is "
                        "whatever the buffer held.", "reply.read(wc.byte_len, 0): the receive's completion says "
                        "how many bytes landed.")
        raise Wrong(f"you returned {answer!r:.60}; the peer answered {expected!r}.", CM_HINT)
    if "disconnect" not in names:
        raise Wrong("you did not disconnect(): it tells the peer the connection is over (a DREQ) and moves your "
                    "QP to ERR; close() alone leaves the peer to find out later.",
                    "me.disconnect(), then me.close().")


@reference("two-sided.cm-client")
def _cm_client():
    return ask


def ask(cm, address, port, text):
    e, ce = v.enums, v.cm_enums
    where = cm.AddrInfo(dst=address, dst_service=str(port), port_space=ce.RDMA_PS_TCP)   # resolves the address
    me = cm.CMID(creator=where, qp_init_attr=v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_recv_wr=1)))
    reply, msg = me.reg_msgs(64), me.reg_msgs(64)        # two registered 64-byte buffers
    msg.write(text, len(text))
    me.post_recv(reply)                                  # before connect: the peer may SEND at once
    me.connect()                                         # swaps QP numbers and PSNs; the QP is now in RTS
    me.post_send(msg, length=len(text))
    me.get_send_comp()
    wc = me.get_recv_comp()
    answer = reply.read(wc.byte_len, 0)                  # byte_len: how many bytes landed
    me.disconnect()
    me.close()
    return answer


# ---------------------------------------------------------------- two-sided.flow-control

BURSTS, BURST, SIZE = 4, 8, 64   # the peer's 32 messages, 8 at a time, 64 bytes each
TOTAL = BURSTS * BURST
FLOW_HINT = (f"For each of the {BURSTS} bursts: post {BURST} receives, each with its own {SIZE} bytes of mr "
             "(v.wr.RecvWR(wr_id=i, num_sge=1, sg=[v.wr.SGE(mr.buf + 64 * i, 64, mr.lkey)])); then peer_sends(8); "
             "then 8 times wc = rc.wait_for_completion(cq) and read mr.read(wc.byte_len, 64 * wc.wr_id).")


def message(i):
    """The peer's message number i: 64 bytes that say which they are."""
    return f"message {i:2d} of {TOTAL}".encode().ljust(SIZE, b".")


class Peer:
    """The sending side of a Pair (rnr_retry=0): send(n) SENDs the next n messages and waits for their
    completions; the first that fails raises Wrong, naming what the receiver did wrong."""

    def __init__(self, pair):
        self.pair, self.sent = pair, 0
        sent = b"".join(message(i) for i in range(TOTAL))
        pair.a_mr.write(sent, len(sent))

    def send(self, n=BURST):
        e = v.enums
        wr = v.wr
        if not isinstance(n, int) or not 1 <= n <= BURST:
            raise Wrong(f"peer_sends({n!r}): the peer sends 1 to {BURST} messages at a time.", FLOW_HINT)
        if self.sent + n > TOTAL:
            raise Wrong(f"peer_sends({n}) after {self.sent} messages: the peer has {TOTAL} in all.", FLOW_HINT)
        first, pair = self.sent, self.pair
        for i in range(first, first + n):
            pair.a.post_send(wr.SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                                       sg=[wr.SGE(pair.a_mr.buf + SIZE * i, SIZE, pair.a_mr.lkey)]))
        done = [rc.wait_for_completion(pair.cq_a, timeout=10) for _ in range(n)]
        failed = next((wc for wc in done if wc.status != e.IBV_WC_SUCCESS), None)
        if failed is not None:
            raise Wrong(*self.verdict(failed, first, n))
        self.sent += n

    def verdict(self, wc, first, n):
        """(message, hint) for the sender's failed completion `wc`, in a burst of n from message `first`."""
        from rdmalab.errors import status_name
        e = v.enums
        k = wc.wr_id
        said = f"message {k} of the peer's {TOTAL}, in peer_sends({n}): "
        if wc.status == e.IBV_WC_RNR_RETRY_EXC_ERR:
            said += ("it found no receive posted, so the receiver's NIC answered RNR (receiver not ready), and with "
                     "rnr_retry=0 the peer's SEND failed at once: RNR_RETRY_EXC_ERR. ")
            if k == 0:
                return said + ("No receive was posted when the first message came: post the receives before "
                               "peer_sends(), never after."), FLOW_HINT
            if first == 0:
                return said + (f"Only {k} receives were posted for a burst of {n}: post one for every message "
                               "of a burst before it is sent."), FLOW_HINT
            return said + (f"By then {k} receives had been posted in all, one for each of the {k} messages "
                           "before it: each receive is used up by the message it takes, so post new ones (or "
                           "re-post each as its completion comes) before the next burst."), FLOW_HINT
        if wc.status in (e.IBV_WC_REM_OP_ERR, e.IBV_WC_REM_INV_REQ_ERR):
            mine = self._receiver_status()
            return said + (f"the receiver's NIC could not place it in the receive it took (the peer got "
                           f"{status_name(wc.status)}{mine}): that receive's buffer is smaller than the "
                           f"{SIZE}-byte message, or is not memory of mr. Both QPs are now in ERR."), \
                f"Each receive's SGE: v.wr.SGE(mr.buf + 64 * i, 64, mr.lkey): {SIZE} bytes, inside mr, its lkey."
        return said + f"the peer's SEND completed with {status_name(wc.status)}.", FLOW_HINT

    def _receiver_status(self):
        """', your receive LOC_..._ERR': the failed receive's completion, if it is there (a verdict is final)."""
        from rdmalab.errors import status_name
        e = v.enums
        n, wcs = self.pair.cq_b.poll(BURST * 2)
        bad = [wc for wc in wcs[:n] if wc.status not in (e.IBV_WC_SUCCESS, e.IBV_WC_WR_FLUSH_ERR)]
        return f"; your receive, {status_name(bad[0].status)}" if bad else ""


def receive_burst_run(receive_all, ctx, pd):
    """Run `receive_all(qp, cq, mr, peer_sends)` on a fresh Pair (rnr_retry=0: b receives, a is the peer) and
    check it; returns {"messages": how many arrived, "bursts": peer_sends() calls} or raises Wrong (NotYet:
    the skeleton)."""
    from rdmalab.lessons.fixtures import Pair
    with Pair(ctx, pd, rnr_retry=0) as pair:
        peer, calls = Peer(pair), []

        def peer_sends(n=BURST):
            calls.append(n)
            peer.send(n)

        try:
            got = receive_all(pair.b, pair.cq_b, pair.b_mr, peer_sends)
        except NotImplementedError:
            raise NotYet() from None
        except Wrong:
            raise
        except TimeoutError:
            raise Wrong(f"you waited for a completion that never came: the peer had sent {peer.sent} messages, and "
                        "their receives had all completed already. Wait once for each message sent.",
                        FLOW_HINT) from None
        except v.pyverbs_error.PyverbsRDMAError as error:
            full = getattr(error, "error_code", 0) == 12
            if full:
                _taken_all(pair, " (on this NIC, as on most hardware, a receive's slot is free again only once its "
                                 "completion is polled: the queue was full)")
            raise Wrong(f"a verb failed: {error}" + (
                " (post_recv fails with errno 12 when the receive queue is full: post a burst's receives, not all "
                f"{TOTAL} at once)" if full else ""), FLOW_HINT) from None
        if got is None and not calls:
            raise NotYet("the peer sent nothing: your function is still the skeleton.")
        if peer.sent < TOTAL:
            raise Wrong(f"the peer sent {peer.sent} of its {TOTAL} messages: call peer_sends({BURST}) {BURSTS} "
                        "times.", FLOW_HINT)
        _taken_all(pair)
        if not isinstance(got, (list, tuple)) or len(got) != TOTAL:
            raise Wrong(f"return the {TOTAL} messages as a list, in order (you returned "
                        f"{len(got) if isinstance(got, (list, tuple)) else type(got).__name__}"
                        f"{' messages' if isinstance(got, (list, tuple)) else ''}).", FLOW_HINT)
        sent = [message(i) for i in range(TOTAL)]
        for i, (mine, theirs) in enumerate(zip(got, sent)):
            mine = bytes(mine) if isinstance(mine, (bytes, bytearray, memoryview)) else mine
            if mine == theirs:
                continue
            if mine in sent and sent.index(mine) > i:
                raise Wrong(f"message {i} came back as message {sent.index(mine)}'s bytes: that one landed in the "
                            f"buffer of message {i} before you read it. Give each receive of a burst its own 64 "
                            "bytes (mr.buf + 64 * i), and post a buffer again only once its message is read.",
                            FLOW_HINT)
            if isinstance(mine, bytes) and theirs.startswith(mine):
                raise Wrong(f"message {i} came back as {len(mine)} bytes; it has {SIZE}: read wc.byte_len bytes.",
                            FLOW_HINT)
            raise Wrong(f"message {i} came back as {mine!r:.40}, not {theirs!r:.40}: read each message where its "
                        "receive put it (the completion's wr_id says which receive it took).", FLOW_HINT)
    return {"messages": TOTAL, "bursts": len(calls)}


def _taken_all(pair, why=""):
    """Wrong if receive completions were left on the CQ (taking them: the verdict is final)."""
    left, _ = pair.cq_b.poll(TOTAL)
    if left:
        raise Wrong(f"{left} receive completions were never taken from the CQ{why}: a message is yours to read only "
                    "once its receive's completion is polled (rc.wait_for_completion(cq)), and completions left "
                    "behind fill the CQ.", FLOW_HINT)


@exercise("two-sided.flow-control", f"Keep receives posted ahead of a peer's {BURSTS} bursts of {BURST} SENDs",
          hints=[FLOW_HINT])
def _check_flow_control(receive_all, ctx, pd):
    if not callable(receive_all):
        raise Wrong(f"answer with your function receive_all(qp, cq, mr, peer_sends), not {type(receive_all).__name__}.")
    receive_burst_run(receive_all, ctx, pd)


@reference("two-sided.flow-control")
def _flow_control():
    return receive_all


def receive_all(qp, cq, mr, peer_sends):
    got = []
    for burst in range(4):
        for i in range(8):                               # a receive for each message of the burst, before it comes
            qp.post_recv(v.wr.RecvWR(wr_id=i, num_sge=1, sg=[v.wr.SGE(mr.buf + 64 * i, 64, mr.lkey)]))
        peer_sends(8)
        for _ in range(8):
            wc = rc.wait_for_completion(cq)              # the receive's completion: now the message is ours
            got.append(mr.read(wc.byte_len, 64 * wc.wr_id))
    return got
