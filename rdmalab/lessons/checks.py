"""The exercises of the lessons: each a check (raising Wrong with a hint) and a reference solution."""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.lessons.fixtures import Pair, one_sided, state_of

# ---------------------------------------------------------------- lesson 01: the socket path

PINGPONGS, MESSAGE = 100, 64 * 1024


@exercise("01.predict", "Predict the client's cost of 100 ping-pongs of 64 KiB over TCP",
          hints=["Count per message: the client write()s it once and read()s the echo at least once; "
                 "every byte crosses the user/kernel boundary on the way out and again on the way back."])
def _check_predict(answer):
    if not isinstance(answer, dict) or not {"writes", "reads_at_least", "bytes_copied"} <= set(answer):
        raise Wrong("answer with a dict: {'writes': ..., 'reads_at_least': ..., 'bytes_copied': ...}")
    if answer["writes"] != PINGPONGS:
        raise Wrong(f"writes: {answer['writes']} is not it.",
                    "The client writes each of its 100 messages once; the echo is the server's write, not the client's.")
    if answer["reads_at_least"] != PINGPONGS:
        raise Wrong(f"reads_at_least: {answer['reads_at_least']} is not it.",
                    "Each echo needs at least one read() (a 64 KiB message may arrive in pieces: more, never fewer).")
    if answer["bytes_copied"] != 2 * PINGPONGS * MESSAGE:
        raise Wrong(f"bytes_copied: {answer['bytes_copied']:,} is not it.",
                    "Sent bytes are copied into the kernel, and the echo is copied out of it again: count both ways.")


@reference("01.predict")
def _predict():
    return {"writes": 100, "reads_at_least": 100, "bytes_copied": 2 * 100 * 64 * 1024}


# ---------------------------------------------------------------- lesson 02: memory registration

@exercise("02.write-not-read", "Register 4 KiB that a peer may RDMA WRITE into but not RDMA READ",
          hints=["Access flags are OR-ed IBV_ACCESS_* values; remote write also needs local write "
                 "(the kernel refuses REMOTE_WRITE without LOCAL_WRITE with errno 22)."])
def _check_write_not_read(mr, ctx, pd):
    from rdmalab.verbs import enums as e
    if mr.length < 4096:
        raise Wrong(f"the MR is {mr.length} bytes; register at least 4096.")
    with Pair(ctx, pd) as pair:
        wc = one_sided(pair, e.IBV_WR_RDMA_WRITE, target=mr)
        if wc.status != e.IBV_WC_SUCCESS:
            raise Wrong(f"a peer's RDMA WRITE into it completed with status {wc.status} (REM_ACCESS_ERR is 10).",
                        "Without IBV_ACCESS_REMOTE_WRITE the rkey is 0 and no peer may write.")
    with Pair(ctx, pd) as pair:
        wc = one_sided(pair, e.IBV_WR_RDMA_READ, target=mr)
        if wc.status == e.IBV_WC_SUCCESS:
            raise Wrong("a peer could RDMA READ it.", "Leave IBV_ACCESS_REMOTE_READ out of the access flags.")


@reference("02.write-not-read")
def _write_not_read(ctx, pd):
    from rdmalab.verbs import enums as e
    from rdmalab.verbs import mr
    return mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)


# ---------------------------------------------------------------- lesson 03: queue pairs

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



# ---------------------------------------------------------------- lesson 04: one-sided operations

@exercise("04.mailbox", "A one-sided mailbox: the writes that deliver a message the reader finds by polling",
          hints=["The reader polls the 8-byte flag at offset 0 and then reads the message at offset 8: "
                 "write the message first, the flag last (RC executes writes on one QP in order)."])
def _check_mailbox(plan, length, qp, cq, local_mr, target, message):
    if not isinstance(plan, (list, tuple)) or not plan or not all(len(w) == 3 for w in plan):
        raise Wrong("answer with a list of (local offset, length, remote offset) writes, in posting order.")
    covers = lambda w, lo, hi: w[2] <= lo and hi <= w[2] + w[1]   # noqa: E731
    if not covers(plan[-1], 0, 8):
        raise Wrong("the last write does not set the flag (8 bytes at remote offset 0): the reader may wake "
                    "before the message is all there, or never.")
    if not any(covers(w, 8, 8 + length) for w in plan[:-1]):
        raise Wrong(f"no write before the flag carries the {length}-byte message to remote offset 8.")
    if any(w[2] < 8 + length and w[2] + w[1] > 8 and w[0] - w[2] != 0 for w in plan):
        raise Wrong("a write puts the wrong local bytes in the message: local and remote offsets must match "
                    "(message at 8 in both buffers).")
    got = deliver(plan, qp, cq, local_mr, target, message)
    if got != message:
        raise Wrong(f"the reader found {got!r}, not {message!r}.")


@reference("04.mailbox")
def _mailbox(length):
    return [(8, length, 8), (0, 8, 0)]


def deliver(plan, qp, cq, local_mr, target, message):
    """Stage flag and message locally, post the plan's writes in order, let the target read its mailbox."""
    from rdmalab.verbs import enums as e
    from rdmalab.verbs import rc, wr
    local_mr.write(len(message).to_bytes(8, "little") + message, 8 + len(message))
    for i, (local, length, remote) in enumerate(plan):
        last = i == len(plan) - 1
        w = wr.SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                      sg=[wr.SGE(local_mr.buf + local, length, local_mr.lkey)],
                      send_flags=e.IBV_SEND_SIGNALED if last else 0)
        w.set_wr_rdma(target.endpoint["rkey"], target.endpoint["addr"] + remote)
        qp.post_send(w)
    rc.wait_for_completion(cq)
    return bytes.fromhex(target.wait_for_mail()["message"])


# ---------------------------------------------------------------- lesson 05: AllReduce by hand

@exercise("05.ring-step", "One reduce-scatter step of the ring, on every rank",
          hints=["At step s, rank r sends chunk (r - s) mod p to rank r+1 (comm.t.put into its 'stage' at the "
                 "step's slot), waits for rank r-1 (comm.t.wait), and adds chunk (r - s - 1) mod p from the "
                 "stage into x."])
def _check_ring_step(step, cluster):
    from rdmalab.allreduce.algorithms import check_ring
    from rdmalab.allreduce.cluster import ClusterError
    try:
        wrong = cluster.run(check_ring, step, timeout=120)
    except ClusterError as error:
        if "NotImplementedError" in str(error):
            raise NotYet() from None
        raise Wrong(f"running it on the ranks failed: {error}") from None
    if any(any(w) for w in wrong):
        raise Wrong(f"the sums are wrong (wrong elements per rank and size: {wrong}).",
                    "Check which chunk you send and which you add: they differ by one, and both shift with the step.")


@reference("05.ring-step")
def _ring_step():
    from rdmalab.allreduce.algorithms import reduce_scatter_step
    return reduce_scatter_step
