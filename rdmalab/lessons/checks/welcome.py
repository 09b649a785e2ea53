"""The welcome lesson (welcome): its exercises, each a check (raising Wrong with a hint) and a reference solution.

welcome.write: the learner posts an RDMA WRITE of their message to byte 64 of the peer's buffer.
welcome.read-back: the learner READs the peer's bytes at byte 64 back into a second buffer of theirs.
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab import verbs as v
from rdmalab.verbs import rc

OFFSET = 64   # where in the peer's buffer the learner's WRITE must land


@exercise("welcome.write", "Post an RDMA WRITE of your message to byte 64 of the peer's buffer",
          hints=["Start from the WRITE posted above: the same three steps (an SGE, a SendWR, set_wr_rdma) "
                 "with this exercise's names. Which buffer does each key and address name: yours, or the peer's?"])
def _check_write(request, qp, local_mr, length, remote, pair):
    """Run by attempt() after the learner's function posted `request` on pair.a: its completion, what
    landed in the peer's memory, and that the peer's CQ stayed empty."""
    from rdmalab.errors import status_name
    e = v.enums
    try:
        wc = rc.wait_for_completion(pair.cq_a, timeout=5)
    except TimeoutError:
        raise Wrong("no completion arrived on the sender's CQ within 5 s.",
                    "Post the request with qp.post_send(request), and make it an IBV_WR_RDMA_WRITE: a SEND "
                    "would wait for a receive that the peer never posted.") from None
    if wc.status == e.IBV_WC_REM_ACCESS_ERR:
        raise Wrong(f"the peer's NIC refused it: status {wc.status} ({status_name(wc.status)}).",
                    "set_wr_rdma takes the peer's key and address: remote['rkey'] (local_mr.lkey only names "
                    "your own buffer) and remote['addr'] + 64 (local_mr.buf is an address in your memory, "
                    "outside the peer's buffer).")
    if wc.status != e.IBV_WC_SUCCESS:
        raise Wrong(f"it completed with status {wc.status} ({status_name(wc.status)}).",
                    "The SGE names your bytes: v.wr.SGE(local_mr.buf, length, local_mr.lkey).")
    if wc.opcode != e.IBV_WC_RDMA_WRITE:
        raise Wrong(f"it completed as opcode {wc.opcode}, not an RDMA WRITE (1).",
                    "opcode=e.IBV_WR_RDMA_WRITE in the SendWR.")
    landed, wanted = pair.b_mr.read(length, OFFSET), local_mr.read(length, 0)
    if landed != wanted:
        raise Wrong(f"byte {OFFSET} of the peer's buffer holds {landed!r}, not your message {wanted!r}.",
                    "The remote address is remote['addr'] + 64, and the SGE's length is `length`.")
    if pair.b_mr.read(OFFSET, 0) != bytes(OFFSET):
        raise Wrong(f"something landed before byte {OFFSET} of the peer's buffer.",
                    "The remote address is remote['addr'] + 64: the peer's buffer starts at remote['addr'].")
    if pair.cq_b.poll(1)[0] != 0:
        raise Wrong("a completion arrived on the peer's CQ: an RDMA WRITE should not create one.",
                    "Use IBV_WR_RDMA_WRITE (a WRITE with immediate data, or a SEND, completes at the peer too).")


@reference("welcome.write")
def _write(qp, local_mr, length, remote):
    e = v.enums
    sge = v.wr.SGE(local_mr.buf, length, local_mr.lkey)                  # my bytes: my address, my lkey
    request = v.wr.SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge])
    request.set_wr_rdma(remote["rkey"], remote["addr"] + 64)             # the peer's key, the peer's address
    qp.post_send(request)
    return request


# welcome.read-back: the learner's function READs the peer's bytes at byte 64 into back_mr, a second MR of theirs,
# waits for the completion and returns what landed. The check runs it on a fresh Pair whose peer holds NOTE at byte
# 64 and FILLER before it (so a READ from byte 0 shows), through a QP and a CQ that note what the learner posted and
# polled (so a result read before its completion is named, on any device: soft0 finishes a READ inside post_send,
# rxe a little later).
NOTE, FILLER = b"read me back!", b"-" * OFFSET


class _Noted:
    """The learner's QP or CQ, passed through, noting the WRs posted on it and the completions polled from it."""

    def __init__(self, real):
        self._real, self.posted, self.polled = real, [], []

    def post_send(self, wr, *args):
        self.posted.append(wr)
        return self._real.post_send(wr, *args)

    def poll(self, *args):
        n, wcs = self._real.poll(*args)
        self.polled.extend(wcs[:n])
        return n, wcs

    def __getattr__(self, name):   # everything else is the real object's
        return getattr(self._real, name)


READ_HINT = "As your WRITE, with opcode e.IBV_WR_RDMA_READ: which buffer does the SGE name now? Then wait for it."


@exercise("welcome.read-back", "Read it back with an RDMA READ", hints=[READ_HINT])
def _check_read_back(read_back, ctx, pd):
    from rdmalab.errors import status_name
    from rdmalab.lessons.fixtures import Pair
    e = v.enums
    if not callable(read_back):
        raise Wrong("answer with your function, as the cell does: lambda: my_read_back.")
    with Pair(ctx, pd) as pair, v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE) as back_mr:
        pair.b_mr.write(FILLER + NOTE, len(FILLER) + len(NOTE))
        qp, cq = _Noted(pair.a), _Noted(pair.cq_a)
        try:
            got = read_back(qp, cq, back_mr, len(NOTE), pair.b_end)
        except NotImplementedError:
            raise NotYet() from None
        except TimeoutError:
            raise Wrong("your wait for a completion timed out: nothing that you posted completed within 5 s.",
                        "An RDMA READ is opcode e.IBV_WR_RDMA_READ (a SEND would wait for a receive the peer never "
                        "posted), posted with qp.post_send(request).") from None
        if not qp.posted:
            if got is None:
                raise NotYet("nothing was posted yet.")
            raise Wrong("nothing was posted, so nothing was read.", "qp.post_send(request) hands the READ to the NIC.")
        unpolled = not cq.polled
        if unpolled:
            try:
                wc = rc.wait_for_completion(pair.cq_a, timeout=5)
            except TimeoutError:
                raise Wrong("no completion arrived within 5 s.", "Post an e.IBV_WR_RDMA_READ (a SEND would wait "
                            "for a receive the peer never posted).") from None
        else:
            wc = cq.polled[0]
        if wc.status == e.IBV_WC_REM_ACCESS_ERR:
            raise Wrong(f"the peer's NIC refused it: status {wc.status} ({status_name(wc.status)}).",
                        "set_wr_rdma takes the peer's key and address: remote['rkey'] (back_mr.lkey names only your "
                        "own buffer) and remote['addr'] + 64.")
        if wc.status in (e.IBV_WC_LOC_PROT_ERR, e.IBV_WC_LOC_QP_OP_ERR, e.IBV_WC_LOC_LEN_ERR):
            raise Wrong(f"your own NIC refused the SGE: status {wc.status} ({status_name(wc.status)}).",
                        "The SGE names where the READ's bytes land, in your memory: "
                        "v.wr.SGE(back_mr.buf, length, back_mr.lkey).")
        if wc.status != e.IBV_WC_SUCCESS:
            raise Wrong(f"it completed with status {wc.status} ({status_name(wc.status)}).", READ_HINT)
        if wc.opcode == e.IBV_WC_RDMA_WRITE:
            raise Wrong("it completed as an RDMA WRITE: you sent back_mr's bytes to the peer, over its own.",
                        "opcode=e.IBV_WR_RDMA_READ in the SendWR.")
        if wc.opcode != e.IBV_WC_RDMA_READ:
            raise Wrong(f"it completed as opcode {wc.opcode}, not an RDMA READ ({int(e.IBV_WC_RDMA_READ)}).",
                        "opcode=e.IBV_WR_RDMA_READ in the SendWR.")
        landed = back_mr.read(len(NOTE), 0)
        if landed == FILLER[:len(NOTE)]:
            raise Wrong(f"back_mr holds {landed!r}: the bytes at the start of the peer's buffer, not the ones at "
                        f"byte {OFFSET}.", "The remote address is remote['addr'] + 64.")
        if landed != NOTE and back_mr.read(len(NOTE), OFFSET) == NOTE:
            raise Wrong(f"the peer's bytes landed at byte {OFFSET} of back_mr, not at its start.",
                        "The + 64 belongs to the remote address (set_wr_rdma); the SGE starts at back_mr.buf.")
        if landed == bytes(len(NOTE)):
            raise Wrong("the READ completed, but back_mr is unchanged: its bytes landed in another buffer.",
                        "The SGE names where a READ's bytes land: v.wr.SGE(back_mr.buf, length, back_mr.lkey).")
        if landed != NOTE:
            raise Wrong(f"back_mr holds {landed!r}, not the peer's {NOTE!r}.",
                        "Read `length` bytes from remote['addr'] + 64 into back_mr.buf.")
        if unpolled:
            raise Wrong("you did not wait for the READ's completion: post_send returns at once, and the NIC fills "
                        "back_mr later (soft0 happens to be done by then; a real NIC rarely is). Only the completion "
                        "says the bytes are there.", "rc.wait_for_completion(cq) after post_send, then read back_mr.")
        if got != NOTE:
            raise Wrong(f"your function returned {got!r}, not the bytes that landed.",
                        "return back_mr.read(length, 0).")


@reference("welcome.read-back")
def _read_back():
    def my_read_back(qp, cq, back_mr, length, remote):
        e = v.enums
        sge = v.wr.SGE(back_mr.buf, length, back_mr.lkey)                 # where the bytes land: my buffer, my lkey
        request = v.wr.SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[sge])
        request.set_wr_rdma(remote["rkey"], remote["addr"] + 64)          # where they come from: the peer's
        qp.post_send(request)
        rc.wait_for_completion(cq)                                        # only now are they in back_mr
        return back_mr.read(length, 0)
    return my_read_back
