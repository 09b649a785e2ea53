"""The memory registration lesson (memory-registration): its exercises, each a check (raising Wrong
with a hint) and a reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference
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
