"""The posting lesson (posting): its exercise, a check (raising Wrong with a hint) and a reference solution.

posting.small-queue: post COUNT WRITEs through a send queue of DEPTH slots with selective signalling.
The learner's function never touches the QP: it calls post(i, signaled) and wait(), so the check sees
every post and every poll, and holds it to the rule of a hardware NIC. On mlx5 a WR keeps its
send-queue slot until a completion at or after it is polled (the provider moves the queue's tail when
it polls: providers/mlx5/cq.c), and post_send fails with ENOMEM once every slot is held: at least
max_send_wr of them (ibv_create_qp(3): the device may give more than asked, never fewer). soft0 and
Soft-RoCE free a slot as soon as its WR is done, polled or not: an answer that never signals runs
there and fails on hardware. So the check counts, rather than waiting for the device to refuse.
"""
from collections import deque

from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab import verbs as v
from rdmalab.verbs import rc

COUNT, DEPTH, SIZE = 64, 16, 64   # 64 WRITEs of 64 bytes: the 4 KiB of a Pair's MR
HINT = ("Signal every k-th WRITE (k <= 16, say 8) and the last one. Before the 17th WR after the last "
        "completion you waited for, wait() for an older signaled one: it frees its slot and every slot before "
        "it. wait() only as often as you signaled.")


class SmallQueue:
    """A Pair whose `a` QP has a send queue of `depth` slots, and the post() and wait() the learner's
    function calls: each keeps count of the slots a hardware NIC would hold, and refuses (Wrong) the
    post that would overrun them or the wait that no signaled WR can end."""

    def __init__(self, pair, count=COUNT, depth=DEPTH):
        self.pair, self.count, self.depth = pair, count, depth
        self.posted = 0          # WRITEs posted so far (in order: WRITE i is the i-th)
        self.freed = 0           # WRITEs whose slot is free: those up to the last signaled one polled
        self.unpolled = deque()  # signaled WRITEs whose completion has not been polled yet
        self.completions = self.most_held = 0

    def post(self, i, signaled=False):
        """Post WRITE number i (slot i of a's MR to slot i of b's), with a completion if `signaled`."""
        e = v.enums
        wr = v.wr
        if i != self.posted or i >= self.count:
            raise Wrong(f"post({i}) after {self.posted} posts: post WRITEs 0 to {self.count - 1}, in order, "
                        "each once.")
        held = self.posted - self.freed
        if held >= self.depth:
            raise Wrong(f"WRITE {i} overruns the send queue: its {self.depth} slots are held by WRITEs "
                        f"{self.freed} to {i - 1}, because no completion at or after them has been polled. On a "
                        "hardware NIC (mlx5) a post past the queue's slots fails with ENOMEM; soft0 and Soft-RoCE "
                        "free a slot when its WR is done, so here it may go through, and fail in a cluster.", HINT)
        pair = self.pair
        request = wr.SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                            sg=[wr.SGE(pair.a_mr.buf + i * SIZE, SIZE, pair.a_mr.lkey)],
                            send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
        request.set_wr_rdma(pair.b_mr.rkey, pair.b_mr.buf + i * SIZE)
        try:
            pair.a.post_send(request)
        except v.pyverbs_error.PyverbsRDMAError as error:
            raise Wrong(f"post_send of WRITE {i} failed: {error}", HINT) from None
        self.posted += 1
        self.most_held = max(self.most_held, held + 1)
        if signaled:
            self.unpolled.append(i)

    def wait(self):
        """Poll the next completion: that of the oldest signaled WRITE not polled yet."""
        e = v.enums
        if not self.unpolled:
            raise Wrong(f"wait() after {self.posted} posts, with no signaled WRITE left to complete: unsignaled "
                        "WRs make no completion, so this wait would never end (on any device).", HINT)
        wc = rc.wait_for_completion(self.pair.cq_a)
        i = self.unpolled.popleft()
        if wc.status != e.IBV_WC_SUCCESS or wc.wr_id != i:
            raise Wrong(f"the completion of WRITE {i} came back with status {wc.status}, wr_id {wc.wr_id}.")
        self.freed, self.completions = i + 1, self.completions + 1


def post_through_small_queue(post_all, ctx, pd, count=COUNT, depth=DEPTH):
    """Run `post_all(post, wait, count, depth)` on a fresh Pair, check what it did and what arrived;
    returns {"writes", "completions", "most_held", "depth"} or raises Wrong (NotYet: the skeleton)."""
    from rdmalab.lessons.fixtures import Pair
    with Pair(ctx, pd, max_send_wr=depth, sq_sig_all=0) as pair:
        sent = b"".join(b"%-63d\n" % i for i in range(count))   # WRITE i carries the number i in its 64 bytes
        pair.a_mr.write(sent, len(sent))
        pair.b_mr.write(bytes(len(sent)), len(sent))
        queue = SmallQueue(pair, count, depth)
        try:
            post_all(queue.post, queue.wait, count, depth)
        except NotImplementedError:
            raise NotYet() from None
        if queue.posted < count:
            raise Wrong(f"only {queue.posted} of the {count} WRITEs were posted.")
        if queue.freed < count:
            raise Wrong(f"WRITEs {queue.freed} to {count - 1} were never confirmed: until a completion at or after "
                        "them is polled, you do not know they arrived, their buffers may not be reused, and on "
                        "hardware they still hold their slots. Signal the last WRITE and wait() for it.", HINT)
        if queue.completions > count // 4:
            raise Wrong(f"{queue.completions} completions for {count} WRITEs: correct, but every completion costs "
                        f"the NIC a write to the CQ and you a poll. Signal at most one WRITE in 4.", HINT)
        got = pair.b_mr.read(len(sent), 0)
        if got != sent:
            first = next(j for j in range(len(sent)) if got[j] != sent[j])
            raise Wrong(f"byte {first} (of WRITE {first // SIZE}) did not arrive: a completion was polled, yet "
                        f"the target holds {got[first:first + 8]!r} there.")
    return {"writes": count, "completions": queue.completions, "most_held": queue.most_held, "depth": depth}


@exercise("posting.small-queue", f"Post {COUNT} WRITEs through a send queue of {DEPTH} slots, with few completions",
          hints=[HINT])
def _check_small_queue(post_all, ctx, pd):
    if not callable(post_all):
        raise Wrong(f"answer with a function post_all(post, wait, count, depth), not {type(post_all).__name__}.")
    post_through_small_queue(post_all, ctx, pd)


@reference("posting.small-queue")
def _small_queue():
    def post_all(post, wait, count, depth):
        every, unpolled = depth // 2, 0            # a completion for every 8th WRITE
        for i in range(count):
            signaled = i % every == every - 1 or i == count - 1
            post(i, signaled)
            unpolled += signaled
            if unpolled == 2:                      # two batches in the queue: retire the older one,
                wait()                             # which frees its slots and all before them
                unpolled -= 1
        for _ in range(unpolled):                  # the last batch: wait until every WRITE is done
            wait()
    return post_all
