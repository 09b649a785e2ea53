"""librdmacm enums as pyverbs <= 58 spells them (`pyverbs.cm_enums`): flat integer names."""
from .librdmacm_enums import _ENUMS
from . import librdmacm_enums as _flat

globals().update({name: int(value) for name, value in vars(_flat).items() if name.isupper() or name.startswith("RAI_")})
for _enum in _ENUMS:
    globals().update({name: int(member) for name, member in _enum.__members__.items()})
del _enum, _flat
