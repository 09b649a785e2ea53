"""Lesson 02, memory registration: its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference
from rdmalab.lessons.fixtures import Pair, one_sided


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
