"""pyverbs.cmid: the RDMA connection manager (librdmacm). soft0 has no IP address of its own (no netdev),
so rdma-core's CM tests skip before they get here; a CM id raises EOPNOTSUPP (Soft-RoCE has rdma_cm)."""
from .base import Record, absent


class ConnParam(Record):
    _fields = dict(resources=1, depth=1, flow_control=0, retry=5, rnr_retry=5, srq=0, qp_num=0,
                   private_data=None)


AddrInfo = absent("AddrInfo", "rdma_cm address resolution (rdma_getaddrinfo)", base=object)
CMEventChannel = absent("CMEventChannel", "rdma_cm event channels")
CMEvent = absent("CMEvent", "rdma_cm events", base=object)
CMID = absent("CMID", "rdma_cm ids")
JoinMCAttrEx = absent("JoinMCAttrEx", "rdma_cm multicast", base=object)
UDParam = absent("UDParam", "rdma_cm UD parameters", base=object)
