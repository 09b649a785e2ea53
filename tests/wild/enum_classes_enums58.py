#!/usr/bin/env python3
"""Enumerate MR access-flag combinations through pyverbs.enums' enum classes (pyverbs <= 58).

Shape: linux-rdma/rdma-core tests/utils.py of v58.0, get_access_flags(): `import pyverbs.enums as
e`, `vals = list(e.ibv_access_flags)`, `vals.remove(e.IBV_ACCESS_ON_DEMAND)` when the device has no
ODP, combinations of the members OR-ed with `flag.value`, and tests/test_mr.py registering an MR
with each. In pyverbs <= 58, pyverbs/enums.pyx is libibverbs_enums.pxd compiled as a module: each
named `cpdef enum` is a Python enum class there (ibv_access_flags, ibv_qp_type, ...) and its members
are module-level names too, so both spellings work.

What it does: opens the first device, builds the list of access flags from the class
`e.ibv_access_flags` minus those the device cannot do (ON_DEMAND without ODP, MW_BIND without memory
windows, REMOTE_ATOMIC without atomics; of the rest it keeps the five basic ones: LOCAL_WRITE,
REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND), forms every legal pair (remote write / atomic need local write), and
registers an MR with each. Asserts: the class exists and iterates to members whose `.value` and int
value agree with the flat names, and every legal pair registers. Prints "OK enum_classes_enums58".
"""
import itertools
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError


def legal(combo):
    flags = 0
    for f in combo:
        flags |= f.value
    needs_lw = flags & (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC)
    return not needs_lw or flags & e.IBV_ACCESS_LOCAL_WRITE


def main():
    ctx = d.Context(name=d.get_device_list()[0].name.decode())
    attr = ctx.query_device()
    attr_ex = ctx.query_device_ex()
    vals = list(e.ibv_access_flags)
    print(f'{len(vals)} members in e.ibv_access_flags:', ' '.join(v.name for v in vals))
    if e.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE.value != e.IBV_ACCESS_LOCAL_WRITE:
        print('FAIL enum_classes_enums58: class member and flat name differ')
        return 1
    if not attr_ex.odp_caps.general_caps & e.IBV_ODP_SUPPORT:
        vals.remove(e.IBV_ACCESS_ON_DEMAND)
    if not attr.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW:
        vals.remove(e.IBV_ACCESS_MW_BIND)
    if not attr.atomic_caps & e.IBV_ATOMIC_HCA:
        vals.remove(e.IBV_ACCESS_REMOTE_ATOMIC)
    basic = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
             e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_MW_BIND)
    vals = [v for v in vals if v.value & basic]
    pd = PD(ctx)
    count = 0
    for combo in itertools.combinations(vals, 2):
        if not legal(combo):
            continue
        flags = sum(f.value for f in combo)
        try:
            MR(pd, 4096, flags).close()
        except PyverbsRDMAError as ex:
            print(f'FAIL enum_classes_enums58: MR with {"|".join(f.name for f in combo)} refused: {ex}')
            return 1
        count += 1
    print(f'registered {count} MRs, one per legal pair of access flags')
    print('OK enum_classes_enums58')
    return 0


if __name__ == '__main__':
    sys.exit(main())
