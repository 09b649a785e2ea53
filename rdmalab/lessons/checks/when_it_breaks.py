"""The failures lesson (when-it-breaks): its exercise, a check (raising Wrong with a hint) and a reference.

when-it-breaks.diagnose: three excerpts from a training job's logs and its NICs' counters, as an RDMA
engineer receives them; the learner names the cause of each, from CAUSES. A plausible wrong diagnosis
is rejected with the evidence in the excerpt that rules it out.

The excerpts are written as the devices and NCCL versions named in them print: NCCL's WARN line up to
2.28.3 (numbers only, then the request's type) or from 2.29.2 (ncclIbLogCompletionWithError: names and
numbers), " remoteGids" followed by the GID with no space, as both print it; mlx5's counter names on a
ConnectX (Linux's drivers/infiniband/hw/mlx5/counters.c; mlx5 reports status 12 with vendor error 129),
rxe's on Soft-RoCE, where NCCL_IB_RETRY_CNT must be below 7 for status 12 to come at all (rxe_comp.c
resends for ever at 7).
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference

CAUSES = ("wrong address", "wrong PSN", "link MTU below the path MTU", "no REMOTE_WRITE", "no receive posted",
          "timeout too short")

EXCERPTS = {   # (NCCL's line is one line in a log: wrapped here to fit a laptop's notebook, "A: " and all)
    "A": ("NET/IB: Got completion from peer 10.0.4.7<41522> with status=12 opcode=0 len=0\n"
          "    vendor err 129 (Send) localGid ::ffff:10.0.3.6 remoteGids::ffff:10.0.4.70 hca mlx5_0\n"
          "  NCCL 2.27 on ConnectX NICs; the two racks are routed RoCE v2 subnets,\n"
          "  10.0.3.0/24 and 10.0.4.0/24\n"
          "  the sender's counters: local_ack_timeout_err +7, req_cqe_error +1\n"
          "  the peer's counters (10.0.4.7): nothing moved\n"
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
