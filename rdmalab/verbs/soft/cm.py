"""The connection manager underneath soft0's pyverbs.cmid (cmid.py: the rdma_cm API a program calls): the
addresses it resolves, the CM messages it exchanges with the peer, and the event channel where a CM id's
events wait to be taken.

The CM messages travel over a Unix socket per listening port, `rdmalab-cm-<uid>-<port space>-<port>`
in the shared-memory directory (mode 0600: only your user can connect). Each message is one JSON
object, readable with any socket tool: REQ, REP, RTU; REJ to refuse; DREQ and DREP to disconnect;
SIDR_REQ and SIDR_REP for UD. A CM id acts on them (CMID._on_readable) when its owner waits for an
event (CMEventChannel._next_event), as the kernel's CM would.
"""
import collections
import errno
import ipaddress
import json
import os
import select
import socket

from . import shm
from .addr import GID
from .base import Fixed, Resource, readonly, typed
from .hardware import DEVICE_ATTR
from .constants import IBV_QPS_ERR, IBV_QPT_RC, IBV_QPT_UD
from .librdmacm_enums import rdma_cm_event_type as EV, rdma_port_space
from .pyverbs_error import PyverbsRDMAError
from .pyverbs_generation import returns

RDMA_UDP_QKEY = 0x01234567      # the Q_Key rdma_cm gives UD QPs and multicast groups of the UDP port space
SGID_INDEX = 1                  # soft0's GID for 127.0.0.1 (::ffff:127.0.0.1)
PACKET_LIFETIME = 18            # the kernel CM's RoCE path record: 2^18 x 4.096 us (CMA_IBOE_PACKET_LIFETIME)
ACK_TIMEOUT = PACKET_LIFETIME + 1   # an RC QP's ACK timeout unless its side's set_option(ACK_TIMEOUT) says otherwise
                                # (rxe0's, both sides)
HOP_LIMIT = 64
REJ_NO_LISTENER = 8             # the IB CM's reject reason when nobody listens there (invalid service ID)
REJ_CONSUMER = 28               # ... when the peer called reject()
NAP_FIRST_S, NAP_MOST_S = 0.0005, 0.02   # how long a wait for a CM event naps between looks at its sockets
PORT_SPACE_NAMES = {rdma_port_space.RDMA_PS_TCP: "tcp", rdma_port_space.RDMA_PS_UDP: "udp",
                    rdma_port_space.RDMA_PS_IPOIB: "ipoib", rdma_port_space.RDMA_PS_IB: "ib"}
QP_TYPE_OF = {rdma_port_space.RDMA_PS_TCP: IBV_QPT_RC, rdma_port_space.RDMA_PS_IB: IBV_QPT_RC,
              rdma_port_space.RDMA_PS_UDP: IBV_QPT_UD, rdma_port_space.RDMA_PS_IPOIB: IBV_QPT_UD}


def error(what, code):
    return PyverbsRDMAError(what, code)


# ---------------------------------------------------------------- addresses

def ip_of(text):
    return ipaddress.ip_address(text.split("%")[0])


def ours(ip):
    """Whether `ip` is an address of soft0's netdev, the loopback interface (127.0.0.0/8)."""
    return ip.version == 4 and ip.is_loopback


def multicast_gid(ip):
    """The GID of multicast group `ip` on RoCE: an IPv4 group mapped as ::ffff:a.b.c.d, as rdma_cm maps it."""
    raw = ipaddress.IPv6Address(f"::ffff:{ip}").packed if ip.version == 4 else ip.packed
    return GID(":".join(raw[i:i + 2].hex() for i in range(0, 16, 2)))


def resolve(host, service):
    """(ip address, port) of a host name or numeric address and a service name or port number."""
    port = 0
    if service is not None:
        service = service.decode() if isinstance(service, bytes) else str(service)
        port = int(service) if service.isdigit() else socket.getservbyname(service)
    if host is None:
        return ipaddress.ip_address("0.0.0.0"), port
    host = host.decode() if isinstance(host, bytes) else host
    try:
        return ip_of(host), port
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        raise error(f"Failed to get Address Info: no address for {host!r}", errno.EADDRNOTAVAIL) from None
    return ip_of(found[0][4][0]), port


def no_route(ip):
    """The errno of this host's route lookup for `ip` (ENETUNREACH where no route leads there), or 0."""
    probe = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((str(ip), 9))   # (a UDP connect sends nothing: it looks the route up)
        return 0
    except OSError as error:
        return error.errno if error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) else 0
    finally:
        probe.close()


def listener_path(port_space, port):
    return os.path.join(shm.directory(), f"{shm.PREFIX}cm-{os.geteuid()}-{PORT_SPACE_NAMES[port_space]}-{port}")


def send(sock, **message):
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass   # the peer is gone: what it should have got no longer matters


# How much private data each CM message carries: the IB CM's fixed sizes, less rdma_cm's own header in a
# REQ (36 bytes). The receiver's event has all of it, zero-padded ("due to transport padding, the
# private_data_len may be larger than what was sent", rdma_get_cm_event(3)); more is EINVAL.
PRIVATE_DATA_BYTES = dict(REQ=56, REP=196, REJ=148, SIDR_REQ=180, SIDR_REP=136)


def private_data_hex(kind, data):
    """`data` as hex for a message of `kind`; EINVAL when it does not fit."""
    if len(data) > PRIVATE_DATA_BYTES[kind]:
        raise error(f"{len(data)} bytes of private data: a {kind} carries {PRIVATE_DATA_BYTES[kind]} at most",
                     errno.EINVAL)
    return bytes(data).hex()


def padded(message):
    """A received message's private data, as long as its kind carries."""
    return bytes.fromhex(message["private_data"]).ljust(PRIVATE_DATA_BYTES[message["msg"]], b"\0")


def receive(sock):
    try:
        data = sock.recv(65536)
    except OSError:
        data = b""
    return json.loads(data) if data else None


# ---------------------------------------------------------------- parameters

def cm_ack_timeout(packet_lifetime, ack_delay=DEVICE_ATTR["local_ca_ack_delay"]):
    """The ACK timeout the IB CM gives the passive side from the REQ's path (Linux's cm_ack_timeout): one more than
    the packet lifetime, then raised to the CA's ACK delay. Probed on rxe0 with the active id's ACK timeout set
    before resolve_route: 14 gave the passive side 16, 10 gave 15, 22 gave 22; unset, 19 (as after the route)."""
    ack = packet_lifetime + 1
    ack = ack + (ack_delay >= ack - 1) if ack >= ack_delay else ack_delay + (ack >= ack_delay - 1)
    return min(31, ack)


# ---------------------------------------------------------------- events

Event = collections.namedtuple("Event", "event_type cmid private_data status ud request")


class CMEventChannel(Resource):
    """Where a CM id's events queue until CMEvent(channel) takes them. Waiting for one reads the CM
    messages that reached this channel's ids (the Unix sockets of their listeners and connections)."""

    def __init__(self):
        super().__init__()
        self._events = collections.deque()
        self._ids = []

    def _post(self, cmid, event_type, private_data=b"", status=0, ud=None, request=None):
        self._events.append(Event(event_type, cmid, private_data, status, ud, request))

    def _next_event(self):
        """The next event, waiting for one as long as it takes: rdma_get_cm_event blocks in a read of the
        channel, which a signal ends with EINTR (errno 4) once its handler has run, as get_cq_event's wait
        does. So the wait here selects on the sockets and on a pipe any signal writes to (waiting.signal_pipe:
        a signal that comes between two looks ends it too), for a pause that grows while nothing comes;
        where there is no such pipe (a thread other than the main one), it naps (waiting.nap: a signal
        that comes while it sleeps ends it)."""
        from rdmalab.proc import waiting
        self.check_open()
        pause = NAP_FIRST_S
        with waiting.signal_pipe() as signalled:
            while not self._events:
                sockets = {sock: cmid for cmid in self._ids for sock in cmid._sockets()}
                if signalled is not None:
                    readable = select.select([*sockets, signalled], [], [], pause)[0]
                    if signalled in readable:
                        raise error("Failed to create CMEvent: interrupted by a signal", errno.EINTR)
                else:
                    readable = select.select(list(sockets), [], [], 0)[0] if sockets else []
                    if not readable and waiting.nap(pause) == errno.EINTR:
                        raise error("Failed to create CMEvent: interrupted by a signal", errno.EINTR)
                for sock in readable:
                    sockets[sock]._on_readable(sock)
                # (an idle wait costs little; a busy one answers fast)
                pause = NAP_FIRST_S if readable else min(2 * pause, NAP_MOST_S)
        event = self._events.popleft()
        if event.event_type == EV.RDMA_CM_EVENT_REJECTED and event.cmid._qp is not None:
            event.cmid._move_qp(IBV_QPS_ERR)   # librdmacm does, as it hands the event out (ucma_modify_qp_err)
        return event

    def _release(self):
        for cmid in list(self._ids):
            cmid.close()
        self._events.clear()


class CMEvent(Fixed):
    """The next event of a channel (rdma_get_cm_event): event_type, private_data, and for a
    CONNECT_REQUEST the request a new CMID(creator=event, listen_id=...) takes on."""
    event_type, private_data = readonly("_event_type"), readonly("_private_data")

    def __init__(self, channel):
        event = typed(channel, CMEventChannel, "channel", none=False)._next_event()
        self._event_type, self._private_data, self._status = event.event_type, event.private_data, event.status
        self._ud, self._request, self._acked = event.ud, event.request, False

    def event_str(self):
        return EV(self.event_type).name

    def ack_cm_event(self):
        self._acked = True

    def close(self):
        self._acked = True


returns(CMEvent, event_type=EV)   # (an int in pyverbs <= 58, a member in >= 59: pyverbs_generation.py)
