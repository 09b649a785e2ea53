"""XRC domains (pyverbs.xrcd): neither soft0 nor Soft-RoCE has XRC; XRCD() raises EOPNOTSUPP as rxe does."""
from .base import Record, absent


class XRCDInitAttr(Record):
    _fields = dict(comp_mask=0, oflags=0, fd=-1)


XRCD = absent("XRCD", "XRC domains", rxe_has=False)
