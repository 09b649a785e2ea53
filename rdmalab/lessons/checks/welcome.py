"""The welcome lesson (welcome): its exercise, a check (raising Wrong with a hint) and a reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference
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
