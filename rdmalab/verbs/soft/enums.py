"""libibverbs enums as pyverbs <= 58 spells them (`import pyverbs.enums as e`): IntEnum classes, and
every member as a flat name (old_style_enums.py says why)."""
from . import libibverbs_enums as _new
from .old_style_enums import as_int_enums as _as_int_enums

globals().update(_as_int_enums(_new, __name__))
del _new, _as_int_enums
