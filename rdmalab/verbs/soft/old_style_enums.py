"""Enums as pyverbs <= 58 has them (`pyverbs.enums`, `pyverbs.cm_enums`), built from the >= 59 modules.

Up to 58, pyverbs was built with Cython 0.29, which turns each `cpdef enum` into an IntEnum class
(`e.ibv_access_flags`, iterable, members with .name and .value) and binds every member at module
level too (`e.IBV_ACCESS_LOCAL_WRITE` is `ibv_access_flags.IBV_ACCESS_LOCAL_WRITE`). From 59, Cython 3
makes them IntFlag classes (libibverbs_enums.py). Anonymous enums are plain ints in both.
"""
from enum import IntEnum, IntFlag


def as_int_enums(module, old_module):
    """{name: value} for a module of pyverbs >= 59's enums, as pyverbs <= 58 spells them in `old_module`
    (named, so that the classes pickle: a program's WR crosses to a NIC process so on the udp link)."""
    names = {}
    for name, value in vars(module).items():
        if isinstance(value, type) and issubclass(value, IntFlag) and value is not IntFlag:
            old = IntEnum(name, [(member, int(v)) for member, v in value.__members__.items()],
                          module=old_module)
            names[name] = old
            names.update(old.__members__)
    for name, value in vars(module).items():   # the anonymous enums and private constants: plain ints
        if name not in names and isinstance(value, int) and not isinstance(value, IntFlag) and name.lstrip("_").isupper():
            names[name] = value
    return names
