"""What every verbs object shares: close() that also closes its dependants, and `with` support.

pyverbs closes an object's dependants first (closing a PD closes its MRs and QPs). Using an object
after close() crashes real pyverbs (a NULL pointer); here it raises PyverbsUserError instead.
"""
import weakref

from .pyverbs_error import PyverbsUserError


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
