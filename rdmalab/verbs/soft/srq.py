"""Shared receive queues (pyverbs.srq). soft0 has no SRQ yet (Soft-RoCE has): SRQ() raises EOPNOTSUPP,
the errno rdma-core's tests skip on. The attribute structures are real."""
from .base import Record, absent
from .libibverbs_enums import IBV_WR_TAG_ADD, IBV_OPS_SIGNALED


class SrqAttr(Record):
    _fields = dict(max_wr=100, max_sge=1, srq_limit=0)


class SrqInitAttr(Record):
    _fields = dict(attr=None)

    def __init__(self, attr=None):
        super().__init__(attr if attr is not None else SrqAttr())

    max_wr = property(lambda self: self.attr.max_wr)
    max_sge = property(lambda self: self.attr.max_sge)
    srq_limit = property(lambda self: self.attr.srq_limit)


class SrqInitAttrEx(Record):
    _fields = dict(max_wr=100, max_sge=1, srq_limit=0, comp_mask=0, srq_type=0, pd=None, xrcd=None,
                   max_num_tags=0, max_ops=0, cq=None)


class OpsWr(Record):
    _fields = dict(wr_id=0, opcode=IBV_WR_TAG_ADD, flags=IBV_OPS_SIGNALED, next_wr=None, unexpected_cnt=0,
                   recv_wr_id=0, num_sge=None, tag=0, mask=0, sg_list=None)


SRQ = absent("SRQ", "Shared receive queues (SRQ)")
