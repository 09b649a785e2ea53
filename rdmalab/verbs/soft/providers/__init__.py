"""pyverbs.providers: vendor-specific (direct verbs) modules, mlx5 and efa.

soft0 is neither an mlx5 nor an efa device. rdma-core's tests import these modules everywhere (their
utils.py does) and skip the vendor tests on other devices by the device's vendor id; so the modules
exist here, and every name in them is a stand-in: a class that raises on construction what pyverbs
raises on a device of another vendor (PyverbsUserError 'This is not an MLX5 device'), an enum whose
every member reads as 0. Nothing of them works, and nothing pretends to.
"""
import importlib.abc
import importlib.machinery
import sys
import types

from ..pyverbs_error import PyverbsUserError

KNOWN = {
    "mlx5": ("mlx5dv", "mlx5_enums", "mlx5dv_objects", "mlx5dv_mkey", "mlx5dv_sched", "mlx5dv_flow",
             "mlx5dv_dmabuf", "mlx5dv_crypto", "mlx5_vfio", "dr_domain", "dr_table", "dr_matcher", "dr_rule",
             "dr_action", "libmlx5"),
    "efa": ("efadv", "efa_enums", "libefa"),
}
VENDOR = {"mlx5": "MLX5", "efa": "EFA"}


class _AbsentEnumMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return 0


def _stand_in(vendor, module, name):
    if name[:1].isupper() and "Attr" in name:               # an attribute structure: a plain record
        return type(name, (), {"__init__": lambda self, *args, **kwargs: self.__dict__.update(kwargs)})
    if name[:1].isupper() and not name.isupper():          # a class: Mlx5Context, EfaCQ, DrDomain
        def __init__(self, *args, **kwargs):
            raise PyverbsUserError(f"This is not an {VENDOR[vendor]} device (soft0 has no "
                                   f"{vendor} direct verbs: {module}.{name})")
        return type(name, (), {"__init__": __init__})
    if name.lstrip("_")[:1].isupper():                       # a constant: MLX5_OPCODE_SEND
        return 0
    return _AbsentEnumMeta(name, (), {})                     # an enum class: mlx5dv_qp_init_attr_mask


class _Absent(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(self._vendor, self.__name__.rsplit(".", 1)[-1], name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if fullname.startswith(__name__ + ".") and len(parts) == len(__name__.split(".")) + 2 \
                and parts[-1] in KNOWN.get(parts[-2], ()):
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        module = _Absent(spec.name)
        module._vendor = spec.name.split(".")[-2]
        return module

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
