"""The queue pairs lesson (queue-pairs): its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference
from rdmalab.lessons.explain import explain
from rdmalab.lessons.fixtures import state_of
from rdmalab import verbs as v


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
