"""pyverbs.flow: steering flows, for raw packet QPs: neither soft0 nor Soft-RoCE has them."""
from .base import Record, absent
from .libibverbs_enums import IBV_FLOW_ATTR_NORMAL


class FlowAttr(Record):
    _fields = dict(num_of_specs=0, flow_type=IBV_FLOW_ATTR_NORMAL, priority=0, port=1, flags=0)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.specs = []


Flow = absent("Flow", "Flow steering", rxe_has=False)
FlowAction = absent("FlowAction", "Flow actions", rxe_has=False, base=object)
