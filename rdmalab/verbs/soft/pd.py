"""Protection domain: MRs and QPs of one PD may work together; a remote key of another PD is refused."""
import itertools
import os

from .base import Resource, absent, readonly, typed
from .device import Context
from .pyverbs_error import PyverbsUserError

_numbers = itertools.count(1)


class PD(Resource):
    handle = readonly("_handle")

    def __new__(cls, creator=None):
        if hasattr(creator, "_protection_domain"):   # PD(cmid): the CM id's own PD, as pyverbs wraps it
            return creator._protection_domain()
        return super().__new__(cls)

    def __init__(self, creator):
        if hasattr(creator, "_protection_domain"):   # (made already, by the CM id)
            return
        super().__init__()
        if not isinstance(typed(creator, object, "creator", none=False), Context):
            raise PyverbsUserError(f"Cannot create PD from {type(creator)}")
        creator.check_open()
        self._ctx = creator
        self._handle = (os.getpid() << 20) | next(_numbers)  # unique across processes on this host
        self._depend_on(creator)

    def close(self):
        """As pyverbs, close the memory windows before the MRs (an MR a window is bound to stays registered)."""
        for child in list(self._dependants):
            if hasattr(child, "_bound_to"):   # (an MW)
                child.close()
        super().close()


class ParentDomainContext:
    """The allocator callbacks of a parent domain (pyverbs.pd.ParentDomainContext)."""

    def __init__(self, pd, alloc_func, free_func, user_data=None):
        self.pd, self.alloc_func, self.free_func, self.user_data = pd, alloc_func, free_func, user_data


class ParentDomainInitAttr:
    def __init__(self, pd, pd_context=None):
        self.pd, self.pd_context = pd, pd_context


ParentDomain = absent("ParentDomain", "Parent domains (ibv_alloc_parent_domain)", rxe_has=False)
