"""What every verbs object shares: close() that also closes its dependants, and `with` support.

pyverbs closes an object's dependants first (closing a PD closes its MRs and QPs). Using an object
after close() crashes real pyverbs (a NULL pointer); here it raises PyverbsUserError instead.
"""
import enum
import operator
import weakref
from errno import EOPNOTSUPP

from .pyverbs_error import PyverbsRDMAError, PyverbsUserError  # noqa: F401 (pyverbs.base has both)


# ---------------------------------------------------------------- pyverbs' classes are Cython's
#
# pyverbs' classes are Cython cdef classes: the names each has are fixed (its properties and methods), some
# of them read-only, and an argument declared with a class (`QPCap cap=None`) takes nothing else. So a
# misspelt or invented name (`wr.rkey = key`, `mr.lkey = 5`, `QPInitAttr(cap={...})`) fails there at once,
# and must here too: a program soft0 runs must run on a real device. soft0 keeps its own state under names
# that start with "_"; the public names of its classes are pyverbs' (tests/soft/test_strictness.py).

def pyverbs_name(cls):
    """The name pyverbs' messages give a class (Cython's tp_name): 'pyverbs.mr.MR' for soft0's mr.MR (a
    Cython class there), 'dict' for a dict, 'rdma_port_space' for an enum (a Python class there too)."""
    module = cls.__module__
    if module.startswith(__package__ + ".") and not issubclass(cls, (enum.Enum, Exception)):
        module = module[len(__package__) + 1:]   # rdmalab.verbs.soft.mr -> mr
        return f"pyverbs.{PYVERBS_MODULE.get(module, module)}.{cls.__name__}"
    return cls.__name__


PYVERBS_MODULE = {"qpex": "qp", "cqex": "cq", "gid": "addr"}   # soft0's modules whose classes are another's


def no_attribute(obj, name):
    return AttributeError(f"'{pyverbs_name(type(obj))}' object has no attribute '{name}'")


class since:
    """Decorator of a method pyverbs added in rdma-core release `version`: a program soft0 answers as an older
    pyverbs (RDMALAB_PYVERBS=44) finds no such attribute, as on that install (hasattr() is False)."""

    def __init__(self, version):
        self.version = version

    def __call__(self, method):
        self.method = method
        return self

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        from rdmalab import settings
        older = settings.pyverbs_version()
        if obj is not None and older is not None and older < self.version:
            raise no_attribute(obj, self.name)
        return self.method.__get__(obj, owner)


class PyverbsObject:
    """pyverbs.base.PyverbsObject, every pyverbs class's base. A class on the data path (SendWR, RecvWR,
    SGE, ...) fixes its names with __slots__, which costs nothing per attribute set; the others are Fixed.
    Reading a name a class lacks raises Python's AttributeError, which names the class without pyverbs'
    module ("'SendWR' object has no attribute 'rkey'"): a __getattr__ that named it as pyverbs does would
    slow every attribute read of the object (Python 3.11 specializes reads only for classes without one)."""
    __slots__ = ()

    def set_log_level(self, val):
        """pyverbs sets its logger's level; soft0 logs nothing."""


class Fixed(PyverbsObject):
    """The fixed names of a Cython class, for soft0's classes whose attributes are set rarely (devices,
    PDs, MRs, QPs, CM ids: not WRs): setting a public name the class does not define raises pyverbs'
    AttributeError (soft0 keeps its own state under "_" names)."""
    __slots__ = ()

    def __setattr__(self, name, value):
        if name[0] != "_" and not hasattr(type(self), name):
            raise no_attribute(self, name)
        object.__setattr__(self, name, value)


class readonly(property):
    """A pyverbs property without a setter: `lkey = readonly("_lkey")` reads the field `_lkey`, or
    `@readonly` over a method computes it. Writing raises what Cython raises."""

    def __init__(self, fget, doc=None):
        if isinstance(fget, str):
            fget, doc = operator.attrgetter(fget), doc or "(read-only, as in pyverbs)"
        super().__init__(fget, self._refuse)
        self.__doc__ = doc or fget.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def _refuse(self, obj, value):
        raise AttributeError(f"attribute '{self.name}' of '{pyverbs_name(type(obj))}' objects is not writable")


def typed(value, cls, argument, none=True):
    """Cython's check of an argument declared with a class (`def __init__(self, QPCap cap=None)`; with
    `not None` when `none` is False): `value`, or the TypeError pyverbs raises before doing anything."""
    if value is None:
        if none:
            return None
        raise TypeError(f"Argument '{argument}' must not be None")
    if isinstance(value, cls):
        return value
    raise TypeError(f"Argument '{argument}' has incorrect type (expected {pyverbs_name(cls)}, "
                    f"got {pyverbs_name(type(value))})")


class Resource(Fixed):
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


class Record(PyverbsObject):
    """A pyverbs attribute structure (QPInitAttrEx, SrqAttr, ...): its fields as plain attributes. pyverbs'
    are Cython classes with fixed fields: setting one they lack (a typo) is an AttributeError there, and here."""
    _fields = {}
    _also = ()   # fields a subclass sets besides _fields' (views of them, names pyverbs gives them too)

    def __setattr__(self, name, value):
        if name not in self._fields and name not in self._also and not name.startswith("_"):
            raise no_attribute(self, name)
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
