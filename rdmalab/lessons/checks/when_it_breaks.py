"""The failures lesson (when-it-breaks): its exercises, each a check (raising Wrong with a hint) and a reference.

when-it-breaks.diagnose: three excerpts from a training job's logs and its NICs' counters, as an RDMA
engineer receives them; the learner names the cause of each, from CAUSES. A plausible wrong diagnosis
is rejected with the evidence in the excerpt that rules it out.

The excerpts are written as the devices and NCCL versions named in them print: NCCL's WARN line up to
2.28.3 (numbers only, then the request's type) or from 2.29.2 (ncclIbLogCompletionWithError: names and
numbers), " remoteGids" followed by the GID with no space, as both print it; mlx5's counter names on a
ConnectX (Linux's drivers/infiniband/hw/mlx5/counters.c; mlx5 reports status 12 with vendor error 129),
rxe's on Soft-RoCE, where NCCL_IB_RETRY_CNT must be below 7 for status 12 to come at all (rxe_comp.c
resends for ever at 7).

when-it-breaks.way-back: the learner brings a pair stuck in ERR back to work (failures.Stuck: a WRITE with a
wrong rkey put both QPs in ERR and flushed the target's receives): both QPs through RESET, fresh PSNs that each
side's peer is told, INIT, RTR and RTS, receives posted again. The check runs the learner's function on a fresh
Stuck pair, then reads what every device reports alike: each QP's state (query), the PSNs each QP was given
(query, before any traffic), a WRITE's status and bytes, a SEND's status. It names: a step the device refused
from ERR (only RESET is allowed: errno 22) or from RESET (INIT, RTR, RTS in turn), a receive posted before INIT
(errno 22), a QP left behind, the old PSN again, a sender's PSN its peer was not told, and receives not posted
again (the SEND ends in RNR_RETRY_EXC_ERR, 13).
"""
from rdmalab import verbs as v
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.wire.psn import psn_add

CAUSES = ("wrong address", "wrong PSN", "link MTU below the path MTU", "no REMOTE_WRITE", "no receive posted",
          "timeout too short")

EXCERPTS = {   # (NCCL's line is one line in a log: wrapped here to fit a laptop's notebook, "A: " and all)
    "A": ("NET/IB: Got completion from peer 10.0.4.7<41522> with status=12 opcode=0 len=0\n"
          "    vendor err 129 (Send) localGid ::ffff:10.0.3.6 remoteGids::ffff:10.0.4.70 hca mlx5_0\n"
          "  NCCL 2.27 on ConnectX NICs; the two racks are routed RoCE v2 subnets,\n"
          "  10.0.3.0/24 and 10.0.4.0/24\n"
          "  the sender's counters: local_ack_timeout_err +7, req_cqe_error +1\n"
          "  the peer's counters (10.0.4.7): nothing moved\n"
          "  an hour into the job, the peer's interface was renumbered from 10.0.4.70 to 10.0.4.7\n"
          "  (a RoCE v2 GID is the interface's IP address: the GID table followed; NCCL's QPs kept the old)\n"
          "  show_gids on 10.0.4.7: mlx5_0 port 1, GID index 3: ::ffff:10.0.4.7 (RoCE v2)"),
    "B": ("NET/IB: Got completion from peer 10.0.3.7<41522> with status=IBV_WC_RETRY_EXC_ERR(12)\n"
          "    opcode=IBV_WC_RDMA_WRITE(1) vendor_err=0  localGid ::ffff:10.0.3.6\n"
          "    remoteGids::ffff:10.0.3.7 hca rxe0\n"
          "  NCCL 2.29 on a Soft-RoCE test cluster, NCCL_IB_RETRY_CNT=3 (rxe resends for ever at 7)\n"
          "  the sender's counters: completer_retry_err +3, retry_exceeded_err +1\n"
          "  the peer's counters: rcvd_pkts +4, out_of_seq_request +1\n"
          "  a new build of the job's network plugin, which exchanges QP numbers and PSNs,\n"
          "  went out the day before"),
    "C": ("NET/IB: Got completion from peer 10.0.3.7<41522> with status=IBV_WC_RETRY_EXC_ERR(12)\n"
          "    opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129  localGid ::ffff:10.0.3.6\n"
          "    remoteGids::ffff:10.0.3.7 hca mlx5_0\n"
          "  the job's first AllReduces, of small buffers, completed; the first of 64 MiB waited\n"
          "  34 s, then failed\n"
          "  the sender's counters: local_ack_timeout_err +7, req_cqe_error +1;\n"
          "  the peer's: nothing moved meanwhile\n"
          "  ibv_devinfo on both hosts: active_mtu 4096; the switch ports between them were set to\n"
          "  MTU 1500 the night before"),
}
ANSWER = {"A": "wrong address", "B": "wrong PSN", "C": "link MTU below the path MTU"}
WHY_NOT = {   # (excerpt, a wrong diagnosis): the evidence against it
    ("A", "timeout too short"): "a timeout too short gives up on a peer that answers slowly; here the peer's "
                                "counters did not move at all: nothing reached it. Compare the remote GID with the "
                                "peer's own.",
    ("A", "wrong PSN"): "a wrong PSN reaches the peer, which counts it (out_of_sequence on mlx5, out_of_seq_request "
                        "on rxe); the peer's counters did not move.",
    ("A", "no receive posted"): "a missing receive gives RNR NAKs and status 13, not 12.",
    ("A", "link MTU below the path MTU"): "NCCL sent to ::ffff:10.0.4.70, and the peer's GID is ::ffff:10.0.4.7: "
                                          "its packets went to an address nobody has, whatever their size.",
    ("B", "wrong address"): "the peer received the packets (rcvd_pkts +4) and counted one out of sequence: they "
                            "reached it, with a PSN it did not expect.",
    ("B", "timeout too short"): "the peer counted a request ahead of the PSN it expects, and answered none of the "
                                "resends: a longer timeout would only wait longer for the same silence.",
    ("B", "no receive posted"): "a missing receive gives RNR NAKs (send_rnr_err on the peer) and status 13.",
    ("B", "link MTU below the path MTU"): "a frame too large for a link never reaches the peer; this peer received "
                                          "every resend (rcvd_pkts +4) and counted one out of sequence.",
    ("C", "wrong address"): "the small AllReduces with the same peer completed: the address is right.",
    ("C", "wrong PSN"): "a wrong PSN leaves every request unanswered, small ones too; here the small ones completed.",
    ("C", "timeout too short"): "the peer saw nothing in 34 s (NCCL's default timeout, 20): a longer one would wait "
                                "longer for frames that never arrive, and small messages got through.",
    ("C", "no REMOTE_WRITE"): "a missing REMOTE_WRITE is REM_ACCESS_ERR (10), answered at once by the peer's NIC, "
                              "not 12 after 34 s of silence.",
}
HINT = ("Read the status first (12: nobody answered; 9: the peer refused the request; 10: it refused the "
        "access; 13: no receive), then the counters on both sides: which side saw the packets, and which "
        "messages got through?")


@exercise("when-it-breaks.diagnose", "Name the cause of three failures from their logs and counters", hints=[HINT])
def _check_diagnose(answer):
    if answer is None:
        raise NotYet("fill in my_diagnosis: one cause for each of A, B and C")
    if not isinstance(answer, dict) or set(answer) != set(EXCERPTS):
        raise Wrong("answer with a dict: {'A': cause, 'B': cause, 'C': cause}", HINT)
    for key in sorted(EXCERPTS):
        said = answer[key]
        if said not in CAUSES:
            raise Wrong(f"{key}: {said!r} is not one of the causes: {', '.join(CAUSES)}")
        if said != ANSWER[key]:
            raise Wrong(f"{key} is not {said!r}: " + WHY_NOT.get((key, said), "the excerpt does not fit it."), HINT)


@reference("when-it-breaks.diagnose")
def _diagnose():
    return {"A": "wrong address", "B": "wrong PSN", "C": "link MTU below the path MTU"}


# ---- when-it-breaks.way-back ----

BACK_HINT = ("A QP in ERR takes one step only, to RESET; from there it is a new QP: it needs its attributes "
             "again, and both ends a fresh start (PSNs each side tells the other). And a SEND needs a receive "
             "posted: what became of the ones posted before?")


@exercise("when-it-breaks.way-back", "Bring a pair stuck in ERR back to work", hints=[BACK_HINT])
def _check_way_back(fn, ctx, pd):
    from rdmalab.lessons import failures
    if fn is None:
        raise NotYet("write my_way_back(pair)", BACK_HINT)
    if not callable(fn):
        raise Wrong("answer with your function, as the cell does: lambda: my_way_back.")
    with failures.Stuck(ctx, pd) as pair:
        if pair.states() != ("ERR", "ERR"):   # (how every device leaves a refused WRITE: both QPs in ERR)
            raise RuntimeError(f"the stuck pair is in {pair.states()}, not ERR: the lesson's pair did not break")
        try:
            fn(pair)
            error = None
        except NotImplementedError:
            raise NotYet("write my_way_back(pair)", BACK_HINT) from None
        except Exception as raised:   # (pyverbs' errors carry the errno; soft0's are the same)
            error = raised
        _judge_way_back(pair, error)


def _qps(who, verb="is"):
    """'the sender's QP is', or 'both QPs are', for a list of sides."""
    return f"both QPs {'are' if verb == 'is' else verb}" if len(who) == 2 else f"the {who[0]}'s QP {verb}"


def _judge_way_back(pair, error):
    states = dict(zip(("sender", "target"), pair.states()))
    said = f" ({type(error).__name__}: {error})" if error is not None else ""
    if error is not None and "post recv" in str(error) and states["target"] in ("RESET", "ERR"):
        raise Wrong(f"a receive was posted to the target's QP in {states['target']} and refused{said}: a QP takes "
                    "receives from INIT on; post them once pair.to_rts() has brought it back.", BACK_HINT)
    stuck = [who for who, state in states.items() if state == "ERR"]
    if stuck and error is not None:
        raise Wrong(f"{_qps(stuck)} still in ERR and the device refused the next step{said}: from ERR a QP goes "
                    "only to RESET, qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE) (the kernel "
                    "refuses ERR to INIT, RTR or RTS with errno 22).", BACK_HINT)
    reset = [who for who, state in states.items() if state == "RESET"]
    if reset and error is not None:
        raise Wrong(f"{_qps(reset, 'stopped')} in RESET{said}: from RESET it goes through INIT and RTR "
                    "to RTS, each step with its attributes (pair.to_rts() takes both there).", BACK_HINT)
    if error is not None:
        raise Wrong(f"your function raised {type(error).__name__}: {error}", BACK_HINT)
    if stuck == ["sender", "target"]:
        raise NotYet("both QPs are still in ERR: your function changed nothing.", BACK_HINT)
    if stuck:
        raise Wrong(f"the {stuck[0]}'s QP is still in ERR: a connection has two ends, and both come back, each "
                    "through RESET.", BACK_HINT)
    behind = [who for who, state in states.items() if state != "RTS"]
    if behind:
        raise Wrong(f"{_qps(behind)} in {' and '.join(sorted({states[who] for who in behind}))}, not RTS: from RESET "
                    "a QP goes through INIT and RTR to RTS (pair.to_rts() takes both there).", BACK_HINT)
    psns = pair.psns()
    (sender_sq, sender_rq), (target_sq, target_rq) = psns["sender"], psns["target"]
    if sender_sq == pair.old_psn:
        raise Wrong(f"the sender starts again from PSN {sender_sq}, the PSN the refused WRITE went out with: a resend "
                    "of the old connection still on the network would be taken for new. Give it a fresh one, and "
                    "tell the target (its rq_psn).", BACK_HINT)
    for (who, sq), (peer, rq) in ((("sender", sender_sq), ("target", target_rq)),
                                  (("target", target_sq), ("sender", sender_rq))):
        if sq != rq:
            raise Wrong(f"the {who} sends from PSN {sq}, but the {peer} expects {rq} (its rq_psn): every request "
                        "would arrive out of sequence and go unanswered (status 12 after the retries). Each side's "
                        "rq_psn is its peer's new sq_psn.", BACK_HINT)
    wrote, landed, sent, received = pair.traffic()
    from rdmalab.errors import status_name
    if wrote != 0 or not landed:
        raise Wrong(f"after your way back a WRITE completed with status {wrote} ({status_name(wrote)})"
                    + ("" if wrote != 0 else " but its bytes did not land") + ".", BACK_HINT)
    if sent == 13:
        raise Wrong("the WRITE went through, but a SEND found no receive: RNR_RETRY_EXC_ERR (13). The receives "
                    "posted before were flushed in ERR, and RESET empties the queue: post them again "
                    "(pair.post_recv()) once the QPs are back.", BACK_HINT)
    if sent != 0 or received != 0:
        raise Wrong(f"the WRITE went through; a SEND then completed with status {sent} "
                    f"({status_name(sent) if sent is not None else '-'}), its receive with {received}.", BACK_HINT)


@reference("when-it-breaks.way-back")
def _way_back():
    return my_way_back


def my_way_back(pair):
    e = v.enums
    for qp in pair.qps:                                    # (the sender's QP, the target's)
        qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)   # from ERR, RESET is the only way
    pair.sender.sq_psn = pair.target.rq_psn = psn_add(pair.sender.sq_psn, 4096)   # fresh, told to the peer
    pair.target.sq_psn = pair.sender.rq_psn = psn_add(pair.target.sq_psn, 4096)   # (PSNs are 24-bit: they wrap)
    pair.to_rts()                                          # INIT, RTR, RTS, with these values
    pair.post_recv()                                       # RESET emptied the receive queue
