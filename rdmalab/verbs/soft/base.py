"""What every verbs object shares: close() that also closes its dependants, and `with` support.

pyverbs closes an object's dependants first (closing a PD closes its MRs and QPs). Using an object
after close() crashes real pyverbs (a NULL pointer); here it raises PyverbsUserError instead.
"""
import weakref

from .pyverbs_error import PyverbsRDMAError, PyverbsUserError  # noqa: F401 (pyverbs.base has both)


class Resource:
    def __init__(self):
        self._dependants = weakref.WeakSet()
        self._closed = False

    def _depend_on(self, *parents):
        for parent in parents:
            if parent is not None:
                parent.adopt(self)

    def adopt(self, child):
        """`child` is closed before this object is (pyverbs closes dependants first)."""
        self._dependants.add(child)

    @property
    def closed(self):
        return self._closed

    def check_open(self):
        if self._closed:
            raise PyverbsUserError(f"This {type(self).__name__} is closed; create a new one")

    def close(self):
        if self._closed:
            return
        for child in list(self._dependants):
            child.close()
        self._closed = True
        self._release()

    def _release(self):
        """Free what the object holds; subclasses override."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------- pyverbs.base's functions

EOPNOTSUPP = 95


def PyverbsRDMAErrno(msg):
    """pyverbs.base.PyverbsRDMAErrno: a PyverbsRDMAError carrying the C library's current errno."""
    import ctypes
    from .pyverbs_error import PyverbsRDMAError
    return PyverbsRDMAError(msg, ctypes.get_errno())


def inc_rkey(rkey):
    """ibv_inc_rkey: the next key of a memory window, its low 8 bits (the key's tag) incremented."""
    return (rkey & 0xFFFFFF00) | ((rkey + 1) & 0xFF)


def not_implemented(what):
    """What soft0 raises for a verb real Soft-RoCE (rxe) has and soft0 does not have yet: EOPNOTSUPP, the
    errno a device without the feature gives, so rdma-core's tests skip as they would there."""
    from .pyverbs_error import PyverbsRDMAError
    return PyverbsRDMAError(f"{what}: the emulated NIC soft0 does not implement this yet (Soft-RoCE does)",
                            EOPNOTSUPP)


def not_supported(what):
    """What soft0 raises for a verb neither it nor Soft-RoCE (rxe) supports: EOPNOTSUPP, as rxe does."""
    from .pyverbs_error import PyverbsRDMAError
    return PyverbsRDMAError(f"{what}: not supported by the emulated NIC soft0 (nor by Soft-RoCE)", EOPNOTSUPP)


class Record:
    """A pyverbs attribute structure (QPInitAttrEx, SrqAttr, ...): its fields as plain attributes. pyverbs'
    are Cython classes with fixed fields: setting one they lack (a typo) is an AttributeError there, and here."""
    _fields = {}
    _also = ()   # fields a subclass sets besides _fields' (views of them, names pyverbs gives them too)

    def __setattr__(self, name, value):
        if name not in self._fields and name not in self._also and not name.startswith("_"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        object.__setattr__(self, name, value)

    def __init__(self, *args, **kwargs):
        values = dict(self._fields)
        names = list(self._fields)
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments")
        values.update(zip(names, args))
        for key, value in kwargs.items():
            if key not in values:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {key!r}")
            values[key] = value
        self.__dict__.update(values)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


def absent(name, what, rxe_has=True, base=Resource):
    """A pyverbs class whose verb soft0 lacks: constructing it raises EOPNOTSUPP (see not_implemented)."""
    def __init__(self, *args, **kwargs):
        raise (not_implemented if rxe_has else not_supported)(what)
    return type(name, (base,), {"__init__": __init__, "__doc__": f"{what}: " + (
        "not in soft0 yet (Soft-RoCE has it): raises EOPNOTSUPP" if rxe_has else
        "neither soft0 nor Soft-RoCE supports it: raises EOPNOTSUPP")})
