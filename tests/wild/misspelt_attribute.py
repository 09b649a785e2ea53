#!/usr/bin/env python3
"""A misspelt attribute on a pyverbs struct object must raise AttributeError, not pass silently.

Shape: the everyday slip in pyverbs programs that set QP attributes field by field (rdma-core
tests/base.py set_rnr_attributes: `qp_attr.min_rnr_timer = ...`, RCResources.to_rts:
`attr.timeout = ...`, Marovlo/easyPyverbs easyQP.py: `self.qa.path_mtu = 5`). pyverbs' QPAttr,
QPCap, AHAttr and GlobalRoute are Cython `cdef class`es (pyverbs/qp.pyx, pyverbs/addr.pyx) without a
__dict__: assigning a name they do not define raises AttributeError ("'pyverbs.qp.QPAttr' object
has no attribute 'timout'"), so a typo cannot leave the intended field at its default. Opens no device.

What it does: sets the correctly spelt fields (which must work), then tries four misspellings:
QPAttr().timout, QPAttr().rnr_retries, QPCap().max_send_wrs, GlobalRoute().sgid_idx. Asserts: each
misspelling raises AttributeError. Prints "OK misspelt_attribute", or which misspellings were
silently accepted.
"""
import sys

from pyverbs.addr import GlobalRoute
from pyverbs.qp import QPAttr, QPCap


def main():
    attr = QPAttr()
    attr.timeout = 14
    attr.rnr_retry = 7
    cap = QPCap()
    cap.max_send_wr = 4
    gr = GlobalRoute()
    gr.sgid_index = 1
    if (attr.timeout, attr.rnr_retry, cap.max_send_wr, gr.sgid_index) != (14, 7, 4, 1):
        print('FAIL misspelt_attribute: a correctly spelt field did not keep its value')
        return 1

    accepted = []
    for obj, name, value in ((QPAttr(), 'timout', 14), (QPAttr(), 'rnr_retries', 7),
                             (QPCap(), 'max_send_wrs', 4), (GlobalRoute(), 'sgid_idx', 1)):
        try:
            setattr(obj, name, value)
        except AttributeError as ex:
            print(f'{type(obj).__name__}().{name} = {value}: AttributeError: {ex}')
        else:
            accepted.append(f'{type(obj).__name__}().{name}')
    if accepted:
        print(f'FAIL misspelt_attribute: silently accepted: {", ".join(accepted)}')
        return 1
    print('OK misspelt_attribute')
    return 0


if __name__ == '__main__':
    sys.exit(main())
