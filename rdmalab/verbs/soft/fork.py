"""pyverbs.fork: fork support. soft0's registered memory is shared memory, which a fork() does not copy on
write, so fork needs no preparation: as libibverbs reports on kernels that need none, UNNEEDED."""
from .libibverbs_enums import ibv_fork_status
from .pyverbs_generation import returned


def fork_init():
    """ibv_fork_init(): nothing to do, and no error (as on kernels where fork is safe)."""


def is_fork_initialized():
    return returned(ibv_fork_status, ibv_fork_status.IBV_FORK_UNNEEDED)   # (an int for pyverbs <= 58)
