"""Protection domain: MRs and QPs of one PD may work together; a remote key of another PD is refused."""
import itertools
import os

from .base import Resource
from .device import Context
from .pyverbs_error import PyverbsUserError

_numbers = itertools.count(1)


class PD(Resource):
    def __init__(self, creator):
        super().__init__()
        if not isinstance(creator, Context):
            raise PyverbsUserError(f"Expected Context, got {type(creator)}")
        creator.check_open()
        self.ctx = creator
        self.handle = (os.getpid() << 20) | next(_numbers)  # unique across processes on this host
        self._depend_on(creator)
