"""The one-sided operations lesson (one-sided): its exercise, a check (raising Wrong with a hint) and a
reference solution.

The mailbox is graded for what the InfiniBand specification guarantees, not for what happens to work:
RC executes a QP's WRITEs in order, but promises nothing about the order in which one WRITE's bytes, or
two WRITEs' bytes, are placed in the target's memory (Vol. 1, 9.5; ibv_reg_mr(3) on relaxed ordering).
What it does promise (o9-20): a WRITE_WITH_IMM's completion at the responder comes after its data is
placed, and so does the completion of a SEND that follows earlier WRITEs on the same QP. A flag written
last by a WRITE of its own works on soft0, on rxe and on a ConnectX in host memory, and is not
guaranteed: such a plan is named for what it is, and not accepted.
"""
from rdmalab.lessons.exercises import Wrong, exercise, reference

WRITE, WRITE_WITH_IMM, SEND = "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND"
HINT = ("Let the message's own arrival be the notice: a WRITE_WITH_IMM of the message (its immediate, the "
        "length, completes on the reader's CQ only after its bytes are placed), or the message's WRITEs and "
        "then a SEND of the length (its completion follows every earlier WRITE of the QP).")


def _opcodes():
    from rdmalab.verbs import enums as e
    return {int(e.IBV_WR_RDMA_WRITE): WRITE, int(e.IBV_WR_RDMA_WRITE_WITH_IMM): WRITE_WITH_IMM,
            int(e.IBV_WR_SEND): SEND}


def _steps(plan):
    """The plan as (kind, local offset, length, remote offset) steps, or Wrong naming the shape expected."""
    names = _opcodes()
    shape = ("answer with a list of steps in posting order, each (opcode, local offset, length, remote offset): "
             "opcode e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_WRITE_WITH_IMM or e.IBV_WR_SEND (a SEND's remote offset is "
             "None: the reader's posted receive decides where it lands).")
    if not isinstance(plan, (list, tuple)) or not plan or not all(isinstance(w, (list, tuple)) and len(w) == 4 for w in plan):
        raise Wrong(shape)
    steps = []
    for op, local, length, remote in plan:
        if op not in names or not isinstance(local, int) or not isinstance(length, int) or length < 0 \
                or not (remote is None if names.get(op) == SEND else isinstance(remote, int)):
            raise Wrong(f"({op}, {local}, {length}, {remote}) is not a step: {shape}")
        steps.append((names[op], local, length, remote))
    if len(steps) > 8:
        raise Wrong(f"{len(steps)} steps: a mailbox needs one or two; keep it to 8 at most.")
    return steps


@exercise("one-sided.mailbox", "A one-sided mailbox: deliver a message so that the reader is guaranteed to see it whole",
          hints=[HINT])
def _check_mailbox(plan, length, qp, cq, local_mr, target, message):
    steps = _steps(plan)
    touches = lambda s, lo, hi: s[0] != SEND and s[2] > 0 and s[3] < hi and s[3] + s[2] > lo   # noqa: E731
    text = (8, 8 + length)
    if any(touches(s, *text) and s[1] != s[3] for s in steps):
        raise Wrong("a step puts the wrong local bytes in the message: local and remote offsets must match "
                    "(the message sits at offset 8 in both buffers).")
    notices = [i for i, s in enumerate(steps) if s[0] in (WRITE_WITH_IMM, SEND)]
    flags = [i for i, s in enumerate(steps) if touches(s, 0, 8)]
    last = steps[-1]
    if flags and notices:
        raise Wrong(f"{plan[flags[0]]} sets the flag and {plan[notices[0]]} announces the mail too: a reader that "
                    "polls the flag may wake on it before the message is placed. Announce once.", HINT)
    if flags:
        first = flags[0]
        if first < len(steps) - 1 or touches(last, *text):
            raise Wrong(f"{plan[first]} sets the flag while message bytes are still to come (in a later step, "
                        "or in the same WRITE, whose bytes may be placed in any order): the reader may wake and "
                        "read a message that is not all there.", HINT)
        raise Wrong("a flag written last by a WRITE of its own works here, and on rxe and a ConnectX in host "
                    "memory, but nothing guarantees it: RC orders the WRITEs' execution, not where their bytes "
                    "land, and with relaxed ordering or in GPU memory the flag can be seen first (InfiniBand "
                    "spec Vol. 1, 9.5; ibv_reg_mr(3)).", HINT)
    if not notices:
        raise Wrong("nothing tells the reader that mail has come: no flag, no WRITE_WITH_IMM, no SEND.", HINT)
    notice = notices[0]
    if notice != len(steps) - 1:
        raise Wrong(f"{plan[notice]} announces the mail before the steps after it: the reader may wake at once "
                    "and read a message that is not all there.", "announce once, in the last step.")
    missing = [b for b in range(*text) if not any(s[3] <= b < s[3] + s[2] for s in steps if s[0] != SEND)]
    if missing:
        raise Wrong(f"no WRITE carries byte {missing[0]} of the mailbox (the message is bytes 8 to {7 + length}).")
    if last[0] == SEND and (last[1], last[2]) != (0, 8):
        raise Wrong(f"the SEND carries {last[2]} bytes from local offset {last[1]}: the reader takes the 8 bytes a "
                    "SEND brings as the message's length, and your buffer holds it at offset 0.",
                    "send (e.IBV_WR_SEND, 0, 8, None).")
    got = deliver(plan, qp, cq, local_mr, target, message)
    if got != message:
        raise Wrong(f"the reader found {got!r}, not {message!r}.")


@reference("one-sided.mailbox")
def _mailbox(length):
    from rdmalab.verbs import enums as e
    return [(e.IBV_WR_RDMA_WRITE_WITH_IMM, 8, length, 8)]   # the immediate (the length) arrives after the bytes


def deliver(plan, qp, cq, local_mr, target, message):
    """Stage the flag (the length) and the message locally, post the plan's steps in order (a WRITE_WITH_IMM
    carries the length as its immediate), and let the target read its mailbox. Returns what it found."""
    from rdmalab.verbs import enums as e
    from rdmalab.verbs import rc, wr
    local_mr.write(len(message).to_bytes(8, "little") + message, 8 + len(message))
    for i, (opcode, local, length, remote) in enumerate(plan):
        last = i == len(plan) - 1
        w = wr.SendWR(wr_id=i, opcode=opcode, num_sge=1, sg=[wr.SGE(local_mr.buf + local, length, local_mr.lkey)],
                      send_flags=e.IBV_SEND_SIGNALED if last else 0,
                      imm_data=len(message) if opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM else 0)
        if remote is not None:
            w.set_wr_rdma(target.endpoint["rkey"], target.endpoint["addr"] + remote)
        qp.post_send(w)
    rc.wait_for_completion(cq)
    return bytes.fromhex(target.wait_for_mail()["message"])
