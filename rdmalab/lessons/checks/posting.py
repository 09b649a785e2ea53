"""The posting lesson (posting): its exercises, each a check (raising Wrong with a hint) and a reference solution.

posting.one-doorbell: link 16 WRITEs into one chain, signal the last, post it with one post_send (below).

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


# posting.one-doorbell: the learner links CHAIN WRITEs (built for them, unsignaled and unlinked) into one chain
# through next_wr, signals the last, and posts the chain with one post_send: one doorbell. The check hands the
# function a QP that notes each post_send and which WRs were signaled when it was called, then waits for the one
# completion and reads what landed. It names: several post_sends, the chain posted from another WR than its first,
# no WR signaled (no completion would ever come), every WR or another than the last signaled, and a chain that
# stops early (WRs not linked). A chain's order cannot be read back from a real pyverbs WR (reading next_wr builds a
# new WR from the C struct), so the check judges what the device did: what landed and what completed.
CHAIN = 16
CHAIN_HINT = ("Each WR's next_wr is the WR after it; only the last one has IBV_SEND_SIGNALED in its send_flags; "
              "post_send is given the chain's first WR, once, after the links and the flag are set.")


def chain_of_writes(pair, count=CHAIN):
    """`count` 64-byte WRITEs, slot i of pair.a_mr to slot i of pair.b_mr, wr_id i, unsignaled and unlinked."""
    e = v.enums
    wr = v.wr
    wrs = []
    for i in range(count):
        w = wr.SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, send_flags=0,
                      sg=[wr.SGE(pair.a_mr.buf + i * SIZE, SIZE, pair.a_mr.lkey)])
        w.set_wr_rdma(pair.b_mr.rkey, pair.b_mr.buf + i * SIZE)
        wrs.append(w)
    return wrs


class NotingQP:
    """The learner's QP, passed through: notes each WR given to post_send, and which of `wrs` were signaled
    when the first was posted."""

    def __init__(self, qp, wrs):
        self._qp, self._wrs, self.posted, self.signaled = qp, wrs, [], None

    def post_send(self, wr, *args):
        if self.signaled is None:
            self.signaled = [i for i, w in enumerate(self._wrs) if w.send_flags & v.enums.IBV_SEND_SIGNALED]
        self.posted.append(wr)
        return self._qp.post_send(wr, *args)

    def __getattr__(self, name):
        return getattr(self._qp, name)


def doorbells(chain, pair, count=CHAIN):
    """The write() syscalls this thread made while `chain(qp, wrs)` posted `count` WRITEs on the lesson's pair
    (Soft-RoCE's doorbell is one: rdmalab.lessons.fixtures.post_writes counts the same way); waits for its
    completion."""
    from rdmalab.lessons.fixtures import _thread_writes
    wrs = chain_of_writes(pair, count)
    before = _thread_writes()
    chain(pair.a, wrs)
    after = _thread_writes()
    rc.wait_for_completion(pair.cq_a)
    return after - before


@exercise("posting.one-doorbell", f"{CHAIN} WRITEs, one chain, one doorbell",
          hints=["Link each WR to the next (next_wr), signal only the last, and post_send the first, once."])
def _check_one_doorbell(chain, ctx, pd):
    from rdmalab.lessons.fixtures import Pair
    e = v.enums
    if not callable(chain):
        raise Wrong(f"answer with a function my_chain(qp, wrs), not {type(chain).__name__}.")
    with Pair(ctx, pd, max_send_wr=CHAIN, sq_sig_all=0) as pair:
        sent = b"".join(b"%-63d\n" % i for i in range(CHAIN))   # WRITE i carries the number i in its 64 bytes
        pair.a_mr.write(sent, len(sent))
        pair.b_mr.write(bytes(len(sent)), len(sent))
        wrs = chain_of_writes(pair)
        qp = NotingQP(pair.a, wrs)
        try:
            chain(qp, wrs)
        except NotImplementedError:
            raise NotYet() from None
        except v.pyverbs_error.PyverbsRDMAError as error:
            raise Wrong(f"post_send failed: {error}", CHAIN_HINT) from None
        if not qp.posted:
            raise Wrong("nothing was posted.", "Ring the doorbell once, at the end: qp.post_send(wrs[0]).")
        if len(qp.posted) > 1:
            raise Wrong(f"you called post_send {len(qp.posted)} times: each call rings the NIC's doorbell (a "
                        "write() syscall on Soft-RoCE, an MMIO store on mlx5). Link the WRs, then post the first "
                        "one, once.", CHAIN_HINT)
        head = next((i for i, w in enumerate(wrs) if w is qp.posted[0]), None)
        if head != 0:
            raise Wrong(f"you posted {'a WR of your own' if head is None else f'wrs[{head}]'}: post_send follows "
                        "next_wr from the WR it is given, so it takes the chain's first, wrs[0].", CHAIN_HINT)
        signaled, last = qp.signaled, CHAIN - 1
        if not signaled:
            raise Wrong("no WR was signaled when you posted: no completion would ever say the chain is done, so "
                        "you could never reuse its buffers (and on mlx5 its slots would stay held).", CHAIN_HINT)
        if len(signaled) == CHAIN:
            raise Wrong(f"all {CHAIN} WRs are signaled: {CHAIN} completions to poll where one does. A send queue "
                        "completes in order: the last WR's completion says every WR before it is done.", CHAIN_HINT)
        if last not in signaled:
            raise Wrong(f"you signaled wrs{signaled}, not the last one, wrs[{last}]: a completion says nothing "
                        "of the WRs after it.", CHAIN_HINT)
        if len(signaled) > 1:
            raise Wrong(f"you signaled wrs{signaled}: the last one's completion alone says all {CHAIN} are done; "
                        "signal only it.", CHAIN_HINT)
        try:
            wc = rc.wait_for_completion(pair.cq_a, timeout=2)
        except TimeoutError:
            got = pair.b_mr.read(len(sent), 0)
            landed = [i for i in range(CHAIN) if got[i * SIZE:(i + 1) * SIZE] == sent[i * SIZE:(i + 1) * SIZE]]
            raise Wrong(f"the last WRITE never completed, and only WRITE(s) {landed} landed: the chain ended before "
                        "it. Each WR must point at the next.", CHAIN_HINT) from None
        if wc.status != e.IBV_WC_SUCCESS or wc.wr_id != last:
            raise Wrong(f"the completion came back with status {wc.status}, wr_id {wc.wr_id}.", CHAIN_HINT)
        got = pair.b_mr.read(len(sent), 0)
        missing = [i for i in range(CHAIN) if got[i * SIZE:(i + 1) * SIZE] != sent[i * SIZE:(i + 1) * SIZE]]
        if missing:
            raise Wrong(f"the last WRITE completed, but WRITE(s) {missing} never landed: the chain skipped them.",
                        CHAIN_HINT)


@reference("posting.one-doorbell")
def _one_doorbell():
    def my_chain(qp, wrs):
        e = v.enums
        for w, following in zip(wrs, wrs[1:]):
            w.next_wr = following                      # each WR points at the next
        wrs[-1].send_flags = e.IBV_SEND_SIGNALED       # one completion: when it comes, all of them are done
        qp.post_send(wrs[0])                           # one doorbell for the whole chain
    return my_chain
