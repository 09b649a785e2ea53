"""pyverbs.wq: work queues and RSS indirection tables, for raw packet QPs: neither soft0 nor Soft-RoCE
has them; creating one raises EOPNOTSUPP as rxe does."""
from .base import Record, absent
from .libibverbs_enums import IBV_WQT_RQ, ibv_wq_state, ibv_wq_type
from .pyverbs_generation import returns


class WQInitAttr(Record):
    _fields = dict(wq_context=None, wq_pd=None, wq_cq=None, wq_type=IBV_WQT_RQ, max_wr=100, max_sge=1,
                   comp_mask=0, create_flags=0)


class WQAttr(Record):
    _fields = dict(attr_mask=0, wq_state=0, curr_wq_state=0, flags=0, flags_mask=0)


# what pyverbs >= 59 returns as enum members (pyverbs_generation.py)
returns(WQInitAttr, wq_type=ibv_wq_type)
returns(WQAttr, wq_state=ibv_wq_state, curr_wq_state=ibv_wq_state)


class RwqIndTableInitAttr(Record):
    _fields = dict(log_ind_tbl_size=5, wqs_list=None, comp_mask=0)


class RxHashConf(Record):
    _fields = dict(rx_hash_function=0, rx_hash_key_len=0, rx_hash_key=None, rx_hash_fields_mask=0)


WQ = absent("WQ", "Work queues (WQ)", rxe_has=False)
RwqIndTable = absent("RwqIndTable", "RSS indirection tables", rxe_has=False)
