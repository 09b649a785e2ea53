"""The memory registration lesson (memory-registration): its exercises, each a check (raising Wrong
with a hint) and a reference solution."""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.lessons.explain import explain
from rdmalab.lessons.fixtures import Pair, one_sided
from rdmalab import verbs as v
from rdmalab.verbs import rc

SECRET = b"weights!"   # what the check puts in the learner's buffer before a peer tries to read it


def fetch_and_add(pair, target, add=0):
    """A peer's ATOMIC FETCH_AND_ADD of `add` on the first 8 bytes of `target`: the old value lands in
    the peer's own MR. Adding 0 changes nothing, so it is a READ of 8 bytes by another name.
    Returns (its completion, the 8 bytes the peer got back)."""
    e = v.enums
    wr = v.wr
    pair.a_mr.write(bytes(8), 8)
    request = wr.SendWR(wr_id=3, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                        sg=[wr.SGE(pair.a_mr.buf, 8, pair.a_mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    request.set_wr_atomic(target.rkey, target.buf, add, 0)
    pair.a.post_send(request)
    return rc.wait_for_completion(pair.cq_a), pair.a_mr.read(8, 0)


@exercise("memory-registration.write-not-read", "Register 4 KiB that a peer may RDMA WRITE into but not read back",
          hints=["Access flags are OR-ed IBV_ACCESS_* values; remote write also needs local write "
                 "(the kernel refuses REMOTE_WRITE without LOCAL_WRITE with errno 22)."])
def _check_write_not_read(mr, ctx, pd):
    e = v.enums
    if mr.length < 4096:
        raise Wrong(f"the MR is {mr.length} bytes; register at least 4096.")
    with Pair(ctx, pd) as pair:
        wc = one_sided(pair, e.IBV_WR_RDMA_WRITE, target=mr)
        if wc.status != e.IBV_WC_SUCCESS:
            raise Wrong(f"a peer's RDMA WRITE into it completed with status {wc.status} (REM_ACCESS_ERR is 10): "
                        f"{explain(wc, pair.posted, pair.a).said}",
                        "Without IBV_ACCESS_REMOTE_WRITE the target's NIC refuses every peer's WRITE into the MR.")
    with Pair(ctx, pd) as pair:
        wc = one_sided(pair, e.IBV_WR_RDMA_READ, target=mr)
        if wc.status == e.IBV_WC_SUCCESS:
            raise Wrong("a peer could RDMA READ it.", "Leave IBV_ACCESS_REMOTE_READ out of the access flags.")
    mr.write(SECRET, len(SECRET))
    with Pair(ctx, pd) as pair:
        wc, got = fetch_and_add(pair, mr)
    mr.write(bytes(len(SECRET)), len(SECRET))
    if wc.status == e.IBV_WC_SUCCESS:
        raise Wrong(f"a peer read your buffer anyway: an atomic FETCH_AND_ADD of 0 returned its first 8 bytes, "
                    f"{got!r}.",
                    "IBV_ACCESS_REMOTE_ATOMIC lets a peer FETCH_AND_ADD 0 (or CMP_AND_SWP) any aligned 8-byte word: "
                    "the old value comes back and nothing changes, so 8 bytes at a time it reads the whole "
                    "buffer. Leave REMOTE_ATOMIC out too.")


@reference("memory-registration.write-not-read")
def _write_not_read(ctx, pd):
    e = v.enums
    mr = v.mr
    return mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)


# memory-registration.your-buffer: a training job registers the memory its tensors already live in, so that a peer
# reaches them with no copy. The learner registers `weights` (page-aligned memory of theirs, as the lesson's timing
# cell registers its buffers) for a peer that may READ it and nothing more. The check looks at where the MR is
# (the weights' own address, not a buffer pyverbs allocated) and how long, then lets peers try a READ (it must
# return the weights), a WRITE and an atomic (both must be refused); the WRITE and the FETCH_AND_ADD of 0 carry the
# weights' own bytes, so even a wrong answer leaves them as they were. A wrong MR is deregistered before the check
# says so: the lesson then registers the same pages with the reference (soft0 gives pages one registration at a time).
YOURS_HINT = "The timing cell registers its buffers with address=; a reader needs one remote access flag."


@exercise("memory-registration.your-buffer", "Your weights, with no copy, for a reader", hints=[YOURS_HINT])
def _check_your_buffer(mr, pd, weights, ctx):
    if not all(hasattr(mr, name) for name in ("buf", "length", "rkey", "close")):
        raise Wrong(f"your function returned {type(mr).__name__}: return the MR it registered.", YOURS_HINT)
    try:
        _judge_your_buffer(mr, pd, weights, ctx)
    except (Wrong, NotYet):
        mr.close()
        raise


def _judge_your_buffer(mr, pd, weights, ctx):
    e = v.enums
    if mr.buf != weights.ctypes.data:
        raise Wrong(f"the MR is at {mr.buf:#x}, a new buffer pyverbs allocated; your weights are at "
                    f"{weights.ctypes.data:#x}. A peer would read that buffer's zeros, and you would copy the weights "
                    "into it: the very copy RDMA is there to avoid.",
                    "address=weights.ctypes.data registers the weights' own memory.")
    if mr.length < weights.nbytes:
        raise Wrong(f"the MR covers {mr.length} of the weights' {weights.nbytes} bytes"
                    + (": len() counts elements (4 bytes each here), not bytes." if mr.length == len(weights) else "."),
                    "The length is weights.nbytes.")
    size = min(weights.nbytes, 4096)   # what a Pair's MR holds
    with Pair(ctx, pd) as pair:
        wc = one_sided(pair, e.IBV_WR_RDMA_READ, length=size, target=mr)
        if wc.status != e.IBV_WC_SUCCESS:
            raise Wrong(f"a peer's RDMA READ of it completed with status {wc.status} (REM_ACCESS_ERR is 10): "
                        f"{explain(wc, pair.posted, pair.a).said}",
                        "Without IBV_ACCESS_REMOTE_READ the target's NIC refuses every peer's READ.")
        if pair.a_mr.read(size, 0) != weights.tobytes()[:size]:
            raise Wrong("a peer's READ succeeded but did not bring back your weights.",
                        "v.mr.MR(pd, weights.nbytes, access, address=weights.ctypes.data).")
    first = weights.tobytes()[:8]
    with Pair(ctx, pd) as pair:
        pair.a_mr.write(first, 8)   # the weights' own first bytes: a WRITE that lands changes nothing
        wc = one_sided(pair, e.IBV_WR_RDMA_WRITE, target=mr)
        if wc.status == e.IBV_WC_SUCCESS:
            raise Wrong("a peer could RDMA WRITE into your weights.",
                        "Leave IBV_ACCESS_REMOTE_WRITE out: a reader needs IBV_ACCESS_REMOTE_READ only.")
    with Pair(ctx, pd) as pair:
        wc, _ = fetch_and_add(pair, mr)
        if wc.status == e.IBV_WC_SUCCESS:
            raise Wrong("a peer could run atomics on your weights: a FETCH_AND_ADD (here of 0) or a CMP_AND_SWP "
                        "changes 8 bytes at a time.",
                        "Leave IBV_ACCESS_REMOTE_ATOMIC out: a reader needs IBV_ACCESS_REMOTE_READ only.")


@reference("memory-registration.your-buffer")
def _your_buffer(pd, weights):
    e = v.enums
    return v.mr.MR(pd, weights.nbytes, e.IBV_ACCESS_REMOTE_READ, address=weights.ctypes.data)
