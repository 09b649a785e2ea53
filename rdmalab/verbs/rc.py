"""Connecting RC queue pairs, the part of every lesson that is plumbing, not the point.

Each side publishes its endpoint, `(qp_num, psn, gid, lid)` plus whatever memory it exposes
`(rkey, addr)`, over any side channel; then connect() walks its QP RESET -> INIT -> RTR -> RTS
with ibv_rc_pingpong's values (below) on the route rdmalab.verbs.route_of() picks: the first active
port, its routable GID, its active MTU. Resources opens and closes everything one side needs.
Importing it chooses no provider: each function reads the provider's modules (verbs.enums, verbs.addr, ...)
when it is called.
"""
import random

from rdmalab import verbs
from rdmalab.proc import waiting
from rdmalab.verbs.route import route_of

# The connection's constants: ibv_rc_pingpong's values (rdma-core's tests/base.py uses them too).
MIN_RNR_TIMER = 12      # RTR: a SEND that finds no receive posted is told to come back in 0.64 ms
MAX_DEST_RD_ATOMIC = 1  # RTR: READs and atomics a peer may have outstanding at this QP
TIMEOUT = 14            # RTS: wait 4.096 us * 2**14 = 67 ms for an ACK, then resend
RETRY_CNT = 7           # RTS: resends of an unacknowledged request (the spec: 7 resends, then RETRY_EXC_ERR;
                        #      rxe and soft0 read 7 as forever)
RNR_RETRY = 7           # RTS: resends of a SEND that found no receive posted (7: forever)
MAX_RD_ATOMIC = 1       # RTS: READs and atomics this QP may have outstanding
HOP_LIMIT = 64          # the routed (GRH) header's TTL


def endpoint(ctx, qp, mr=None, psn=None):
    """What a peer needs to reach this QP (and this MR): a plain dict, ready to send as JSON. `gid` addresses
    it on RoCE (and across InfiniBand subnets), `lid` on an InfiniBand subnet (0 on Ethernet ports)."""
    route = route_of(ctx, "this device")
    info = {"qp_num": qp.qp_num, "psn": random.getrandbits(24) if psn is None else psn,
            "gid": route.gid, "lid": ctx.query_port(route.port).lid}
    if mr is not None:
        info.update(rkey=mr.rkey, addr=mr.buf)
    return info


def address_vector(route, remote):
    """How to reach the peer: on RoCE (an Ethernet port) by its GID, in a routed header (is_global=1); on an
    InfiniBand subnet by its LID (the subnet manager assigns it). NCCL chooses the same way."""
    addr = verbs.addr
    if route.link_layer == verbs.enums.IBV_LINK_LAYER_INFINIBAND:
        return addr.AHAttr(port_num=route.port, is_global=0, dlid=remote.get("lid", 0))
    return addr.AHAttr(port_num=route.port, is_global=1, gr=addr.GlobalRoute(
        dgid=addr.GID(remote["gid"]), sgid_index=route.gid_index, hop_limit=HOP_LIMIT))


def connect(ctx, qp, local, remote, access=None, rnr_retry=RNR_RETRY, retry_cnt=RETRY_CNT, path_mtu=None):
    """Bring `qp` to RTS, connected to `remote` (its endpoint dict); `local` is this QP's own endpoint.
    access: what the peer may do through `qp` (default IBV_ACCESS_REMOTE_WRITE);
    rnr_retry: how often a SEND that finds no posted receive is retried (7: forever, 0: fail at once);
    retry_cnt: how often a request nobody acknowledges is resent before RETRY_EXC_ERR;
    path_mtu: the largest packet payload (an IBV_MTU_* value; default the port's active MTU: both sides
    must use the same)."""
    route = route_of(ctx, "this device")
    a = verbs.qp.QPAttr(port_num=route.port, path_mtu=route.path_mtu if path_mtu is None else path_mtu)
    a.pkey_index, a.qp_access_flags = 0, verbs.enums.IBV_ACCESS_REMOTE_WRITE if access is None else access
    a.ah_attr = address_vector(route, remote)
    a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic = remote["qp_num"], remote["psn"], MAX_DEST_RD_ATOMIC
    a.min_rnr_timer = MIN_RNR_TIMER
    a.sq_psn, a.timeout, a.retry_cnt, a.max_rd_atomic = local["psn"], TIMEOUT, retry_cnt, MAX_RD_ATOMIC
    a.rnr_retry = rnr_retry
    qp.to_rts(a)


class Resources:
    """One side's verbs objects: a Context, a PD, CQs, RC QPs and MRs, opened and closed together.

        res = Resources(mr_sizes=[4096])      # choose_route()'s device; one QP, one CQ, one MR
        mine = res.endpoint(mr=res.mr)        # send it to the peer, which sends back its own
        res.connect(theirs)                   # res.qp is now in RTS
        ... post to res.qp, poll res.cq ...
        res.close()                           # or: with Resources(...) as res:

    rdma-core's tests build the same in three classes (BaseResources: Context, PD; TrafficResources:
    CQ, QPs, MR; RCResources: to RTS); here it is one:

        ctx, pd            use these (whoever opened them closes them); else open choose_route() (route)
        cq_depth, events   the CQs' size; events: they report to a completion channel, `channel`
        two_cqs            sends complete on send_cq, receives on recv_cq; else both on cq
        qps                how many RC QPs: qps[i] (qp is qps[0]), each with its own PSN, psns[i]
        max_send_wr, ...   the QPs' caps (one SGE per WR, max_inline_data bytes inline); sq_sig_all=0: only
                           WRs flagged SIGNALED complete
        mr_sizes, access   one MR per size: mrs[i] (mr is mrs[0]); access is also what connect() lets
                           the peer do (default: local and remote write)
    """

    def __init__(self, mr_sizes=(4096,), access=None, qps=1, max_send_wr=16, max_recv_wr=16, cq_depth=64,
                 two_cqs=False, events=False, sq_sig_all=1, ctx=None, pd=None, max_inline_data=0):
        e = verbs.enums
        self.own_ctx, self.own_pd = ctx is None, pd is None
        self.access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE) if access is None else access
        self.route = self.ctx = self.pd = self.channel = self.cq = self.send_cq = self.recv_cq = None
        self.qps, self.psns, self.mrs = [], [], []
        try:    # a failure half-way closes what was opened
            if ctx is None:
                self.route = verbs.choose_route()
                ctx = verbs.device.Context(name=self.route.device)
            self.ctx = ctx
            self.pd = verbs.pd.PD(ctx) if pd is None else pd
            self.channel = verbs.cq.CompChannel(ctx) if events else None
            self.cq = self.send_cq = verbs.cq.CQ(ctx, cq_depth, None, self.channel, 0)
            self.recv_cq = verbs.cq.CQ(ctx, cq_depth, None, self.channel, 0) if two_cqs else self.cq
            cap = verbs.qp.QPCap(max_send_wr=max_send_wr, max_recv_wr=max_recv_wr, max_send_sge=1, max_recv_sge=1,
                                 max_inline_data=max_inline_data)
            init = verbs.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.send_cq, rcq=self.recv_cq, cap=cap,
                                       sq_sig_all=sq_sig_all)
            for _ in range(qps):
                self.qps.append(verbs.qp.QP(self.pd, init))
                self.psns.append(random.getrandbits(24))
            for size in mr_sizes:
                self.mrs.append(verbs.mr.MR(self.pd, size, self.access))
        except BaseException:
            self.close()
            raise
        self.qp = self.qps[0] if self.qps else None
        self.mr = self.mrs[0] if self.mrs else None

    def endpoint(self, i=0, mr=None):
        """What a peer needs to reach qps[i] (and `mr`, one of ours)."""
        return endpoint(self.ctx, self.qps[i], mr, self.psns[i])

    def connect(self, remote, i=0, access=None, rnr_retry=RNR_RETRY, retry_cnt=RETRY_CNT, path_mtu=None):
        """Bring qps[i] to RTS, connected to the peer's endpoint `remote`; access: what the peer may do
        through this QP (default: self.access); path_mtu: as connect()'s."""
        connect(self.ctx, self.qps[i], {"psn": self.psns[i]}, remote,
                self.access if access is None else access, rnr_retry, retry_cnt, path_mtu)

    def close(self):
        """Children before parents: QPs, MRs, CQs, the channel, then the PD and Context if opened here.
        Each is closed even if another fails; the first failure is raised at the end."""
        cqs = [self.send_cq] if self.recv_cq is self.send_cq else [self.send_cq, self.recv_cq]
        owned = [*self.qps, *self.mrs, *cqs, self.channel, self.pd if self.own_pd else None,
                 self.ctx if self.own_ctx else None]
        first = None
        for obj in (o for o in owned if o is not None):
            try:
                obj.close()
            except Exception as error:
                first = first or error
        if first is not None:
            raise first

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def wait_for_completion(cq, timeout=5.0):
    """Poll until one completion arrives (rdmalab.proc.waiting: spin, yield, then sleep); TimeoutError
    names the likely causes if none does."""
    try:
        return waiting.poll(cq, 1, timeout)[0]
    except TimeoutError:
        raise TimeoutError(f"no completion within {timeout} s: was the WR signaled, and is the peer's QP in "
                           "RTR or RTS?") from None


def wait_for_event(cq, channel):
    """The completion-event loop of every verbs program that sleeps instead of polling: poll; if the CQ
    is empty, arm it (req_notify) and poll again (a completion that came before arming raises no
    event), then sleep in get_cq_event until one does, acknowledge it, and poll. Returns one WC."""
    n, wcs = cq.poll(1)
    while not n:
        cq.req_notify()
        n, wcs = cq.poll(1)
        if n:
            break
        channel.get_cq_event(cq)
        cq.ack_events(1)
        n, wcs = cq.poll(1)
    return wcs[0]
