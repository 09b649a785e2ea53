"""Connecting RC queue pairs, the part of every lesson that is plumbing, not the point.

Each side publishes its endpoint, `(qp_num, psn, gid)` plus whatever memory it exposes
`(rkey, addr)`, over any side channel; then connect() walks its QP RESET -> INIT -> RTR -> RTS
with ibv_rc_pingpong's values (min_rnr_timer 12, timeout 14, retry 7, rnr_retry 7) on the route
rdmalab.verbs.route_of() picks: the first active port, its routable GID, its active MTU.
"""
import random

from rdmalab.proc import waiting
from rdmalab.verbs import addr, route_of
from rdmalab.verbs import enums as e
from rdmalab.verbs import qp as qpmod


def endpoint(ctx, qp, mr=None, psn=None):
    """What a peer needs to reach this QP (and this MR): a plain dict, ready to send as JSON."""
    info = {"qp_num": qp.qp_num, "psn": random.getrandbits(24) if psn is None else psn,
            "gid": route_of(ctx, "this device").gid}
    if mr is not None:
        info.update(rkey=mr.rkey, addr=mr.buf)
    return info


def connect(ctx, qp, local, remote, access=e.IBV_ACCESS_REMOTE_WRITE, rnr_retry=7):
    """Bring `qp` to RTS, connected to `remote` (its endpoint dict); `local` is this QP's own endpoint.
    rnr_retry: how often a SEND that finds no posted receive is retried (7: forever, 0: fail at once)."""
    route = route_of(ctx, "this device")
    a = qpmod.QPAttr(port_num=route.port, path_mtu=route.path_mtu)
    a.pkey_index, a.qp_access_flags = 0, access
    a.ah_attr = addr.AHAttr(port_num=route.port, is_global=1, gr=addr.GlobalRoute(
        dgid=addr.GID(remote["gid"]), sgid_index=route.gid_index, hop_limit=64))
    a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = remote["qp_num"], remote["psn"], 1, 12
    a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = local["psn"], 14, 7, rnr_retry, 1
    qp.to_rts(a)


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

