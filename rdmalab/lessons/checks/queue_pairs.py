"""The queue pairs lesson (queue-pairs): its exercises, each a check (raising Wrong with a hint) and a
reference solution.

queue-pairs.queues: create a CQ and an RC QP for SENDS sends in flight and RECVS receives posted, both queues
reporting to that CQ. The check judges what the device granted (query(IBV_QP_CAP), the CQ's cqe), as every
device reports it: rxe and soft0 round a queue up to a power of two less one (8 -> 15), so a request one short
of what is needed (a CQ of 8 for 8 + 8 completions) stays short.
queue-pairs.to-rts: bring the lesson's QP (QPLab) from RESET to RTS, checked by traffic both ways.
"""
from rdmalab.lessons.exercises import Wrong, exercise, reference
from rdmalab.lessons.explain import explain
from rdmalab.lessons.fixtures import state_of
from rdmalab import verbs as v

SENDS, RECVS = 8, 8   # queues: the SENDs the QP may have in flight, the receives it may have posted
QP_TYPES = {"IBV_QPT_RC": "RC (reliable connected)", "IBV_QPT_UC": "UC (unreliable connected)",
            "IBV_QPT_UD": "UD (unreliable datagram: QPInitAttr's default when qp_type is left out)"}
QUEUES_HINT = (f"v.cq.CQ(ctx, {SENDS + RECVS}); v.qp.QPCap(max_send_wr={SENDS}, max_recv_wr={RECVS}, max_send_sge=1, "
               "max_recv_sge=1); v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)).")


@exercise("queue-pairs.queues", f"Create a CQ and an RC QP for {SENDS} SENDs in flight and {RECVS} receives posted",
          hints=[QUEUES_HINT])
def _check_queues(made, ctx, pd):
    e = v.enums
    if not isinstance(made, tuple) or len(made) != 2:
        raise Wrong(f"return the CQ and the QP, as `return cq, qp` (you returned {type(made).__name__}).")
    cq, qp = made
    if not isinstance(cq, v.cq.CQ) or not isinstance(qp, v.qp.QP):
        raise Wrong(f"return the CQ first, then the QP (you returned a {type(cq).__name__} and a "
                    f"{type(qp).__name__}).")
    names = {int(getattr(e, name)): name for name in QP_TYPES}
    if qp.qp_type != e.IBV_QPT_RC:
        kind = QP_TYPES.get(names.get(qp.qp_type), f"type {qp.qp_type}")
        raise Wrong(f"the QP is {kind}: the lesson connects a reliable-connected QP to one peer, and only RC "
                    "carries RDMA READs and gets every message acknowledged.", "qp_type=e.IBV_QPT_RC in QPInitAttr.")
    attr, _ = qp.query(e.IBV_QP_CAP)
    cap = attr.cap
    for held, needed, what, field in ((cap.max_send_wr, SENDS, "send queue", "max_send_wr"),
                                      (cap.max_recv_wr, RECVS, "receive queue", "max_recv_wr")):
        if held < needed:
            raise Wrong(f"its {what} holds {held} work requests, fewer than the {needed} asked for: a post beyond "
                        f"them fails with ENOMEM (the device may round a size up, never down).",
                        f"QPCap({field}={needed}, ...).")
    if cap.max_send_sge < 1 or cap.max_recv_sge < 1:
        raise Wrong(f"its WRs may carry {cap.max_send_sge} (send) and {cap.max_recv_sge} (receive) SGEs: every "
                    "SEND and receive of the lessons names one buffer.", "max_send_sge=1, max_recv_sge=1.")
    if cq.cqe < SENDS + RECVS:
        raise Wrong(f"the CQ holds {cq.cqe} completions, fewer than the {SENDS + RECVS} that {SENDS} SENDs and "
                    f"{RECVS} receives can bring at once: both queues report to this CQ, and a full CQ drops "
                    "what comes next (the device raises IBV_EVENT_CQ_ERR; the completion is lost).",
                    f"Size the CQ for both queues: v.cq.CQ(ctx, {SENDS} + {RECVS}).")
    if state_of(qp) != "RESET":
        raise Wrong(f"the QP is in {state_of(qp)}: leave it as created, in RESET (the next cells walk it).")


@reference("queue-pairs.queues")
def _make_queues(ctx, pd):
    e = v.enums
    cq = v.cq.CQ(ctx, 16)                                        # room for 8 send and 8 receive completions
    cap = v.qp.QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    return cq, qp


@exercise("queue-pairs.to-rts", "Bring a QP from RESET to RTS by hand, connected to its peer",
          hints=["Three modify() calls: INIT (pkey_index, port, access flags), RTR (address vector, path MTU, "
                 "dest_qp_num, rq_psn, max_dest_rd_atomic, min_rnr_timer), RTS (sq_psn, timeout, retry_cnt, "
                 "rnr_retry, max_rd_atomic); each mask must name every attribute the step requires."])
def _check_to_rts(qp, _qp, local, remote, route, lab):
    """Your QP must reach RTS connected to the peer, and work both ways: a SEND from it, then from the peer
    a SEND into it, an RDMA WRITE into your MR and an RDMA READ of it."""
    try:
        _check_both_ways(qp, local, remote, route, lab)
    except Wrong:
        lab.connect_peer()   # a failed request left the peer in ERR: the lesson goes on with a fresh one
        raise


def _check_both_ways(qp, local, remote, route, lab):
    e = v.enums
    state = state_of(qp)
    if state != "RTS":
        advice = {"RESET": "it never left RESET: start with a modify to INIT.",
                  "INIT": "INIT can post receives but not send: go on to RTR, then RTS.",
                  "RTR": "RTR can receive but not send: one more modify, to RTS.",
                  "ERR": "a modify failed or an error completed: start again from RESET."}.get(state, "")
        raise Wrong(f"the QP is in {state}, not RTS.", advice)
    attr, _ = qp.query(e.IBV_QP_DEST_QPN)
    if attr.dest_qp_num != remote["qp_num"]:
        raise Wrong(f"it is connected to QP {attr.dest_qp_num}, not to the peer's {remote['qp_num']}.",
                    "dest_qp_num comes from the peer's endpoint: remote['qp_num'].")
    where = "its GID, is_global=1 on RoCE" if route.link_layer != e.IBV_LINK_LAYER_INFINIBAND else "dlid=its LID"
    hint = (f"Check the address vector (the peer's {where}), dest_qp_num, and that "
            "sq_psn is local['psn'] and rq_psn is remote['psn'].")
    try:
        wc = lab.send_and_receive(b"checked", timeout=3)
    except TimeoutError:   # retry_cnt 7: the spec's 7 resends; Soft-RoCE and soft0 resend without end
        raise Wrong("a SEND from it never completed: the peer drops what it sends (nobody acknowledges it, so "
                    "it is resent retry_cnt times, then fails with RETRY_EXC_ERR, status 12; Soft-RoCE and "
                    "soft0 treat retry_cnt 7 as 'forever').", hint) from None
    if wc.status != e.IBV_WC_SUCCESS:
        raise Wrong(f"a SEND from it completed with status {wc.status} (12 is RETRY_EXC_ERR: nobody answered): "
                    f"{explain(wc, None, qp).said}", hint)
    _check_from_peer(qp, lab)


def _check_from_peer(qp, lab):
    """The other direction: what your RTR attributes (rq_psn, max_dest_rd_atomic) and INIT's access
    flags decide."""
    e = v.enums
    steps = [("a SEND from the peer into your QP", e.IBV_WR_SEND, b"hello from the peer",
              "rq_psn must be remote['psn'], the PSN the peer sends from: a request with any other PSN is dropped."),
             ("an RDMA WRITE from the peer into your MR", e.IBV_WR_RDMA_WRITE, b"written by the peer",
              "qp_access_flags (set at INIT) say what the peer may do through your QP: include "
              "IBV_ACCESS_REMOTE_WRITE (and REMOTE_READ)."),
             ("an RDMA READ of your MR by the peer", e.IBV_WR_RDMA_READ, b"written by the peer",
              "a READ needs IBV_ACCESS_REMOTE_READ in qp_access_flags and max_dest_rd_atomic >= 1 at RTR "
              "(how many READs and atomics the peer may have outstanding at your QP).")]
    for what, opcode, payload, advice in steps:
        try:
            wc = lab.from_peer(opcode, payload, timeout=3)
        except TimeoutError:
            raise Wrong(f"{what} never arrived.", advice) from None
        if wc.status != e.IBV_WC_SUCCESS:
            raise Wrong(f"{what} failed: the peer's completion has status {wc.status} (9 REM_INV_REQ_ERR or "
                        f"10 REM_ACCESS_ERR: your QP refused it; 12 RETRY_EXC_ERR: it did not answer): "
                        f"{explain(wc, lab.posted, lab.peer).said}", advice)
        landed = lab.peer_mr.read(len(payload), 0) if opcode == e.IBV_WR_RDMA_READ else \
            lab.mr.read(len(payload), 2048 if opcode == e.IBV_WR_SEND else 0)
        if landed != payload:
            raise Wrong(f"{what} completed, but the bytes are not there ({landed!r}).", advice)


@reference("queue-pairs.to-rts")
def _to_rts(qp, local, remote, route):
    addr = v.addr
    e = v.enums
    qpmod = v.qp
    qp.modify(qpmod.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)        # start clean, whatever went before

    init = qpmod.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=route.port)        # what the peer may do through it:
    init.pkey_index = 0
    init.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)

    rtr = qpmod.QPAttr(qp_state=e.IBV_QPS_RTR, port_num=route.port, path_mtu=route.path_mtu)
    if route.link_layer == e.IBV_LINK_LAYER_INFINIBAND:                       # an InfiniBand subnet: by LID
        rtr.ah_attr = addr.AHAttr(port_num=route.port, is_global=0, dlid=remote["lid"])
    else:                                                                     # RoCE: by GID, in a routed header
        rtr.ah_attr = addr.AHAttr(port_num=route.port, is_global=1, gr=addr.GlobalRoute(
            dgid=addr.GID(remote["gid"]), sgid_index=route.gid_index, hop_limit=64))
    rtr.dest_qp_num, rtr.rq_psn, rtr.max_dest_rd_atomic, rtr.min_rnr_timer = remote["qp_num"], remote["psn"], 1, 12
    qp.modify(rtr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
              | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)

    rts = qpmod.QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.sq_psn, rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic = local["psn"], 14, 7, 7, 1
    qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
              | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
    return qp
