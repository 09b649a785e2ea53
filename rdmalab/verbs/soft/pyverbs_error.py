"""pyverbs' exceptions, with the same classes, messages and `error_code` (an errno)."""
import os


class PyverbsError(Exception):
    """Base class; `error_code` is an errno, or -1 when there is none."""

    def __init__(self, msg, error_code=-1):
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg)


class PyverbsRDMAError(PyverbsError):
    """A verb failed, as the device or libibverbs reported it."""

    def __init__(self, msg, error_code=-1):
        super().__init__(msg, error_code)
        self._error_code = error_code

    @property
    def error_code(self):
        return self._error_code


class PyverbsUserError(PyverbsError):
    """The program called pyverbs wrongly (bad argument, closed object)."""

    def __init__(self, msg):
        super().__init__(msg)
