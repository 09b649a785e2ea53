"""Lesson 03, queue pairs: its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference
from rdmalab.lessons.fixtures import state_of


@exercise("03.to-rts", "Bring a QP from RESET to RTS by hand, connected to its peer",
          hints=["Three modify() calls: INIT (pkey_index, port, access flags), RTR (address vector, path MTU, "
                 "dest_qp_num, rq_psn, max_dest_rd_atomic, min_rnr_timer), RTS (sq_psn, timeout, retry_cnt, "
                 "rnr_retry, max_rd_atomic); each mask must name every attribute the step requires."])
def _check_to_rts(qp, _qp, local, remote, route, lab):
    from rdmalab.verbs import enums as e
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
    hint = ("Check the address vector (the peer's GID, is_global=1 on RoCE), dest_qp_num, and that "
            "sq_psn is local['psn'] and rq_psn is remote['psn'].")
    try:
        wc = lab.send_and_receive(b"checked", timeout=3)
    except TimeoutError:   # with retry_cnt 7 a request nobody accepts is retried without end
        raise Wrong("a SEND from it never completed: the peer drops what it sends (with retry_cnt 7 the "
                    "sender retries forever; a smaller retry_cnt ends in RETRY_EXC_ERR, status 12).", hint) from None
    if wc.status != e.IBV_WC_SUCCESS:
        raise Wrong(f"a SEND from it completed with status {wc.status} (12 is RETRY_EXC_ERR: nobody answered).", hint)


@reference("03.to-rts")
def _to_rts(qp, local, remote, route):
    from rdmalab.verbs import addr
    from rdmalab.verbs import enums as e
    from rdmalab.verbs import qp as qpmod
    qp.modify(qpmod.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)        # start clean, whatever went before

    init = qpmod.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=route.port)
    init.pkey_index, init.qp_access_flags = 0, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)

    rtr = qpmod.QPAttr(qp_state=e.IBV_QPS_RTR, port_num=route.port, path_mtu=route.path_mtu)
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
