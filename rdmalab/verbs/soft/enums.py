"""libibverbs enums as pyverbs <= 58 spells them (`import pyverbs.enums as e`): flat integer names."""
from . import libibverbs_enums as _flat

globals().update({name: int(value) for name, value in vars(_flat).items()
                  if name.lstrip("_").startswith("IBV_") and isinstance(value, int)})
del _flat
