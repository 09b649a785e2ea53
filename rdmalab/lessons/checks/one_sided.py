"""The one-sided operations lesson (one-sided): its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference


@exercise("one-sided.mailbox", "A one-sided mailbox: the writes that deliver a message the reader finds by polling",
          hints=["The reader polls the 8-byte flag at offset 0, then reads the message at offset 8: write the "
                 "message first (in one WRITE or several), then the flag alone, last. WRITEs on one RC QP are "
                 "executed in order; the bytes of one WRITE may be placed in any order."])
def _check_mailbox(plan, length, qp, cq, local_mr, target, message):
    if not isinstance(plan, (list, tuple)) or not plan or not all(
            isinstance(w, (list, tuple)) and len(w) == 3 and all(isinstance(x, int) for x in w) for w in plan):
        raise Wrong("answer with a list of (local offset, length, remote offset) writes, in posting order.")
    if len(plan) > 8:
        raise Wrong(f"{len(plan)} writes: a mailbox needs two (the message, then the flag); keep it to 8 at most.")
    touches = lambda w, lo, hi: w[1] > 0 and w[2] < hi and w[2] + w[1] > lo   # noqa: E731
    flag, text = (0, 8), (8, 8 + length)
    last = plan[-1]
    if not (last[2] <= 0 and 8 <= last[2] + last[1]):
        raise Wrong("the last write does not set the flag (8 bytes at remote offset 0): the reader may wake "
                    "before the message is all there, or never.")
    if touches(last, *text):
        raise Wrong("the last write carries message bytes as well as the flag: the bytes of one WRITE may be "
                    "placed in memory in any order, so the reader may see the flag before the message.",
                    "write the flag alone, last: (0, 8, 0).")
    early = [w for w in plan[:-1] if touches(w, *flag)]
    if early:
        raise Wrong(f"{tuple(early[0])} sets the flag before the message is complete: the reader may wake "
                    "then and read a message that is not all there yet.", "set the flag once, in the last write.")
    if any(touches(w, *text) and w[0] != w[2] for w in plan):
        raise Wrong("a write puts the wrong local bytes in the message: local and remote offsets must match "
                    "(message at 8 in both buffers).")
    missing = [b for b in range(*text) if not any(w[2] <= b < w[2] + w[1] for w in plan[:-1])]
    if missing:
        raise Wrong(f"no write before the flag carries byte {missing[0]} of the mailbox (the message is bytes "
                    f"8 to {7 + length}).")
    got = deliver(plan, qp, cq, local_mr, target, message)
    if got != message:
        raise Wrong(f"the reader found {got!r}, not {message!r}.")


@reference("one-sided.mailbox")
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
