"""Addresses: GID, GlobalRoute and AHAttr, as pyverbs.addr has them.

As in pyverbs, a GlobalRoute is given a GID object (GlobalRoute(dgid=GID("..."))) but its dgid reads and
is set as text, and an AHAttr copies the route it is given (when is_global): changing the GlobalRoute
afterwards does not change the AHAttr, whose GRH fields are its own flat ones (ah_attr.dgid, ...).
"""
from errno import EINVAL, ENODATA

from .base import PyverbsObject, typed
from .gid import GID, _gid_words
from .pyverbs_error import PyverbsUserError
from .utils import field_lines


class GlobalRoute(PyverbsObject):
    """The GRH part of an address vector: which GID to send to, from which of ours."""
    __slots__ = ("_dgid", "flow_label", "sgid_index", "hop_limit", "traffic_class")   # (fixed, as pyverbs')

    def __init__(self, dgid=None, flow_label=0, sgid_index=0, hop_limit=1, traffic_class=0):
        self._dgid = str(typed(dgid, GID, "dgid") or GID())
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class

    @property
    def dgid(self):
        """The destination GID, as text ("0000:...:0001"); set as text too."""
        return self._dgid

    @dgid.setter
    def dgid(self, val):
        self._dgid = ":".join(_gid_words(val))

    def _copy(self):
        return GlobalRoute(GID(self._dgid), self.flow_label, self.sgid_index, self.hop_limit, self.traffic_class)

    def __str__(self):
        return field_lines((("DGID", self.dgid), ("flow label", self.flow_label),
                            ("sgid index", self.sgid_index), ("hop limit", self.hop_limit),
                            ("traffic class", self.traffic_class)))


class AHAttr(PyverbsObject):
    """An address vector. On RoCE (Ethernet link layer) it must be global: is_global=1 and a gr, whose
    fields it copies (_gr) and shows flat: dgid, sgid_index, hop_limit, flow_label, traffic_class."""
    __slots__ = ("dlid", "sl", "src_path_bits", "static_rate", "is_global", "port_num", "_gr")

    def __init__(self, dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1, gr=None):
        typed(gr, GlobalRoute, "gr")
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.is_global = is_global
        self.port_num = port_num
        if is_global and gr is None:
            raise PyverbsUserError("Global AH Attr is created but gr parameter is None")
        self._gr = gr._copy() if is_global else GlobalRoute()   # (pyverbs copies no route into a local one)

    def _copy(self):
        return AHAttr(self.dlid, self.sl, self.src_path_bits, self.static_rate, self.is_global, self.port_num,
                      self._gr)

    # pyverbs exposes the GRH fields flat on AHAttr: read as None unless the AH is global; dgid is set only
    # on a global one (as text), the others always
    def _grh_field(name, doc):
        def get(self):
            return getattr(self._gr, name) if self.is_global else None

        def set_(self, value):
            if name != "dgid" or self.is_global:
                setattr(self._gr, name, value)
        return property(get, set_, doc=doc)

    dgid = _grh_field("dgid", "the destination GID, as text")
    sgid_index = _grh_field("sgid_index", "which of our GIDs is the source")
    hop_limit = _grh_field("hop_limit", "the GRH's hop limit (IPv4 TTL on RoCE v2)")
    flow_label = _grh_field("flow_label", "the GRH's flow label")
    traffic_class = _grh_field("traffic_class", "the GRH's traffic class (DSCP and ECN on RoCE v2)")
    del _grh_field

    def __str__(self):
        return ah_attr_lines(self, indent="  ")


def route_hop_limit(dgid):
    """The hop limit the kernel puts in a RoCE address vector in place of the one asked for (ib_resolve_eth_dmac,
    for a QP's AV at modify_qp and an AH at create_ah, on every RoCE device): the route's to a unicast dgid (for an
    IPv4-mapped GID, the IPv4 default TTL; else IPv6's default hop limit), or None where the kernel keeps the
    program's (a link-local or multicast dgid)."""
    text = str(dgid).lower()
    if text.startswith(("fe8", "fe9", "fea", "feb", "ff")):
        return None
    setting = ("/proc/sys/net/ipv4/ip_default_ttl" if text.startswith("::ffff:")
               else "/proc/sys/net/ipv6/conf/default/hop_limit")
    try:
        with open(setting) as f:
            return int(f.read())
    except (OSError, ValueError):   # (no such file outside Linux: both default to 64)
        return 64


def ah_attr_lines(ah, indent, grh_indent=None, port_twice=False):
    """An AHAttr's lines as pyverbs prints them, alone (AHAttr.__str__) or inside a QPAttr's printout,
    which indents the GRH's lines further and names the port twice (`port_twice`), as pyverbs does."""
    rows = [("port num", ah.port_num), ("sl", ah.sl), ("source path bits", ah.src_path_bits), ("dlid", ah.dlid)]
    rows += [("port num", ah.port_num)] if port_twice else []
    rows += [("static rate", ah.static_rate), ("is global", ah.is_global)]
    text = field_lines(rows, indent=indent)
    if ah.is_global:
        gr = ah._gr
        text += field_lines((("dgid", gr.dgid), ("flow label", gr.flow_label), ("sgid index", gr.sgid_index),
                             ("hop limit", gr.hop_limit), ("traffic_class", gr.traffic_class)),
                            indent=indent if grh_indent is None else grh_indent)
    return text


from .base import Resource  # noqa: E402
from .pyverbs_error import PyverbsRDMAError  # noqa: E402

IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"   # how a GID holds an IPv4 address (RoCE v2)


class AH(Resource):
    """An address handle: where a UD send goes (a GID, through one of our GIDs). A SendWR names it in
    set_wr_ud(ah, remote_qpn, remote_qkey). AH(pd, attr=AHAttr(...)), or AH(pd, wc=wc, grh=address,
    port_num=1) to answer the sender of a received datagram (ibv_create_ah_from_wc).

    The checks are rxe's: on RoCE the attribute must be global (errno 22), its sgid_index a populated
    GID (61, ENODATA), its dgid not zero and of the source GID's kind, IPv4-mapped or IPv6: the kernel
    finds no route from one to the other (22). Any other dgid is accepted: a datagram sent to an address
    nobody has is lost, without an error."""

    def __init__(self, pd, *, attr=None, wc=None, grh=None, port_num=1):   # (pyverbs: AH(pd, **kwargs))
        super().__init__()
        from .hardware import GIDS, GID_TABLE_LEN
        from .pd import PD
        typed(pd, PD, "pd", none=False).check_open()
        if attr is None:
            if wc is None or grh is None:
                raise PyverbsUserError("AH(pd, attr=AHAttr(...)) or AH(pd, wc=wc, grh=address, port_num=1)")
            attr = _from_received(wc, grh, port_num)
        gr = typed(attr, AHAttr, "attr")._gr   # (pyverbs casts it unchecked)
        if not attr.is_global or attr.port_num != 1 or not 0 <= gr.sgid_index < GID_TABLE_LEN:
            raise PyverbsRDMAError("Failed to create AH", EINVAL)
        if gr.sgid_index >= len(GIDS):
            raise PyverbsRDMAError("Failed to create AH", ENODATA)
        self._sgid, self._dgid = GIDS[gr.sgid_index], gr.dgid   # (what a datagram's GRH carries)
        if self._dgid == str(GID()) or self._dgid.startswith(IPV4_MAPPED) != self._sgid.startswith(IPV4_MAPPED):
            raise PyverbsRDMAError("Failed to create AH", EINVAL)
        self._traffic_class, self._flow_label, self._hop_limit = gr.traffic_class, gr.flow_label, gr.hop_limit
        self._pd = pd
        self._depend_on(pd)


def _from_received(wc, grh, port_num):
    """The AHAttr that answers a received datagram: the GRH at address `grh` (the first 40 bytes of the
    receive buffer) names its source, our destination, and the GID of ours it reached, our source. On
    RoCE with IPv4 addresses the GRH's last 20 bytes are the packet's IPv4 header; else it is IPv6's."""
    import ctypes
    from .hardware import GIDS
    raw = ctypes.string_at(grh, 40)
    if raw[20] == 0x45:   # IPv4: source and destination addresses end the header
        source, ours = (bytes(10) + b"\xff\xff" + raw[32:36]), (bytes(10) + b"\xff\xff" + raw[36:40])
    else:
        source, ours = raw[8:24], raw[24:40]
    text = [":".join(g[i:i + 2].hex() for i in range(0, 16, 2)) for g in (source, ours)]
    sgid_index = GIDS.index(text[1]) if text[1] in GIDS else 0
    return AHAttr(is_global=1, port_num=port_num, gr=GlobalRoute(dgid=GID(text[0]), sgid_index=sgid_index))
