"""libibverbs enums as pyverbs <= 58 spells them (`import pyverbs.enums as e`): flat integer names."""
from .libibverbs_enums import _ENUMS

for _enum in _ENUMS:
    globals().update({name: int(member) for name, member in _enum.__members__.items()})
del _enum
