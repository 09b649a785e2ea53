"""Where to send from: the device, active port, GID index and path MTU that work, chosen to avoid
the traps learners fall into (a link-local or RoCE v1 GID gives RETRY_EXC_ERR on RoCE; an MTU larger
than the port's drops packets; a port that is down)."""
from rdmalab import settings
from rdmalab.verbs.provider import chosen
from rdmalab.errors import ProviderError

IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
GID_TYPE_NAMES = {0: "IB/RoCE v1", 1: "RoCE v2"}   # what ibv_query_gid_type reports (sysfs' names)


def routable_gid_index(ctx, port=1):
    """The GID index to use on RoCE: the IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d).

    A link-local or RoCE v1 GID gives RETRY_EXC_ERR (status 12) on Soft-RoCE; InfiniBand ports
    have no IPv4-mapped GID and use index 0.
    """
    mapped = []
    for index in range(min(ctx.query_port(port).gid_tbl_len, 64)):
        try:
            if str(ctx.query_gid(port, index)).startswith(IPV4_MAPPED_PREFIX):
                mapped.append(index)
        except Exception:   # an empty entry: ENODATA on rxe
            continue
    for index in mapped:    # rxe lists each address twice, RoCE v1 then v2: take v2
        try:
            if ctx.query_gid_type(port, index) == 1:
                return index
        except Exception:
            pass
    return mapped[0] if mapped else 0


def ipv4_of(gid):
    """The IPv4 address an IPv4-mapped GID (::ffff:a.b.c.d) holds, as show_gids prints it; '' for another."""
    words = str(gid).split(":")
    if words[:6] != ["0000"] * 5 + ["ffff"]:
        return ""
    return ".".join(str(int(w[i:i + 2], 16)) for w in words[6:] for i in (0, 2))


class Route:
    """Where to send from: device, active port, GID index and path MTU, chosen to avoid the traps.

    Only an ACTIVE port; the IPv4-mapped RoCE v2 GID (others give status 12 on RoCE); a path MTU
    no larger than the port's active MTU (a larger one is rejected by modify(RTR) or drops packets).
    """

    def __init__(self, device, port, gid_index, gid, path_mtu, link_layer):
        self.device, self.port, self.gid_index, self.gid = device, port, gid_index, gid
        self.path_mtu, self.link_layer = path_mtu, link_layer

    @property
    def ipv4(self):
        """The port's IPv4 address (its GID's, on RoCE; '' on InfiniBand): what rdma_cm is given."""
        return ipv4_of(self.gid)

    def __repr__(self):
        mtu = 128 << self.path_mtu
        return (f"Route(device={self.device!r}, port={self.port}, gid_index={self.gid_index}, "
                f"gid={self.gid!r}, path_mtu={mtu})")


def route_of(ctx, device_name, port=None):
    """The Route through an open Context: its first active port unless `port` is given."""
    ports = [port] if port else range(1, ctx.query_device().phys_port_cnt + 1)
    for p in ports:
        attr = ctx.query_port(p)
        if attr.state != chosen()["enums"].IBV_PORT_ACTIVE:
            continue
        index = routable_gid_index(ctx, p)
        return Route(device_name, p, index, str(ctx.query_gid(p, index)),
                     min(attr.active_mtu, chosen()["enums"].IBV_MTU_4096), attr.link_layer)
    raise ProviderError(f"{device_name} has no active port{'' if port is None else f' {port}'}: "
                        "check the cable or link (ibv_devinfo shows PORT_ACTIVE when it is up)")


def choose_route(device_name=None):
    """The Route to use on this machine: the named device (RDMALAB_DEVICE) or the first with an active port.
    On soft0 a Soft-RoCE name RDMALAB_DEVICE gives (rxe0) is soft0's: the route is soft0's, named soft0."""
    wanted = device_name or settings.device()
    names = [d.name.decode() for d in chosen()["device"].get_device_list()]
    if chosen()["PROVIDER"] == "soft" and wanted in chosen()["device"].device_names():
        wanted = chosen()["device"].DEVICE_NAME
    if wanted and wanted not in names:
        raise ProviderError(f"no RDMA device {wanted!r}; this machine has {', '.join(names) or 'none'}")
    problems = []
    for name in [wanted] if wanted else names:
        with chosen()["device"].Context(name=name) as ctx:
            try:
                return route_of(ctx, name)
            except ProviderError as error:
                problems.append(str(error))
    raise ProviderError("; ".join(problems) or "no RDMA device")
