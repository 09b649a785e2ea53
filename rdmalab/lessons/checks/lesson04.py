"""Lesson 04, one-sided operations: its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference


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
