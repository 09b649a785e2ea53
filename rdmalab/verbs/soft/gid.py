"""pyverbs.addr.GID: a 128-bit port address. Here so that the device can hand one out without importing
the rest of pyverbs.addr (whose address handles need a PD, which needs the device)."""
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
