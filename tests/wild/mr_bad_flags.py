#!/usr/bin/env python3
"""Register MRs with illegal access flags and check the errno pyverbs reports (pyverbs >= 59 spelling).

Shape: linux-rdma/rdma-core tests/test_mr.py (MRTest.test_reg_mr_bad_flags / test_reg_mr_bad_flow,
v59: `from pyverbs.libibverbs_enums import ibv_access_flags`, `except PyverbsRDMAError as ex:
... ex.error_code == errno.EINVAL`) and tests/utils.py filter_illegal_access_flags (remote write or
remote atomic need local write).

What it does: opens the first device, allocates a PD, tries MR(pd, 4096, REMOTE_WRITE) and
MR(pd, 4096, REMOTE_ATOMIC) without LOCAL_WRITE, and checks that each raises PyverbsRDMAError with
error_code EINVAL (22), as ibv_reg_mr's kernel check gives; then registers the legal form of each and
checks that it works. Prints "OK mr_bad_flags".
"""
import errno
import sys

from pyverbs.device import Context, get_device_list
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.libibverbs_enums import ibv_access_flags


def main():
    ctx = Context(name=get_device_list()[0].name.decode())
    pd = PD(ctx)
    bad = {'REMOTE_WRITE without LOCAL_WRITE': ibv_access_flags.IBV_ACCESS_REMOTE_WRITE,
           'REMOTE_ATOMIC without LOCAL_WRITE': ibv_access_flags.IBV_ACCESS_REMOTE_ATOMIC}
    for what, flags in bad.items():
        try:
            mr = MR(pd, 4096, flags)
        except PyverbsRDMAError as ex:
            print(f'{what}: PyverbsRDMAError, errno {ex.error_code}: {ex}')
            if ex.error_code != errno.EINVAL:
                print(f'FAIL mr_bad_flags: {what}: errno {ex.error_code}, expected EINVAL ({errno.EINVAL})')
                return 1
        else:
            mr.close()
            print(f'FAIL mr_bad_flags: {what} was registered')
            return 1
        good = MR(pd, 4096, flags | ibv_access_flags.IBV_ACCESS_LOCAL_WRITE)
        print(f'{what.split()[0]} | LOCAL_WRITE: registered, rkey {good.rkey:#x}')
        good.close()
    pd.close()
    ctx.close()
    print('OK mr_bad_flags')
    return 0


if __name__ == '__main__':
    sys.exit(main())
