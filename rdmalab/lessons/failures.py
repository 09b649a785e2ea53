"""When it breaks: a working pair broken on purpose, one way at a time, and what each failure looks like
(the failures lesson). Each run returns a Broken: the completion's status, both QPs' states, the port
counters that moved, and how long the failure took to show.

    b = failures.run("wrong address", ctx, pd)      # b.status 12, b.states ("ERR", "RTS"), b.moved {...}

The ways (KINDS): a wrong address (the peer's GID: nobody answers), a wrong PSN (the peer drops what it
does not expect), a path MTU the two sides disagree on (the sender's larger than the port's: the peer NAKs
the WRITE), an MR without REMOTE_WRITE (the peer's NIC refuses), no receive posted (RNR), and the QP in
ERR afterwards (every WR flushed) with the way back.
"""
import html
import ipaddress
import os
import time

from rdmalab import verbs as v
from rdmalab.errors import status_name
from rdmalab.lessons.fixtures import state_of
from rdmalab.verbs.soft.counters import NAMES as ERROR_COUNTERS   # rxe's names of what a broken connection moves

KINDS = ("wrong address", "wrong PSN", "MTU too large", "no REMOTE_WRITE", "no receive", "flushed")
RETRY_CNT = 2      # resends before RETRY_EXC_ERR: a wrong address or PSN shows in 3 ACK timeouts
TIMEOUT = 12       # 4.096 us * 2**12 = 16.8 ms per ACK timeout
RNR_RETRY = 2      # resends of a SEND that finds no receive, before RNR_RETRY_EXC_ERR


def port_counters(device=None, port=1):
    """The port's counters now: rxe's hw_counters in sysfs on a real device, soft0's own on soft0
    (named as rxe names them); {} where there are none."""
    if v.PROVIDER == "soft":
        from rdmalab.verbs.soft import counters, hardware
        if hardware.LINK == "udp":   # the NIC process counts every packet
            from rdmalab.verbs.soft.link.doorbell import nic_counters
            return nic_counters() or {}
        return counters.read()
    device = device or v.choose_route().device
    folder = f"/sys/class/infiniband/{device}/ports/{port}/hw_counters"
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            found[name] = int(open(os.path.join(folder, name)).read())
        except (OSError, ValueError):
            continue
    return found


class Broken:
    """What one failure looked like."""

    def __init__(self, kind):
        self.kind, self.status, self.states, self.moved, self.seconds = kind, None, None, {}, 0.0
        self.refused = None      # an error raised at modify() or post_send() instead of a completion
        self.later = []          # statuses of the WRs posted after the first failed (flushed)
        self.recovered = None    # the status of a READ after the way back (RESET, INIT, RTR, RTS)
        self.wc = None           # the failed completion
        self.gids = ("", "")     # (ours, the peer's as we were told it)

    def __repr__(self):
        return (f"Broken({self.kind!r}, status={self.status}, states={self.states}, moved={self.moved}, "
                f"seconds={self.seconds:.3f}, refused={self.refused!r}, later={self.later}, "
                f"recovered={self.recovered})")


def _unused_gid(gid):
    """A GID in the same IPv4 subnet as `gid` that no port has: the next address up, ::ffff:a.b.c.(d+99)."""
    words = gid.split(":")
    ip = ipaddress.IPv4Address(int("".join(words[6:]), 16))
    other = int(ip) + 99 if ip.packed[3] < 150 else int(ip) - 99
    hexed = f"{other:08x}"
    return ":".join(words[:6] + [hexed[:4], hexed[4:]])


def _pair(ctx, pd, b_mr_access=None):
    """Two sides (Resources), a and b, not connected yet."""
    from rdmalab.verbs import rc   # (here, as every lesson module does: importing the lessons picks no provider)
    e = v.enums
    full = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a = rc.Resources(ctx=ctx, pd=pd, access=full, cq_depth=16, max_send_wr=8, max_recv_wr=8)
    b = rc.Resources(ctx=ctx, pd=pd, access=full if b_mr_access is None else b_mr_access, cq_depth=16,
                     max_send_wr=8, max_recv_wr=8)
    return a, b


def _post(side, peer_end, opcode, wr_id=1, length=64):
    e = v.enums
    w = v.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[v.wr.SGE(side.mr.buf, length, side.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
    if opcode != e.IBV_WR_SEND:
        w.set_wr_rdma(peer_end["rkey"], peer_end["addr"])
    side.qp.post_send(w)


def connect(side, remote, path_mtu=None):
    """side.qp to RTS, connected to `remote`, with the lesson's short timers: RETRY_CNT resends TIMEOUT
    apart, RNR_RETRY resends after an RNR NAK; the peer may write and read through it."""
    from rdmalab.verbs import rc
    e = v.enums
    route = v.route_of(side.ctx, "this device")
    a = v.qp.QPAttr(port_num=route.port, path_mtu=route.path_mtu if path_mtu is None else path_mtu)
    a.pkey_index = 0
    a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    a.ah_attr = rc.address_vector(route, remote)
    a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic = remote["qp_num"], remote["psn"], rc.MAX_DEST_RD_ATOMIC
    a.min_rnr_timer = rc.MIN_RNR_TIMER
    a.sq_psn, a.timeout, a.retry_cnt, a.max_rd_atomic = side.psns[0], TIMEOUT, RETRY_CNT, rc.MAX_RD_ATOMIC
    a.rnr_retry = RNR_RETRY
    side.qp.to_rts(a)


def run(kind, ctx, pd, timeout=30.0):
    """Break a fresh pair the way `kind` says, and return what it looked like (a Broken)."""
    from rdmalab.verbs import rc
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not one of the failures: {', '.join(KINDS)}")
    e = v.enums
    out = Broken(kind)
    no_write = kind in ("no REMOTE_WRITE", "flushed")
    a, b = _pair(ctx, pd, b_mr_access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ if no_write else None)
    try:
        a_end, b_end = a.endpoint(mr=a.mr), b.endpoint(mr=b.mr)
        a_is_told, b_is_told = dict(b_end), dict(a_end)   # what each side learns of the other, out of band
        if kind == "wrong address":
            a_is_told["gid"] = _unused_gid(b_end["gid"])
        if kind == "wrong PSN":   # b is told a PSN 1000 before the one a sends from: a's requests run ahead
            b_is_told["psn"] = (a_end["psn"] - 1000) % (1 << 24)
        before, started = port_counters(), time.monotonic()
        try:
            connect(a, a_is_told, path_mtu=e.IBV_MTU_4096 if kind == "MTU too large" else None)
            connect(b, b_is_told)
        except v.pyverbs_error.PyverbsRDMAError as error:
            out.refused = str(error)
        else:
            _post(a, b_end, e.IBV_WR_SEND if kind == "no receive" else e.IBV_WR_RDMA_WRITE,
                  length=4096 if kind == "MTU too large" else 64)   # (one packet of 4096 bytes: more than the netdev's)
            out.wc = rc.wait_for_completion(a.cq, timeout=timeout)
            out.status, out.seconds = out.wc.status, time.monotonic() - started
            out.gids = (a_end["gid"], a_is_told["gid"])
            if kind == "flushed":
                for wr_id in (2, 3):   # posted on a QP in ERR: each completes at once, flushed
                    _post(a, b_end, e.IBV_WR_RDMA_WRITE, wr_id=wr_id)
                    out.later.append(rc.wait_for_completion(a.cq, timeout=timeout).status)
        out.states = (state_of(a.qp), state_of(b.qp))
        out.moved = _moved(before, port_counters())
        if kind == "flushed":   # the way back: RESET, then INIT, RTR and RTS again, with fresh PSNs
            for side in (a, b):
                side.qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
                side.psns[0] = (side.psns[0] + 4096) % (1 << 24)
            connect(a, b.endpoint(mr=b.mr))
            connect(b, a.endpoint(mr=a.mr))
            _post(a, b_end, e.IBV_WR_RDMA_READ)   # b's MR allows READs
            out.recovered = rc.wait_for_completion(a.cq, timeout=timeout).status
        return out
    finally:
        b.close()
        a.close()


def _moved(before, after):
    return {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}


# ---------------------------------------------------------------- what a training job prints

def _wc_opcode_name(opcode):
    return next((n for n in dir(v.enums) if n.startswith("IBV_WC_") and getattr(v.enums, n) == opcode
                 and "FLAG" not in n and n not in ("IBV_WC_SUCCESS",)), f"opcode {opcode}")


def _gid_text(gid):
    """A GID as NCCL prints it (inet_ntop of the 16 bytes): ::ffff:10.10.0.1."""
    packed = bytes.fromhex(gid.replace(":", ""))
    if len(packed) != 16:
        return gid
    address = ipaddress.IPv6Address(packed)
    return f"::ffff:{address.ipv4_mapped}" if address.ipv4_mapped else str(address)


def nccl_line(broken, peer="10.0.0.2<47513>", device=None):
    """The WARN line NCCL's IB transport prints for this failed completion, in the format of
    ncclIbLogCompletionWithError (NCCL's src/transport/net_ib/p2p.cc): status and opcode by name and
    number, the vendor error, both GIDs on RoCE, the HCA. `peer` stands for the peer's bootstrap socket."""
    wc = broken.wc
    device = device or v.choose_route().device
    local, remote = (_gid_text(g) for g in broken.gids)
    return (f"NET/IB: Got completion from peer {peer} with status=IBV_WC_{status_name(wc.status)}({wc.status}) "
            f"opcode={_wc_opcode_name(wc.opcode)}({wc.opcode}) vendor_err={wc.vendor_err}  localGid {local} "
            f"remoteGids {remote} hca {device}")


# NCCL's hints after that line (printIbWcStatusHint, src/transport/net_ib/common.h), the first line of
# each: its switch has no break between cases, so LOC_PROT_ERR prints all three, WR_FLUSH_ERR two
HINTS = {
    4: "In many cases this error occurs when ACS is enabled which would break GPU Direct RDMA protocol.",
    5: "In many cases this error occurs when NIC on the same instance cannot talk to each other.",
    12: "In many cases this error occurs when the NCCL_IB_TIMEOUT is set too short.",
}


def nccl_hints(status):
    """The HINT lines NCCL prints after a failed completion of `status` (none for most statuses)."""
    order = [4, 5, 12]
    return [HINTS[s] for s in order[order.index(status):]] if status in order else []


def table(results):
    """The lesson's table of failures: one row each, as HTML with a text fallback."""
    return FailureTable(results)


class FailureTable:
    HEAD = ("what broke", "completion", "QP states (sender, target)", "error counters that moved", "after")

    def __init__(self, results):
        self.results = results

    def rows(self):
        for b in self.results:
            what = (f"modify refused: {b.refused}" if b.refused else
                    f"{b.status} {status_name(b.status)}" if b.status is not None else "none")
            moved = ", ".join(f"{k} +{n}" for k, n in sorted(b.moved.items()) if k in ERROR_COUNTERS)
            yield b.kind, what, " / ".join(b.states or ()), moved or "-", f"{b.seconds * 1e3:.0f} ms"

    def __str__(self):
        return "\n".join(" | ".join(row) for row in [self.HEAD, *self.rows()])

    __repr__ = __str__

    def _repr_html_(self):
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in self.HEAD)
        body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
                       for row in self.rows())
        return f"<table><tr>{head}</tr>{body}</table>"
