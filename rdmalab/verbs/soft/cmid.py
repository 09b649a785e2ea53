"""pyverbs.cmid: the RDMA connection manager (librdmacm) of soft0.

rdma_cm names a peer by IP address and port, as a socket does, and sets up the QPs for you: it
finds the device that owns the address, exchanges QP numbers and PSNs with the peer in CM messages
(REQ, REP, RTU; REJ to refuse; DREQ and its answer DREP to disconnect; SIDR REQ/REP for UD), moves the
QPs through INIT, RTR and RTS, and reports each step as an event on an event channel.

soft0's network device is the loopback interface: its address is 127.0.0.1 (GID 1 is
::ffff:127.0.0.1) and every 127.x.y.z address routes to it. An address of no interface of soft0 does
not resolve: binding to it fails (EADDRNOTAVAIL), resolving it ends in RDMA_CM_EVENT_ADDR_ERROR.

This module is what a program calls (CMID, AddrInfo, ConnParam, UDParam) and a CM id's states; the CM
messages, the addresses they name and the event channel are cm.py's, and rdma_verbs.h's one-call data
path cm_verbs.py's. A CM id's events come when its owner waits for one (CMEvent(channel), or a
synchronous id's calls): the waiting process reads the messages that arrived (over a Unix socket per
listening port), does what the kernel's CM would do (answer a REP with an RTU, move the QP: CMID._on_readable),
and queues the event. A peer that dies closes its socket: a connection in progress then ends with
RDMA_CM_EVENT_UNREACHABLE, an established one with RDMA_CM_EVENT_DISCONNECTED; nothing waits forever
for a dead process.
"""
import copy
import errno
import ipaddress
import os
import random
import socket

from . import cm, datagram, shm
from .addr import AHAttr, GID, GlobalRoute
from .base import PyverbsObject, Resource, not_supported, readonly, typed
from .cm import (ACK_TIMEOUT, HOP_LIMIT, PACKET_LIFETIME, PRIVATE_DATA_BYTES, QP_TYPE_OF, RDMA_UDP_QKEY, REJ_CONSUMER,
                 REJ_NO_LISTENER, SGID_INDEX, CMEvent, CMEventChannel, cm_ack_timeout, multicast_gid, ours)
from .cm_verbs import RdmaVerbs
from .cq import CQ, CompChannel
from .device import Context
from .hardware import DEVICE_ATTR, GIDS, active_mtu
from .constants import (IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
                    IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC,
                    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT,
                    IBV_QP_QKEY, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE,
                    IBV_QP_TIMEOUT, IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_UD)
from .librdmacm_enums import (RAI_PASSIVE, RDMA_OPTION_ID_ACK_TIMEOUT, rdma_cm_event_type as EV,
                              rdma_cm_mc_join_flags, rdma_port_space)
from .pd import PD
from .pyverbs_error import PyverbsUserError
from .qp import QP, QPAttr, QPInitAttr


class _DefaultDevice:
    """librdmacm opens a device once per process, with one PD that every id made without a PD of its own
    uses (ucma_get_device, ucma_put_device): a listener and the ids it accepted share them, and the
    device closes when the last of them closes, not with the listener."""

    def __init__(self):
        self.ctx = self.pd = None
        self.users = 0

    def take(self):
        if self.ctx is None or self.ctx.closed:
            self.ctx = Context(name="soft0")
            self.pd, self.users = PD(self.ctx), 0
        self.users += 1
        return self.ctx, self.pd

    def let_go(self):
        self.users -= 1
        if self.users <= 0 and self.ctx is not None:
            self.ctx.close()   # (what was made on its PD closes with it)
            self.ctx = self.pd = None


_DEFAULT_DEVICE = _DefaultDevice()


class AddrInfo(Resource):
    """rdma_getaddrinfo's answer: a source and/or destination address (ip, port) for a port space.
    With flags=RAI_PASSIVE it is the address to listen on (src, src_service)."""

    def __init__(self, src=None, dst=None, src_service=None, dst_service=None, port_space=0, flags=0):
        super().__init__()
        self._port_space, self._flags = port_space or rdma_port_space.RDMA_PS_TCP, flags
        self._src_addr = self._dst_addr = None
        if flags & RAI_PASSIVE:
            self._src_addr = cm.resolve(src, src_service)
            return
        if src is not None:
            self._src_addr = cm.resolve(src, src_service)
        if dst is not None or dst_service is not None:
            self._dst_addr = cm.resolve(dst if dst is not None else "127.0.0.1", dst_service)


# ---------------------------------------------------------------- parameters

def default_param():
    """What librdmacm asks for a connect() or accept() without parameters: the device's most READs and atomics
    both ways (its max_qp_init_rd_atom and max_qp_rd_atom), and retries without end (7)."""
    return ConnParam(resources=DEVICE_ATTR["max_qp_rd_atom"], depth=DEVICE_ATTR["max_qp_init_rd_atom"], retry=7,
                     rnr_retry=7)


class ConnParam(PyverbsObject):
    """rdma_conn_param: what a side asks of a connection (READ/atomic depths, retries, a QP number
    when the QP is not the CM id's own, and private data for the peer). pyverbs shows only qpn and
    private_data of it (set_private_data sets the latter); the rest is given to the constructor."""
    __slots__ = ("_responder_resources", "_initiator_depth", "_flow_control", "_retry_count", "_rnr_retry_count",
                 "_srq", "_qp_num", "_data_len", "_private")

    def __init__(self, resources=1, depth=1, flow_control=0, retry=5, rnr_retry=5, srq=0, qp_num=0, data_len=0):
        self._responder_resources, self._initiator_depth, self._flow_control = resources, depth, flow_control
        self._retry_count, self._rnr_retry_count, self._srq, self._qp_num = retry, rnr_retry, srq, qp_num
        self._data_len, self._private = data_len, b""

    @property
    def qpn(self):
        return self._qp_num

    @qpn.setter
    def qpn(self, value):
        self._qp_num = value

    @readonly
    def private_data(self):
        return self._private

    def set_private_data(self, data):
        self._private = bytes(data[:self._data_len])


class JoinMCAttrEx:
    """rdma_cm_join_mc_attr_ex: the group (an AddrInfo's source address) and the join flags."""

    def __init__(self, addr, comp_mask=0, join_flags=0):
        if addr is None:
            raise PyverbsUserError("JoinMCAttrEx needs the group's AddrInfo")
        self.addr, self.comp_mask, self.join_flags = addr, comp_mask, join_flags


class UDParam:
    """rdma_ud_param of an ESTABLISHED (UD) or MULTICAST_JOIN event: where to send datagrams."""

    def __init__(self, cm_event):
        if cm_event is None or cm_event._ud is None:
            raise PyverbsUserError("UDParam needs an ESTABLISHED or MULTICAST_JOIN event of a UD CM id")
        self.qp_num, self.qkey, self._dgid = cm_event._ud["qp_num"], cm_event._ud["qkey"], cm_event._ud["gid"]

    @property
    def ah_attr(self):
        return AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=GID(self._dgid), sgid_index=SGID_INDEX,
                                                             hop_limit=HOP_LIMIT))


class CMID(Resource, RdmaVerbs):
    """rdma_cm_id. CMID(creator=CMEventChannel(), port_space=...) is asynchronous: each step's outcome
    is an event on the channel. CMID(creator=AddrInfo(...), qp_init_attr=...) is synchronous
    (rdma_create_ep): every call waits for its outcome. CMID(creator=event, listen_id=id) takes on a
    CONNECT_REQUEST."""

    pd, event_channel = readonly("_pd"), readonly("_event_channel")

    def __init__(self, creator=None, qp_init_attr=None, pd=None, port_space=rdma_port_space.RDMA_PS_TCP,
                 listen_id=None):
        typed(qp_init_attr, QPInitAttr, "qp_init_attr"), typed(pd, PD, "pd"), typed(listen_id, CMID, "listen_id")
        super().__init__()
        self._ctx, self._pd, self._qp, self._event_channel = pd._ctx if pd is not None else None, pd, None, None
        self._port_space, self._local, self._remote = port_space, None, None
        self._state = "idle"
        self._listener = self._listener_path = self._conn = None
        self._own_cqs = []              # CQs and channels create_qp made (closed with the QP)
        self._peer = {}                 # what the peer said: qpn, psn, depths, retries, private data
        self._param = ConnParam()
        self._psn = random.getrandbits(24)
        self._timeout = None
        self._packet_lifetime = PACKET_LIFETIME   # the path record's: from an ACK timeout set before the route
        self._groups = {}               # multicast group GID -> attachment
        self._qp_init_attr = qp_init_attr
        self._sync = self._passive = self._holds_device = False
        self._mrs = []                  # reg_msgs/reg_read/reg_write's MRs, deregistered when the id closes
        if creator is None:
            return
        if isinstance(creator, CMEventChannel):
            self._use_channel(creator, sync=False)
        elif isinstance(creator, AddrInfo):
            self._create_ep(creator, qp_init_attr)
        elif isinstance(creator, CMEvent):
            if listen_id is None:
                raise PyverbsUserError("listen ID not provided")
            self._take_request(listen_id, creator._request)
        else:
            raise PyverbsUserError(f"Cannot create CM ID from {type(creator).__name__}")

    def _use_channel(self, channel, sync):
        self._event_channel, self._sync = channel, sync
        channel._ids.append(self)

    # ------------------------------------------------------------ what the event channel needs

    def _sockets(self):
        return [s for s in (self._listener, self._conn) if s is not None and self._state != "bound"]

    def _on_readable(self, sock):
        """A CM message (or a new connection, or the peer's end) arrived for this id: act on it as the
        kernel's CM does, and queue the event."""
        if sock is self._listener:
            conn, _ = sock.accept()
            conn.settimeout(10)   # the connecting side sends its REQ right after it connects
            request = cm.receive(conn)
            conn.settimeout(None)
            if request is None:
                conn.close()
            else:
                self._event_channel._post(self, EV.RDMA_CM_EVENT_CONNECT_REQUEST, cm.padded(request),
                                        request=(conn, request))
            return
        message = cm.receive(sock)
        kind = message["msg"] if message else "EOF"
        post = self._event_channel._post
        if kind == "REP" and self._state == "connecting":
            self._peer.update(message)
            if self._qp is not None:   # librdmacm moves its own QP (INIT again: now the access is known), answers
                self._move_qp(IBV_QPS_INIT)
                self._move_qp(IBV_QPS_RTR)
                self._move_qp(IBV_QPS_RTS)
                cm.send(sock, msg="RTU")
                self._state = "connected"
                post(self, EV.RDMA_CM_EVENT_ESTABLISHED, cm.padded(message))
            else:                     # the program moves its own QP, then calls establish()
                self._state = "responded"
                post(self, EV.RDMA_CM_EVENT_CONNECT_RESPONSE, cm.padded(message))
        elif kind == "SIDR_REP" and self._state == "connecting":
            self._close_conn()
            self._state = "connected"
            post(self, EV.RDMA_CM_EVENT_ESTABLISHED, cm.padded(message),
                 ud=dict(qp_num=message["qpn"], qkey=message["qkey"], gid=message["gid"]))
        elif kind == "RTU" and self._state == "accepting":
            self._state = "connected"
            post(self, EV.RDMA_CM_EVENT_ESTABLISHED)
        elif kind == "REJ":
            self._close_conn()
            self._state = "rejected"
            post(self, EV.RDMA_CM_EVENT_REJECTED, cm.padded(message), REJ_CONSUMER)
        elif kind == "DREQ" and self._state == "connected":   # the peer disconnects: we answer (DREP) when we do
            self._state = "disconnected"
            post(self, EV.RDMA_CM_EVENT_DISCONNECTED)
        elif kind in ("DREP", "DREQ", "EOF") and self._state == "disconnecting":   # our DREQ answered (or crossed
            self._close_conn()                                                   # by theirs; or the peer is gone)
            self._state = "disconnected"
            post(self, EV.RDMA_CM_EVENT_DISCONNECTED)
        elif kind == "DREQ" or kind == "EOF":
            self._close_conn()
            if self._state == "connected":
                self._state = "disconnected"
                post(self, EV.RDMA_CM_EVENT_DISCONNECTED)
            elif self._state in ("connecting", "accepting", "responded"):
                self._state = "unreachable"
                post(self, EV.RDMA_CM_EVENT_UNREACHABLE, status=-errno.ETIMEDOUT)

    def _wait(self, expected):
        """A synchronous id's call waits for its outcome: the expected event, or an error (ucma_complete)."""
        event = self._event_channel._next_event()
        if event.event_type != expected:
            code = errno.ECONNREFUSED if event.event_type == EV.RDMA_CM_EVENT_REJECTED else \
                abs(event.status) or errno.EINVAL
            raise cm.error(f"rdma_cm: expected {EV(expected).name}, got {EV(event.event_type).name}", code)
        return event

    # ------------------------------------------------------------ addresses and routes

    @readonly
    def context(self):
        return self._ctx

    @readonly
    def dev_name(self):
        return "soft0"

    @readonly
    def port_num(self):
        return 1

    @readonly
    def qpn(self):
        return self._qp.qp_num if self._qp is not None else None

    def _open_device(self):
        """The device the address belongs to, and a PD on it: the one the id was given, else librdmacm's
        default PD of the device, which every id of this process without a PD of its own shares."""
        if self._ctx is None:
            self._ctx, default_pd = _DEFAULT_DEVICE.take()
            self._holds_device = True
            self._pd = self._pd or default_pd
        if self._pd is None:
            self._pd = PD(self._ctx)

    def _protection_domain(self):
        """PD(cmid): the id's PD (pyverbs wraps the rdma_cm_id's pd)."""
        self._open_device()
        return self._pd

    def bind_addr(self, lai):
        """Take a local address (an AddrInfo's source): one of soft0's, or the wildcard. A port other than
        0 is reserved here (EADDRINUSE when another id of this user has it); 0 picks a free one."""
        self.check_open()
        typed(lai, AddrInfo, "lai", none=False)
        ip, port = lai._src_addr if lai._src_addr is not None else (ipaddress.ip_address("0.0.0.0"), 0)
        if not (ours(ip) or ip == ipaddress.ip_address("0.0.0.0")):
            raise cm.error(f"Failed to Bind ID: {ip} is no address of soft0 (its netdev is lo: 127.0.0.0/8)",
                         errno.EADDRNOTAVAIL)
        if self._state != "idle":
            raise cm.error("Failed to Bind ID: it is bound already", errno.EINVAL)
        if port:
            self._reserve(port)
        self._local, self._state = (ip, port or random.randint(32768, 60999)), "bound"
        self._open_device()

    def _reserve(self, port):
        path = cm.listener_path(self._port_space, port)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.bind(path)
        except OSError as error:
            if error.errno != errno.EADDRINUSE or not shm.stale_socket(path):
                sock.close()
                raise cm.error(f"Failed to Bind ID: port {port} is taken", errno.EADDRINUSE) from None
            os.unlink(path)
            sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(16)   # (a socket that refuses connections is a leftover, to be reaped: shm.stale_socket)
        self._listener, self._listener_path = sock, path

    def resolve_addr(self, rai, timeout_ms=2000):
        """Find the device for the destination (and bind to the source if given): ADDR_RESOLVED for one of
        soft0's addresses or a multicast group; ADDR_ERROR (EHOSTUNREACH) for any other this host has a route
        to. As the kernel's rdma_resolve_addr, it fails at once, queuing nothing, where it can tell without
        waiting: an id whose address is resolved or resolving already (EINVAL: a second resolve_addr), or a
        destination this host has no route to (ENETUNREACH, the route lookup's answer)."""
        self.check_open()
        typed(rai, AddrInfo, "rai", none=False)
        if self._state not in ("idle", "bound"):
            raise cm.error(f"Failed to Resolve Address: the id is {self._state.replace('_', ' ')} already",
                         errno.EINVAL)
        if self._state == "idle":
            self.bind_addr(rai)
        if rai._dst_addr is None:
            raise cm.error("Failed to Resolve Address: no destination", errno.EINVAL)
        ip, _ = rai._dst_addr
        unroutable = None if ours(ip) or ip.is_multicast else cm.no_route(ip)
        if unroutable:
            raise cm.error(f"Failed to Resolve Address: no route to {ip}", unroutable)
        self._remote = rai._dst_addr
        if ours(ip) or ip.is_multicast:
            self._state = "addr_resolved"
            self._event_channel._post(self, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
        else:
            self._event_channel._post(self, EV.RDMA_CM_EVENT_ADDR_ERROR, status=-errno.EHOSTUNREACH)
        if self._sync:
            self._wait(EV.RDMA_CM_EVENT_ADDR_RESOLVED)

    def resolve_route(self, timeout_ms=2000):
        self.check_open()
        if self._state != "addr_resolved":
            raise cm.error("Failed to Resolve Route: resolve the address first", errno.EINVAL)
        self._state = "route_resolved"
        if self._timeout:   # (the kernel takes an ACK timeout set before the route as the path's packet lifetime)
            self._packet_lifetime = self._timeout - 1
        self._event_channel._post(self, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
        if self._sync:
            self._wait(EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
        self._open_device()

    def set_option(self, level, optname, optval, optlen):
        if optname != RDMA_OPTION_ID_ACK_TIMEOUT:
            raise PyverbsUserError("Currently only RDMA_OPTION_ID_ACK_TIMEOUT is supported in Pyverbs.")
        self._timeout = optval & 0xFF

    # ------------------------------------------------------------ synchronous ids (rdma_create_ep)

    def _create_ep(self, ai, qp_init_attr):
        """rdma_create_ep. The QP's type comes from the address (RDMA_PS_TCP: RC, RDMA_PS_UDP: UD), whatever
        qp_init_attr says: librdmacm overwrites it, in the caller's attributes for an active id and in
        the copy a listener keeps for the ids it accepts."""
        self._port_space = ai._port_space
        self._use_channel(CMEventChannel(), sync=True)
        if ai._flags & RAI_PASSIVE:
            if qp_init_attr is not None:
                self._qp_init_attr = copy.copy(qp_init_attr)
                self._qp_init_attr.qp_type = QP_TYPE_OF[ai._port_space]
            self.bind_addr(ai)
            return
        self.resolve_addr(ai)
        self.resolve_route()
        if qp_init_attr is not None:
            qp_init_attr.qp_type = QP_TYPE_OF[ai._port_space]
            self.create_qp(qp_init_attr)

    def get_request(self):
        """A synchronous listener: wait for the next connection request and return its new CM id (with a
        QP, when the listener was made with qp_init_attr)."""
        event = self._wait(EV.RDMA_CM_EVENT_CONNECT_REQUEST)
        child = CMID()
        child._take_request(self, event.request)
        self._ctx, self._pd = child._ctx, child._pd
        if self._qp_init_attr is not None:
            child.create_qp(self._qp_init_attr)
        return child

    def _take_request(self, listen_id, request):
        conn, message = request
        self._port_space, self._local, self._state = listen_id._port_space, listen_id._local, "requested"
        self._passive = True
        self._use_channel(listen_id._event_channel if not listen_id._sync else CMEventChannel(), listen_id._sync)
        self._conn, self._peer = conn, dict(message)
        if listen_id._ctx is None:
            listen_id._open_device()
        self._ctx, self._pd = listen_id._ctx, listen_id._pd
        if listen_id._holds_device:   # the accepted id outlives its listener, and keeps the device open
            _DEFAULT_DEVICE.take()
            self._holds_device = True

    # ------------------------------------------------------------ connecting

    def listen(self, backlog=0):
        self.check_open()
        if self._state == "idle":
            self.bind_addr(AddrInfo(flags=RAI_PASSIVE))
        if self._listener is None:
            self._reserve(self._local[1])
        self._state = "listening"

    def connect(self, param=None):
        """Send a REQ (SIDR REQ for UD) to whoever listens at the resolved destination. Its answer is an
        event: ESTABLISHED (or CONNECT_RESPONSE when the QP is not the id's own), or REJECTED."""
        self.check_open()
        typed(param, ConnParam, "param")
        if self._state != "route_resolved":
            raise cm.error("Failed to Connect: resolve the route first", errno.EINVAL)
        self._param = param if param is not None else default_param()
        qpn = self._qp.qp_num if self._qp is not None else self._param._qp_num
        kind = "SIDR_REQ" if self._is_ud() else "REQ"
        private = cm.private_data_hex(kind, self._param.private_data)
        path = cm.listener_path(self._port_space, self._remote[1])
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if os.lstat(path).st_uid != os.geteuid():   # a listener of this user's soft0 only: (ignore
                raise FileNotFoundError(path)             # another user's socket planted under our name)
            sock.connect(path)
        except OSError:   # nobody listens there: the peer's CM rejects (invalid service ID)
            sock.close()
            self._state = "rejected"   # (a REJ carries its 148 bytes of private data, zeros here)
            self._event_channel._post(self, EV.RDMA_CM_EVENT_REJECTED, bytes(PRIVATE_DATA_BYTES["REJ"]),
                                    status=REJ_NO_LISTENER)
        else:
            self._conn, self._state = sock, "connecting"
            p = self._param
            cm.send(sock, msg=kind, qpn=qpn, psn=self._psn, gid=GIDS[SGID_INDEX], responder_resources=p._responder_resources,
                  initiator_depth=p._initiator_depth, retry=p._retry_count, rnr_retry=p._rnr_retry_count,
                  packet_lifetime=self._packet_lifetime, private_data=private)
        if self._sync:
            self._wait(EV.RDMA_CM_EVENT_ESTABLISHED)

    def accept(self, param=None):
        """Answer a connection request: for RC move the id's QP to RTS and send a REP (the peer's RTU brings
        ESTABLISHED); for UD send a SIDR REP with the QP number and Q_Key."""
        self.check_open()
        typed(param, ConnParam, "param")
        if self._state != "requested":
            raise cm.error("Failed to Accept Connection: no request to accept", errno.EINVAL)
        self._param = param if param is not None else default_param()
        qpn = self._qp.qp_num if self._qp is not None else self._param._qp_num
        private = cm.private_data_hex("SIDR_REP" if self._is_ud() else "REP", self._param.private_data)
        if self._is_ud():
            cm.send(self._conn, msg="SIDR_REP", qpn=qpn, qkey=RDMA_UDP_QKEY, gid=GIDS[SGID_INDEX], private_data=private)
            self._close_conn()
            self._state = "connected"
            return
        if self._qp is not None:
            self._move_qp(IBV_QPS_INIT)
            self._move_qp(IBV_QPS_RTR)
            self._move_qp(IBV_QPS_RTS)
        p = self._param
        cm.send(self._conn, msg="REP", qpn=qpn, psn=self._psn, responder_resources=p._responder_resources,
              initiator_depth=p._initiator_depth, rnr_retry=p._rnr_retry_count, private_data=private)
        self._state = "accepting"
        if self._sync:
            self._wait(EV.RDMA_CM_EVENT_ESTABLISHED)

    def reject(self, private_data=None):
        self.check_open()
        if self._state != "requested":
            raise cm.error("Failed to Reject Connection: no request to reject", errno.EINVAL)
        cm.send(self._conn, msg="REJ", private_data=cm.private_data_hex("REJ", private_data or b""))
        self._close_conn()
        self._state = "rejected"

    def establish(self):
        """The active side of a connection whose QP is not the id's own: after CONNECT_RESPONSE and moving
        the QP to RTS (init_qp_attr), tell the peer (RTU): it gets ESTABLISHED."""
        self.check_open()
        if self._state != "responded" or self._qp is not None:
            raise cm.error("Failed to Complete an active connection request", errno.EINVAL)
        cm.send(self._conn, msg="RTU")
        self._state = "connected"

    def disconnect(self):
        """Move the QP to ERR and tell the peer (DREQ): it gets DISCONNECTED, and so do we once it answers
        (a DREP when it calls disconnect() too, or its id closing), as the IB CM delivers DISCONNECTED to
        both sides. After the peer's DREQ, this is the answer. A synchronous id waits for its DISCONNECTED."""
        self.check_open()
        if self._state not in ("connected", "disconnecting", "disconnected"):
            raise cm.error("Failed to Disconnect: not connected", errno.EINVAL)
        if self._qp is not None:
            self._move_qp(IBV_QPS_ERR)
        if self._conn is None:   # (UD: no connection to end)
            self._state = "disconnected"
        elif self._state == "connected":
            cm.send(self._conn, msg="DREQ")
            self._state = "disconnecting"
            if self._sync:
                self._wait(EV.RDMA_CM_EVENT_DISCONNECTED)
        elif self._state == "disconnected":   # the peer's DREQ came first: answer it
            cm.send(self._conn, msg="DREP")
            self._close_conn()

    def _close_conn(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _is_ud(self):
        return QP_TYPE_OF[self._port_space] == IBV_QPT_UD

    # ------------------------------------------------------------ the QP

    def create_qp(self, qp_init):
        """A QP for this id (rdma_create_qp), with send and receive CQs of its own unless qp_init names
        them. An RC QP goes to INIT; a UD QP to RTS, with rdma_cm's Q_Key."""
        self.check_open()
        typed(qp_init, QPInitAttr, "qp_init", none=False)
        if self._pd is None:
            raise cm.error("Failed to Create QP: bind or resolve the id first", errno.EINVAL)
        # as librdmacm's ucma_create_cqs: a CQ (and its channel) for each queue qp_init leaves without one
        scq = qp_init.send_cq or self._new_cq(max(qp_init.cap.max_send_wr, 1))
        rcq = qp_init.recv_cq or self._new_cq(max(qp_init.cap.max_recv_wr, 1))
        init = QPInitAttr(qp_type=qp_init.qp_type, qp_context=qp_init._qp_context, scq=scq, rcq=rcq,
                          srq=qp_init.srq, cap=qp_init.cap, sq_sig_all=qp_init.sq_sig_all)
        self._qp = QP(self._pd, init)
        self._move_qp(IBV_QPS_INIT)
        if self._qp.qp_type == IBV_QPT_UD:
            self._move_qp(IBV_QPS_RTR)
            self._move_qp(IBV_QPS_RTS)
            for gid in self._groups:
                self._groups[gid] = self._groups[gid] or datagram.attach(self._qp, gid)

    def _new_cq(self, size):
        channel = CompChannel(self._ctx)
        cq = CQ(self._ctx, size, None, channel, 0)
        self._own_cqs += [cq, channel]
        return cq

    def _move_qp(self, state):
        attr, mask = self.init_qp_attr(state)
        self._qp.modify(attr, mask)

    def query_qp(self, attr_mask):
        if self._qp is None:
            raise cm.error("Failed to query QP: the CM id has none", errno.EINVAL)
        return self._qp.query(attr_mask)

    def init_qp_attr(self, qp_state):
        """The attributes (and their mask) rdma_cm would give a QP moving to `qp_state` on this connection:
        what a program needs to move a QP of its own (rdma_init_qp_attr)."""
        self.check_open()
        attr, peer, p = QPAttr(qp_state=qp_state), self._peer, self._param
        if qp_state == IBV_QPS_ERR:
            return attr, IBV_QP_STATE
        if self._is_ud():
            attr.pkey_index, attr.port_num, attr.qkey, attr.sq_psn = 0, 1, RDMA_UDP_QKEY, 0
            return attr, {IBV_QPS_INIT: IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                          IBV_QPS_RTR: IBV_QP_STATE, IBV_QPS_RTS: IBV_QP_STATE | IBV_QP_SQ_PSN}[qp_state]
        known = "qpn" in peer
        # READ/atomic depths, as the IB CM keeps them: the passive side its accept()'s, passed through; the active
        # side the REP's, the peer's responder resources as its initiator depth and the other way round
        if self._passive or "responder_resources" not in peer:
            responder, initiator = p._responder_resources, p._initiator_depth
        else:
            responder, initiator = peer["initiator_depth"], peer["responder_resources"]
        if qp_state == IBV_QPS_INIT:
            attr.pkey_index, attr.port_num = 0, 1
            attr.qp_access_flags = (IBV_ACCESS_REMOTE_WRITE | (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                                                               if responder else 0)) if known else 0
            return attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        if not known:
            raise cm.error("Failed to get QP attributes: the peer is not known yet", errno.EINVAL)
        if qp_state == IBV_QPS_RTR:
            attr.path_mtu, attr.dest_qp_num, attr.rq_psn = active_mtu(), peer["qpn"], peer["psn"]
            attr.max_dest_rd_atomic, attr.min_rnr_timer = responder, 0
            attr.ah_attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(
                dgid=GID(peer.get("gid", GIDS[SGID_INDEX])), sgid_index=SGID_INDEX, hop_limit=HOP_LIMIT))
            return attr, (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
                          | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
        if qp_state == IBV_QPS_RTS:
            # as the IB CM: both sides retry as the REQ asked; each side retries RNR NAKs as often as its
            # peer, the receiver, asked (the REQ's count for the passive side, the REP's for the active)
            attr.sq_psn, attr.max_rd_atomic = self._psn, initiator
            attr.timeout = self._timeout if self._timeout is not None else \
                cm_ack_timeout(peer.get("packet_lifetime", PACKET_LIFETIME)) if self._passive else ACK_TIMEOUT
            attr.retry_cnt = peer["retry"] if self._passive else p._retry_count
            attr.rnr_retry = peer["rnr_retry"]
            return attr, (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY
                          | IBV_QP_MAX_QP_RD_ATOMIC)
        raise cm.error(f"Failed to get QP attributes for state {qp_state}", errno.EINVAL)

    def set_local_ece(self, ece):
        raise not_supported("ECE (rdma_set_local_ece)")

    def get_remote_ece(self):
        """The peer's ECE options: soft0, as rxe, has none to offer, so they are zero."""
        from .qp import ECE
        if self._qp is not None:
            raise cm.error("Failed to get remote ECE: the CM id has its own QP", errno.EINVAL)
        return ECE()

    # ------------------------------------------------------------ multicast

    def join_multicast(self, addr=None, mc_attr=None, context=0):
        """Join a multicast group (an AddrInfo's source address): the id's UD QP is attached to it, and the
        MULTICAST_JOIN event says how to send to the group (QP number 0xFFFFFF, Q_Key, its GID)."""
        self.check_open()
        typed(addr, AddrInfo, "addr"), typed(mc_attr, JoinMCAttrEx, "mc_attr")
        if addr is None and mc_attr is None:
            raise PyverbsUserError("Join to multicast must have AddrInfo or JoinMCAttrEx arguments")
        group = (mc_attr.addr if mc_attr is not None else addr)._src_addr
        if group is None or not group[0].is_multicast or self._state not in ("bound", "addr_resolved"):
            raise cm.error("Failed to Join multicast: bind and resolve the id, then join a multicast address",
                         errno.EINVAL)
        gid = str(multicast_gid(group[0]))
        send_only = mc_attr is not None and \
            mc_attr.join_flags == rdma_cm_mc_join_flags.RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER   # (not attached)
        if gid not in self._groups:
            self._groups[gid] = datagram.attach(self._qp, gid) if self._qp is not None and not send_only else None
        self._event_channel._post(self, EV.RDMA_CM_EVENT_MULTICAST_JOIN,
                                ud=dict(qp_num=datagram.MULTICAST_QPN, qkey=RDMA_UDP_QKEY, gid=gid))
        if self._sync:
            self._wait(EV.RDMA_CM_EVENT_MULTICAST_JOIN)

    def leave_multicast(self, addr):
        self.check_open()
        typed(addr, AddrInfo, "addr", none=False)
        gid = str(multicast_gid(addr._src_addr[0])) if addr._src_addr is not None else None
        if gid not in self._groups:
            raise cm.error("Failed to leave multicast: not a member of that group", errno.EADDRNOTAVAIL)
        attachment = self._groups.pop(gid)
        if attachment is not None:
            attachment.close()

    # ------------------------------------------------------------ teardown

    def _release(self):
        for attachment in self._groups.values():
            if attachment is not None:
                attachment.close()
        self._groups.clear()
        self._close_conn()
        if self._listener is not None:
            self._listener.close()
            if self._listener_path:
                try:
                    os.unlink(self._listener_path)
                except FileNotFoundError:
                    pass
            self._listener = None
        for thing in [self._qp] + self._own_cqs + self._mrs:
            if thing is not None:
                thing.close()
        self._qp, self._own_cqs, self._mrs = None, [], []
        if self._holds_device:
            self._holds_device = False
            _DEFAULT_DEVICE.let_go()
        if self._event_channel is not None and self in self._event_channel._ids:
            self._event_channel._ids.remove(self)
            if self._sync:
                self._event_channel.close()

