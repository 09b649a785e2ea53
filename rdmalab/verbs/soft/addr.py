"""Addresses: GID, GlobalRoute and AHAttr, as pyverbs.addr has them."""
from .pyverbs_error import PyverbsUserError


def _gid_words(val):
    words = val.split(":")
    if len(words) != 8 or any(len(w) != 4 for w in words):
        raise PyverbsUserError(f"Invalid GID value ({words})")
    return words


class GID:
    """A 128-bit port address, shown as 8 groups of 4 hex digits like pyverbs."""

    def __init__(self, val=None):
        self._text = ":".join(_gid_words(val)) if val is not None else ":".join(["0000"] * 8)

    @property
    def gid(self):
        return self._text

    @gid.setter
    def gid(self, val):
        self._text = ":".join(_gid_words(val))

    def __str__(self):
        return self._text

    def __eq__(self, other):
        return str(self) == str(other)

    def __hash__(self):
        return hash(self._text)


class GlobalRoute:
    """The GRH part of an address vector: which GID to send to, from which of ours."""

    def __init__(self, dgid=None, flow_label=0, sgid_index=0, hop_limit=1, traffic_class=0):
        self.dgid = dgid if dgid is not None else GID()
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class


class AHAttr:
    """An address vector. On RoCE (Ethernet link layer) it must be global: is_global=1 and a gr."""

    def __init__(self, dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1, gr=None):
        self.dlid = dlid
        self.sl = sl
        self.src_path_bits = src_path_bits
        self.static_rate = static_rate
        self.is_global = is_global
        self.port_num = port_num
        self.gr = gr if gr is not None else GlobalRoute()

    # pyverbs exposes the GRH fields flat on AHAttr as well
    @property
    def dgid(self):
        return self.gr.dgid

    @property
    def sgid_index(self):
        return self.gr.sgid_index

    @property
    def hop_limit(self):
        return self.gr.hop_limit


from .base import absent  # noqa: E402

AH = absent("AH", "Address handles (for UD QPs)")
