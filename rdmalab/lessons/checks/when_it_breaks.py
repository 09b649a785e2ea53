"""The failures lesson (when-it-breaks): its exercise, a check (raising Wrong with a hint) and a reference.

when-it-breaks.diagnose: three excerpts from a training job's logs and its NICs' counters, as an RDMA
engineer receives them; the learner names the cause of each, from CAUSES. A plausible wrong diagnosis
is rejected with the evidence in the excerpt that rules it out.
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

CAUSES = ("wrong address", "wrong PSN", "MTU mismatch", "no REMOTE_WRITE", "no receive posted", "timeout too short")

EXCERPTS = {   # (NCCL's line is one line in a log: wrapped here at 96 columns)
    "A": ("NET/IB: Got completion from peer 10.0.3.7<41522> with status=IBV_WC_RETRY_EXC_ERR(12)\n"
          "    opcode=IBV_WC_RDMA_WRITE(1) vendor_err=0  localGid ::ffff:10.0.3.6 remoteGids ::ffff:10.0.3.70 hca rxe0\n"
          "  the sender's counters: completer_retry_err +7, retry_exceeded_err +1; rcvd_pkts +0\n"
          "  the peer's counters (10.0.3.7): nothing moved\n"
          "  ibv_devinfo on 10.0.3.7: GID 1 ::ffff:10.0.3.7"),
    "B": ("NET/IB: Got completion from peer 10.0.3.7<41522> with status=IBV_WC_RETRY_EXC_ERR(12)\n"
          "    opcode=IBV_WC_RDMA_WRITE(1) vendor_err=0  localGid ::ffff:10.0.3.6 remoteGids ::ffff:10.0.3.7 hca rxe0\n"
          "  the sender's counters: completer_retry_err +7, retry_exceeded_err +1\n"
          "  the peer's counters: rcvd_pkts +8, out_of_seq_request +1\n"
          "  the job's own QP exchange code was changed the day before"),
    "C": ("NET/IB: Got completion from peer 10.0.3.7<41522> with status=IBV_WC_REM_INV_REQ_ERR(9)\n"
          "    opcode=IBV_WC_RDMA_WRITE(1) vendor_err=0  localGid ::ffff:10.0.3.6 remoteGids ::ffff:10.0.3.7 hca rxe0\n"
          "  the first WRITEs, of 512 bytes, completed; the first of 64 KiB failed; both QPs are now in ERR\n"
          "  the sender's QP: path_mtu 4096; the peer's: path_mtu 1024 (its port's active MTU)"),
}
ANSWER = {"A": "wrong address", "B": "wrong PSN", "C": "MTU mismatch"}
WHY_NOT = {   # (excerpt, a wrong diagnosis): the evidence against it
    ("A", "timeout too short"): "a timeout too short still sees some ACKs come back; here the sender received "
                                "nothing at all (rcvd_pkts +0) and the peer saw nothing: its packets went elsewhere. "
                                "Compare the remote GID with the peer's own.",
    ("A", "wrong PSN"): "a wrong PSN reaches the peer, which counts it (out_of_seq_request or duplicate_request); "
                        "the peer's counters did not move.",
    ("A", "no receive posted"): "a missing receive gives RNR NAKs and status 13, not 12.",
    ("B", "wrong address"): "the peer received the packets (rcvd_pkts +8) and counted one out of sequence: they "
                            "reached it, with a PSN it did not expect.",
    ("B", "timeout too short"): "the peer counted a request ahead of the PSN it expects, and answered none of the "
                                "resends: a longer timeout would only wait longer for the same silence.",
    ("B", "no receive posted"): "a missing receive gives RNR NAKs (send_rnr_err on the peer) and status 13.",
    ("C", "no REMOTE_WRITE"): "a missing REMOTE_WRITE is REM_ACCESS_ERR (10), and the small WRITEs into the same "
                              "buffer would have failed too.",
    ("C", "wrong address"): "the peer answered (a NAK): the packets reached it, and the small WRITEs completed.",
    ("C", "wrong PSN"): "a wrong PSN makes every request go unanswered (status 12), small ones too.",
}
HINT = ("Read the status first (12: nobody answered; 9: the peer refused the request; 10: it refused the "
        "access), then the counters: which side saw the packets?")


@exercise("when-it-breaks.diagnose", "Name the cause of three failures from their logs and counters", hints=[HINT])
def _check_diagnose(answer):
    if answer is None:
        raise NotYet("fill in my_diagnosis: one cause for each of A, B and C", HINT)
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
    return {"A": "wrong address", "B": "wrong PSN", "C": "MTU mismatch"}
