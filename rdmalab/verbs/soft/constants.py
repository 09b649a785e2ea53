"""libibverbs' enum values as plain integers: what soft0's own code compares and masks with.

Programs see the enums as pyverbs has them (enums.py for pyverbs <= 58, libibverbs_enums.py for
>= 59: classes whose members are ints); soft0 itself uses plain ints, which cost nothing to test.
"""
from . import libibverbs_enums as _enums

globals().update({name: int(value) for name, value in vars(_enums).items()
                  if name.lstrip("_").startswith("IBV_") and isinstance(value, int)})
del _enums
