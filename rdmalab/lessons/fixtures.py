"""What the lessons demonstrate on: QP state diagrams, connected pairs, the queue-pairs lesson's QPLab,
failures on demand, its polling-or-sleeping measurement, and the posting lesson's doorbell count. The
point of each lesson stays in the notebook, in plain pyverbs; the plumbing (rdmalab.verbs.rc.Resources) lives here.
"""
import statistics
import time
from typing import NamedTuple

import matplotlib.pyplot as plt

from rdmalab.errors import QP_STATE_NAMES
from rdmalab import verbs as v
from rdmalab.verbs import choose_route, rc, route_of
from rdmalab.verbs.rc import Resources

# ---------------------------------------------------------------- the QP state machine

STATE_NAMES = QP_STATE_NAMES   # (the lessons' name for rdmalab.errors' table)
# What each forward step must carry in its attribute mask (the kernel's table, ib_modify_qp_is_ok, for RC).
REQUIRED = {
    ("RESET", "INIT"): ["IBV_QP_STATE", "IBV_QP_PKEY_INDEX", "IBV_QP_PORT", "IBV_QP_ACCESS_FLAGS"],
    ("INIT", "RTR"): ["IBV_QP_STATE", "IBV_QP_AV", "IBV_QP_PATH_MTU", "IBV_QP_DEST_QPN", "IBV_QP_RQ_PSN",
                      "IBV_QP_MAX_DEST_RD_ATOMIC", "IBV_QP_MIN_RNR_TIMER"],
    ("RTR", "RTS"): ["IBV_QP_STATE", "IBV_QP_SQ_PSN", "IBV_QP_TIMEOUT", "IBV_QP_RETRY_CNT", "IBV_QP_RNR_RETRY",
                     "IBV_QP_MAX_QP_RD_ATOMIC"],
}
# called with a lesson's QPs just before Pair or QPLab closes them: lessons.nic_view stops a view of them
# there (on real pyverbs a QP read after it was closed crashes the kernel, so the view must stop first)
BEFORE_CLOSE = []

MEANING = {"RESET": "just created", "INIT": "may post receives", "RTR": "ready to receive",
           "RTS": "ready to send", "ERR": "flushes everything"}


def state_of(qp):
    """The state the device reports (query), as a name."""
    e = v.enums
    attr, _ = qp.query(e.IBV_QP_STATE)
    return STATE_NAMES.get(attr.qp_state, str(attr.qp_state))


def draw_qp_states(current=None, ax=None):
    """RESET -> INIT -> RTR -> RTS (and ERR), each arrow labelled with what modify() must set;
    `current` (a state name or a QP, which is queried) is highlighted."""
    if current is not None and not isinstance(current, str):
        current = state_of(current)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.2))
    xs = {"RESET": 0, "INIT": 1, "RTR": 2, "RTS": 3}
    for name, x in xs.items():
        on = name == current
        ax.add_patch(plt.Rectangle((x * 3.2, 1.6), 2, 1, facecolor="#1a7f37" if on else "#f6f8fa",
                                   edgecolor="#1f2328", linewidth=2 if on else 1))
        ax.text(x * 3.2 + 1, 2.25, name, ha="center", va="center", fontsize=12, weight="bold",
                color="white" if on else "#1f2328")
        ax.text(x * 3.2 + 1, 1.85, MEANING[name], ha="center", va="center", fontsize=8,
                color="white" if on else "#57606a")
    for (a, b), masks in REQUIRED.items():
        x0 = xs[a] * 3.2 + 2
        ax.annotate("", (x0 + 1.2, 2.1), (x0, 2.1), arrowprops=dict(arrowstyle="->", lw=1.5))
        ax.text(x0 + 0.6, 1.45, "\n".join(m.replace("IBV_QP_", "") for m in masks[1:]), ha="center", va="top",
                fontsize=7, family="monospace")
    on = current == "ERR"
    ax.add_patch(plt.Rectangle((4.8, 3.2), 2, 0.8, facecolor="#cf222e" if on else "#fff1f0", edgecolor="#cf222e"))
    ax.text(5.8, 3.6, "ERR (any error)", ha="center", va="center", fontsize=10, color="white" if on else "#cf222e")
    ax.set_xlim(-0.3, 12.3)
    ax.set_ylim(-0.6, 4.2)
    ax.axis("off")
    ax.set_title(f"RC queue pair states{'' if current is None else f': this QP is in {current}'}")
    return ax


# ---------------------------------------------------------------- pairs of connected QPs for demonstrations

class Posted(NamedTuple):
    """What one_sided() posted, as lessons.explain reads it: a real pyverbs SendWR does not give its rkey,
    remote address or SGEs back (soft0's does)."""
    opcode: int
    sges: list          # (addr, length, lkey) each
    rkey: int
    remote_addr: int


class Pair:
    """Two RC QPs of one PD, connected to each other in this process, with a 4 KiB MR each.
    `a` sends, `b` receives; `b_mr` is what a's one-sided operations target. max_inline_data: how many
    bytes a WR may carry inline (IBV_SEND_INLINE); max_send_wr, sq_sig_all: the QPs' send queue (with
    sq_sig_all=0 only WRs flagged IBV_SEND_SIGNALED complete)."""

    posted = None   # what one_sided() last posted on a (a Posted)

    def __init__(self, ctx, pd, b_access=None, rnr_retry=7, max_inline_data=0, max_send_wr=8, sq_sig_all=1):
        e = v.enums
        full = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
                | e.IBV_ACCESS_REMOTE_ATOMIC)
        side = dict(ctx=ctx, pd=pd, cq_depth=32, max_send_wr=max_send_wr, max_recv_wr=8,   # a CQ, a QP, a 4 KiB MR
                    max_inline_data=max_inline_data, sq_sig_all=sq_sig_all)
        self._a = self._b = None
        try:
            self._a = Resources(access=full, **side)
            self._b = Resources(access=full if b_access is None else b_access, **side)
            self.a, self.cq_a, self.a_mr = self._a.qp, self._a.cq, self._a.mr
            self.b, self.cq_b, self.b_mr = self._b.qp, self._b.cq, self._b.mr
            self.a_end, self.b_end = self._a.endpoint(mr=self.a_mr), self._b.endpoint(mr=self.b_mr)
            self._a.connect(self.b_end, rnr_retry=rnr_retry)
            self._b.connect(self.a_end, access=full)   # b_access limits b's MR, not its QP
        except BaseException:
            self.close()
            raise

    def close(self):
        _closing(self._a, self._b)
        for side in (self._a, self._b):
            if side is not None:
                side.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def one_sided(pair, opcode, length=8, target=None, rkey=None, remote_offset=0, lkey=None):
    """Post one signaled RDMA operation from pair.a into `target` (default pair.b_mr), optionally with a
    wrong rkey, offset or lkey; returns its completion (what it posted is pair.posted, for lessons.explain)."""
    e = v.enums
    wr = v.wr
    target = target or pair.b_mr
    sge = wr.SGE(pair.a_mr.buf, length, pair.a_mr.lkey if lkey is None else lkey)
    request = wr.SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED)
    request_rkey = target.rkey if rkey is None else rkey
    request.set_wr_rdma(request_rkey, target.buf + remote_offset)
    pair.posted = Posted(opcode, [(sge.addr, length, sge.lkey)], request_rkey, target.buf + remote_offset)
    pair.a.post_send(request)
    return rc.wait_for_completion(pair.cq_a)


class QPLab:
    """The queue-pairs lesson's bench: `qp`, yours, still in RESET, with a 4 KiB MR `mr` the peer may write and read;
    `peer`, already connected to it and waiting; their endpoints `local` and `remote` (as exchanged out
    of band), and `route` (port, GID index, MTU, link layer). The peer gives up on a request nobody
    acknowledges after PEER_RETRIES resends (RETRY_EXC_ERR), so a wrong address or PSN shows at once."""

    PEER_RETRIES = 2
    posted = None   # what from_peer() last posted on the peer's QP (a Posted, for lessons.explain)

    def __init__(self, ctx, pd):
        e = v.enums
        self.ctx, self.route = ctx, route_of(ctx, choose_route().device)
        side = dict(ctx=ctx, pd=pd, cq_depth=16, max_send_wr=4, max_recv_wr=4)   # a CQ, a QP, a 4 KiB MR
        self._mine = self._theirs = None
        try:
            self._mine = Resources(access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                                   | e.IBV_ACCESS_REMOTE_READ, **side)
            self._theirs = Resources(**side)
            self.qp, self.cq, self.mr = self._mine.qp, self._mine.cq, self._mine.mr
            self.peer, self.peer_cq, self.peer_mr = self._theirs.qp, self._theirs.cq, self._theirs.mr
            self.local, self.remote = self._mine.endpoint(mr=self.mr), self._theirs.endpoint(mr=self.peer_mr)
            self.connect_peer()
        except BaseException:
            self.close()
            raise

    def connect_peer(self):
        """(Re)connect the peer's QP to yours, from whatever state it is in (after an error: ERR)."""
        e = v.enums
        qpmod = v.qp
        self.peer.modify(qpmod.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        self._theirs.connect(self.local, retry_cnt=self.PEER_RETRIES)

    def send_and_receive(self, payload, timeout=10):
        """The peer posts a receive; your QP SENDs `payload`. Returns your send completion; on success
        the peer's buffer holds the payload."""
        e = v.enums
        wr = v.wr
        self.peer.post_recv(wr.RecvWR(wr_id=2, num_sge=1, sg=[wr.SGE(self.peer_mr.buf, 4096, self.peer_mr.lkey)]))
        self.mr.write(payload, len(payload))
        self.qp.post_send(wr.SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1,
                                    sg=[wr.SGE(self.mr.buf, len(payload), self.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED))
        sent = rc.wait_for_completion(self.cq, timeout=timeout)
        if sent.status == e.IBV_WC_SUCCESS:
            rc.wait_for_completion(self.peer_cq, timeout=timeout)
        return sent

    def from_peer(self, opcode, payload=b"", timeout=10):
        """The peer's QP sends to yours: a SEND of `payload` (into a receive posted on your QP), an RDMA
        WRITE of `payload` into your MR, or an RDMA READ of len(payload) bytes from it. Returns the peer's
        completion; after a READ the bytes read are at the start of the peer's MR."""
        e = v.enums
        wr = v.wr
        length = len(payload)
        if opcode == e.IBV_WR_SEND:
            self.qp.post_recv(wr.RecvWR(wr_id=3, num_sge=1, sg=[wr.SGE(self.mr.buf + 2048, 2048, self.mr.lkey)]))
        self.peer_mr.write(bytes(length) if opcode == e.IBV_WR_RDMA_READ else payload, length)
        request = wr.SendWR(wr_id=4, opcode=opcode, num_sge=1, sg=[wr.SGE(self.peer_mr.buf, length, self.peer_mr.lkey)],
                            send_flags=e.IBV_SEND_SIGNALED)
        if opcode != e.IBV_WR_SEND:
            request.set_wr_rdma(self.local["rkey"], self.local["addr"])
        self.posted = Posted(opcode, [(self.peer_mr.buf, length, self.peer_mr.lkey)], self.local["rkey"],
                             self.local["addr"])   # (for lessons.explain)
        self.peer.post_send(request)
        done = rc.wait_for_completion(self.peer_cq, timeout=timeout)
        if opcode == e.IBV_WR_SEND and done.status == e.IBV_WC_SUCCESS:
            rc.wait_for_completion(self.cq, timeout=timeout)
        return done

    def close(self):
        _closing(self._mine, self._theirs)
        for side in (self._mine, self._theirs):
            if side is not None:
                side.close()


def _closing(*sides):
    qps = [qp for side in sides if side is not None for qp in side.qps]
    for hook in BEFORE_CLOSE:
        hook(qps)


# ---------------------------------------------------------------- polling or sleeping (posting)

def wait_for_sends(target, qp, cq, mr, messages=20, gap_s=0.005, channel=None):
    """The target process SENDs `messages` small messages to `qp`, `gap_s` apart; this thread waits
    for each one, by busy polling `cq` (channel None: what NCCL and perftest do) or by sleeping on
    completion events through `channel`. Returns the median latency from the target's post to our
    seeing the completion (us), and the CPU this thread used per message (us)."""
    wr = v.wr
    receive = wr.RecvWR(wr_id=9, num_sge=1, sg=[wr.SGE(mr.buf + mr.length // 2, 64, mr.lkey)])
    for _ in range(min(messages, 4)):
        qp.post_recv(receive)
    seen, cpu = [], time.thread_time()
    target.start_sending(messages, gap_s)
    for i in range(messages):
        if channel is None:
            n = 0
            while not n:
                n, wcs = cq.poll(1)
        else:
            rc.wait_for_event(cq, channel)
        seen.append(time.monotonic())
        if i + 4 < messages:
            qp.post_recv(receive)
    cpu = time.thread_time() - cpu
    posted = target.sent_times()
    return {"how": "busy polling" if channel is None else "completion events",
            "latency_us": statistics.median(s - p for s, p in zip(seen, posted)) * 1e6,
            "cpu_us_per_message": cpu / messages * 1e6}



def poll_or_sleep(ctx, pd, messages=40, gap_s=0.005):
    """The queue-pairs lesson's comparison: another process (the one-sided lesson's RemoteBuffer) SENDs `messages` small
    messages `gap_s` apart to a QP of ours, and we wait for them twice, busy polling our CQ, then
    sleeping on completion events. Returns {"busy polling": {...}, "completion events": {...}}, each
    as wait_for_sends() measures it."""
    from rdmalab.lessons.target import RemoteBuffer
    e = v.enums
    ours = rc.Resources(access=e.IBV_ACCESS_LOCAL_WRITE, events=True, ctx=ctx, pd=pd)
    try:
        with RemoteBuffer() as target:
            mine = ours.endpoint(mr=ours.mr)
            ours.connect(target.endpoint)
            target.connect(mine)
            return {r["how"]: r for r in (wait_for_sends(target, ours.qp, ours.cq, ours.mr, messages, gap_s, how)
                                          for how in (None, ours.channel))}
    finally:
        ours.close()


def post_writes(qp, cq, mr, remote, count=16, chained=False):
    """The posting lesson's doorbell count: `count` 64-byte WRITEs of `mr` into `remote` (an endpoint with rkey
    and addr), the last one signaled, posted one post_send each or as one chain linked by next_wr.
    Returns the write() syscalls this thread made meanwhile (Soft-RoCE's doorbell is one; the notebook
    kernel's other threads write to their sockets at any time, so they are not counted)."""
    e = v.enums
    wr = v.wr
    wrs = []
    for i in reversed(range(count)):               # built back to front: each WR points at the next
        w = wr.SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[wr.SGE(mr.buf, 64, mr.lkey)],
                      send_flags=e.IBV_SEND_SIGNALED if i == count - 1 else 0, next_wr=wrs[0] if chained and wrs else None)
        w.set_wr_rdma(remote["rkey"], remote["addr"] + 2048)
        wrs.insert(0, w)
    before = _thread_writes()
    for w in wrs[:1] if chained else wrs:
        qp.post_send(w)
    after = _thread_writes()
    rc.wait_for_completion(cq)
    return after - before


def _thread_writes():
    """write() syscalls made by the calling thread so far (Linux's /proc/thread-self/io, syscw)."""
    with open("/proc/thread-self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscw:"))
