#!/usr/bin/env python3
"""Register memory regions with different access flags and use their buffers (pyverbs <= 58 spelling).

Shape: linux-rdma/rdma-core Documentation/pyverbs.md v44.0 .. v58.0, "PD" and "MR" (nested `with`
blocks, `import pyverbs.enums as e`, `MR(pd, mr_len, flags)`), and rdma-core tests/test_mr.py
(MRTest.test_write / test_read: mr.write(data, len), mr.read(len, offset); lkey/rkey checks).

What it does: on the first device, allocates a PD and registers one MR per access-flag set (local
only, remote write, remote read, remote atomic, all of them), writes a pattern with MR.write() and
reads it back with MR.read() at an offset. Asserts: the data read back is what was written, the
length is as asked, and an MR with remote access has a non-zero rkey. Prints "OK mr_access_flags".
"""
import sys

import pyverbs.device as d
from pyverbs.pd import PD
from pyverbs.mr import MR
import pyverbs.enums as e


FLAG_SETS = {
    'local write': e.IBV_ACCESS_LOCAL_WRITE,
    'remote write': e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE,
    'remote read': e.IBV_ACCESS_REMOTE_READ,
    'remote atomic': e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC,
    'all remote': e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
                  e.IBV_ACCESS_REMOTE_ATOMIC,
}
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC


def main():
    dev_name = d.get_device_list()[0].name.decode()
    with d.Context(name=dev_name) as ctx:
        with PD(ctx) as pd:
            mr_len = 1000
            for what, flags in FLAG_SETS.items():
                with MR(pd, mr_len, flags) as mr:
                    text = f'pyverbs {what} '.ljust(40, '.')
                    mr.write(text, len(text))
                    back = mr.read(len(text), 0).decode()
                    tail = mr.read(10, 30)
                    print(f'{what:14} flags={flags:#06x} lkey={mr.lkey:#x} rkey={mr.rkey:#x} '
                          f'len={mr.length} read back {back!r}')
                    if back != text or tail != text[30:40].encode():
                        print(f'FAIL mr_access_flags: {what}: wrote {text!r}, read {back!r} / {tail!r}')
                        return 1
                    if mr.length != mr_len:
                        print(f'FAIL mr_access_flags: {what}: length {mr.length}, asked {mr_len}')
                        return 1
                    if flags & REMOTE and mr.rkey == 0:
                        print(f'FAIL mr_access_flags: {what}: remote access but rkey 0')
                        return 1
    print('OK mr_access_flags')
    return 0


if __name__ == '__main__':
    sys.exit(main())
