"""Unreliable datagrams (UD): what soft0's NIC does with a UD QP's sends, both halves.

A UD QP is not connected. Each send names its destination in the WR (set_wr_ud): an address handle
(the destination's GID), the destination QP's number and its Q_Key. The message travels as one
packet, so it may be no longer than the path MTU, and nothing answers it: the sender's completion
says only that the packet left. At the destination it is delivered only if a UD QP with that number
is there, ready to receive (RTR or RTS), with that Q_Key, and has a receive posted; otherwise it is
dropped, and nobody is told. The receive gets the packet's 40-byte Global Routing Header (GRH)
first, then the payload: its completion's byte_len counts both, and names the sender (src_qp).

As for RC (requester.py, responder.py), the sender's process does the work of both NICs: it finds
the destination QP in shared memory, consumes its receive and writes into its memory; the
destination's process runs no code.

Multicast: a send to QP number 0xFFFFFF goes to the group its destination GID names, that is to
every UD QP attached to that group (ibv_attach_mcast; rdma_cm's join_multicast attaches the CM id's
QP), the sender's own included, as rxe delivers it. An attachment is a small shared segment named by
the group and the QP, `rdmalab-mcast-<gid>-<qpn>`: the sender's NIC lists them, detaching (or the
death of its owner) removes it.
"""
import itertools
import os
import struct

from . import checks, counters, requester, responder, shm
from .addr import IPV4_MAPPED
from .hardware import GIDS, active_mtu
from .operations import WITH_IMM
from rdmalab.wire.psn import psn_add
from .constants import (IBV_QPS_ERR, IBV_QPT_UD, IBV_SEND_SOLICITED, IBV_WC_GRH, IBV_WC_RECV, IBV_WC_SUCCESS,
                        IBV_WC_WITH_IMM, IBV_WR_SEND)
from .layout import Q_PD, Q_RQ_CONSUMED

GRH_BYTES = 40
# RoCE v2 headers after the IP header, counted in its length field: UDP 8, BTH 12, DETH 8, ICRC 4
UDP, BTH, DETH, IMMDT, ICRC = 8, 12, 8, 4, 4
TTL = 64   # rxe takes the IP hop limit from the kernel's route, whatever the AH asks: 64
_ip_ids = itertools.count(1)   # the IPv4 header's identification, one per packet sent


class DatagramQueue(requester.UnansweredQueue):
    """A UD QP's send queue: each WR goes out at once, as one packet, and completes at once."""
    qp_type = IBV_QPT_UD

    def send_now(self, wqe):
        """Read our memory, deliver the datagram if the destination takes it, complete."""
        refused = checks.carried_out(IBV_QPT_UD, wqe.opcode)
        if refused is not None:   # UD only sends (rxe: the QP goes to ERR)
            return requester.fail(self, wqe, refused.answer)
        payload = requester.gather(self, wqe)
        if type(payload) is int:
            return requester.fail(self, wqe, payload)
        if checks.first(checks.SENDING_DATAGRAM, checks.Request(wqe.opcode, len(payload), mtu=128 << active_mtu())) \
                is None:
            self.deliver(wqe, payload)
        self.psn = psn_add(self.psn, 1)
        return requester.complete(self, wqe, IBV_WC_SUCCESS, len(payload))

    def deliver(self, wqe, payload):
        """Hand the datagram to the destination (here, through shared memory: deliver())."""
        deliver(self.qp_num, wqe, payload)


MULTICAST_QPN = 0xFFFFFF


def _group_prefix(gid):
    return f"mcast-{str(gid).replace(':', '')}-"


def attach(qp, gid):
    """ibv_attach_mcast: datagrams sent to group `gid` (QP number 0xFFFFFF) reach `qp` too. Returns the
    attachment, whose close() detaches (ibv_detach_mcast); None if attached already (it is one
    attachment, as in rxe)."""
    try:
        return shm.Segment.create(_group_prefix(gid) + f"{qp.qp_num:06x}", 0)
    except FileExistsError:
        return None


def members(gid):
    """The QP numbers attached to multicast group `gid` on this host, by their attachments' names."""
    prefix = shm.PREFIX + _group_prefix(gid)
    names = [entry.name[len(prefix):] for entry in os.scandir(shm.directory()) if entry.name.startswith(prefix)]
    return [int(name, 16) for name in names if len(name) == 6 and all(c in "0123456789abcdef" for c in name)]


def deliver(src_qp, wqe, payload):
    """The destination's NIC: drop the packet unless a UD QP there takes it; else write the GRH and the
    payload into its next receive and complete it. A multicast send goes to each QP of its group."""
    ah = wqe._ah
    if wqe._remote_qpn == MULTICAST_QPN:
        qpns = members(ah._dgid)
    elif ah._dgid in GIDS:
        qpns = [wqe._remote_qpn]
    else:
        return   # an address of no NIC on this host
    with_imm = wqe.opcode in WITH_IMM
    message = grh(ah._sgid, ah._dgid, ah._traffic_class, len(payload), with_imm) + bytes(payload)
    counters.copied_bytes += 2 * len(payload)   # (out of the sender's memory, then behind the GRH)
    for qpn in qpns:
        land(responder.peer_qp(qpn), src_qp, wqe._remote_qkey, message, wqe.imm_data if with_imm else None,
             wqe.send_flags & IBV_SEND_SOLICITED)


def land(peer, src_qp, qkey, message, imm, solicited):
    """Put a datagram (its GRH, then its payload) into the next receive of `peer`, a QP's segment, and
    complete it; False if it is dropped: no such QP, not a UD QP ready to receive, another Q_Key, or
    no receive posted. Shared by both links (the udp link's NIC calls it for the packets it takes)."""
    if peer is None or not peer.alive():
        return False
    h = peer.header
    with responder.LOCK:
        if checks.first(checks.DATAGRAM, checks.Request(IBV_WR_SEND, len(message), rkey=qkey, h=h)) is not None:
            return False   # dropped: nothing answers a datagram
        consumed = h[Q_RQ_CONSUMED]
        refused = peer.rq.scatter(consumed, message, h[Q_PD])
        if refused is None:
            peer.rq.complete(consumed, IBV_WC_SUCCESS, IBV_WC_RECV, len(message), imm or 0,
                             IBV_WC_GRH if imm is None else IBV_WC_GRH | IBV_WC_WITH_IMM, src_qp)
        else:   # the receive is too small, or names memory it may not use. As in rxe, the GRH lands if
            # it fits, then the receive fails and the QP enters ERR
            peer.rq.scatter(consumed, message[:GRH_BYTES], h[Q_PD])
            peer.rq.complete(consumed, refused.receive, 0, 0, 0, 0)
            responder.enter(h, IBV_QPS_ERR)
    peer.announce(solicited)
    return True


def grh(sgid, dgid, traffic_class, length, with_imm):
    """The 40 bytes a UD receive starts with, as rxe writes them on RoCE v2: the packet's IP header.
    An IPv4 header is 20 bytes, so it fills the last 20 and the first 20 are zero; an IPv6 header
    fills all 40. Its length counts what follows it in the packet: UDP, BTH, DETH (and ImmDt)
    headers, the payload padded to 4 bytes, and the ICRC. rxe hands a packet for its own address
    straight to its receive path, before the IP stack computes a checksum: it is 0. (A datagram that
    came over the udp link from another host gets the IPv4 header it came with: link/nic.py.)"""
    after_ip = UDP + BTH + DETH + (IMMDT if with_imm else 0) + length + (-length % 4) + ICRC
    source, destination = bytes.fromhex(sgid.replace(":", "")), bytes.fromhex(dgid.replace(":", ""))
    if sgid.startswith(IPV4_MAPPED):
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, traffic_class, 20 + after_ip, next(_ip_ids) & 0xFFFF, 0x4000,
                         TTL, 17, 0, source[12:], destination[12:])
        return bytes(20) + ip
    version_class = 6 << 28 | traffic_class << 20   # (rxe 6.1 sends no flow label: 0)
    return struct.pack("!IHBB16s16s", version_class, after_ip, 17, TTL, source, destination)
