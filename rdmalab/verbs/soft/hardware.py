"""What soft0 is, as a port of Soft-RoCE (rxe) would report it: its name, GUID, GID table, limits and MTU.

Every module of the emulated NIC reads these; this one imports no module of soft0's but the enum values
and the link's settings (and RDMALAB_DEVICE, for the names soft0 answers to), so that anything may import
it (device.py's Context and query_*() serve them).
"""
from rdmalab import settings

from . import link as _link
from .constants import (IBV_ATOMIC_HCA, IBV_DEVICE_MEM_MGT_EXTENSIONS, IBV_DEVICE_MEM_WINDOW,
                        IBV_DEVICE_MEM_WINDOW_TYPE_2B, IBV_DEVICE_RC_RNR_NAK_GEN, IBV_DEVICE_SRQ_RESIZE,
                        IBV_LINK_LAYER_ETHERNET, IBV_MTU_256, IBV_MTU_1024, IBV_MTU_4096, IBV_PORT_ACTIVE)
from .utils import be64toh

DEVICE_NAME = "soft0"
SOFT_ROCE_PREFIX = "rxe"   # a Soft-RoCE device's name (rxe0, rxe_eth0): soft0 answers to one RDMALAB_DEVICE gives
NODE_GUID = 0x0002C9FFFE5AB000
GIDS = ["fe80:0000:0000:0000:0202:c9ff:fe5a:b000",   # 0: link-local (reaches this host only)
        "0000:0000:0000:0000:0000:ffff:7f00:0001"]   # 1: ::ffff:127.0.0.1, IPv4-mapped RoCE v2
GID_TABLE_LEN = 1024
LINK = _link.name()   # shm or udp (RDMALAB_SOFT_LINK), read once: a process's QPs all use one link
HOST = _link.host() if LINK == "udp" else None   # this process's host on the udp link (RDMALAB_SOFT_HOST)
if LINK == "udp":   # on the wire link, GID 1 is this host's own address
    GIDS[1] = _link.gid_of(HOST)


def device_names():
    """The names soft0 answers to: its own and, when RDMALAB_DEVICE names a Soft-RoCE device (rxe0, ...), that
    one too, so that a Soft-RoCE tutorial's Context(name="rxe0") runs here. Read when a device is opened."""
    alias = settings.device()
    return (DEVICE_NAME, alias) if alias and alias.startswith(SOFT_ROCE_PREFIX) else (DEVICE_NAME,)


# of rxe's device_cap_flags, those soft0 has: RNR NAKs from an RC responder, resizable SRQs, the memory management
# extensions (local invalidate, send with invalidate), memory windows of type 1 and 2B
CAP_FLAGS = (IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_MEM_WINDOW
             | IBV_DEVICE_MEM_WINDOW_TYPE_2B)
# node_guid and sys_image_guid are ibv_device_attr's __be64 fields, read as pyverbs reads them (in host order:
# on x86 the GUID's bytes reversed), so that guid_format() shows them as 0002:c9ff:fe5a:b000, as for rxe0
DEVICE_ATTR = dict(
    fw_version="0.1.0 (rdmalab emulated NIC)", node_guid=be64toh(NODE_GUID), sys_image_guid=be64toh(NODE_GUID),
    max_mr_size=(1 << 64) - 1, page_size_cap=0xFFFFF000, vendor_id=0xFFFFFF, vendor_part_id=0, hw_ver=0,
    max_qp=65536, max_qp_wr=16384, device_cap_flags=CAP_FLAGS, max_sge=32, max_sge_rd=32, max_cq=65536,
    max_cqe=32767, max_mr=65536, max_pd=65536, max_qp_rd_atom=128, max_ee_rd_atom=0,
    max_res_rd_atom=258048, max_qp_init_rd_atom=128, max_ee_init_rd_atom=0, atomic_caps=IBV_ATOMIC_HCA,
    max_ee=0, max_rdd=0, max_mw=0x7FFFF, max_raw_ipv6_qps=0, max_raw_ethy_qp=0, max_mcast_grp=8192,
    max_mcast_qp_attach=56, max_total_mcast_qp_attach=0x70000, max_ah=65536, max_fmr=0, max_map_per_fmr=0,
    max_srq=917503, max_srq_wr=1 << 20, max_srq_sge=27, max_pkeys=1, local_ca_ack_delay=15, phys_port_cnt=1)

PORT_ATTR = dict(
    state=IBV_PORT_ACTIVE, max_mtu=IBV_MTU_4096, active_mtu=IBV_MTU_1024, gid_tbl_len=GID_TABLE_LEN,
    port_cap_flags=0x10000, max_msg_sz=0x800000, bad_pkey_cntr=0, qkey_viol_cntr=0, pkey_tbl_len=1,
    lid=0, sm_lid=0, lmc=0, max_vl_num=1, sm_sl=0, subnet_timeout=0, init_type_reply=0,
    active_width=1, active_speed=1, phys_state=5, link_layer=IBV_LINK_LAYER_ETHERNET, flags=1,  # GRH required
    port_cap_flags2=0, active_speed_ex=0)

_active_mtu = None


def active_mtu():
    """The port's active MTU (an IBV_MTU_* value). On the shm link soft0 stands for rxe on an Ethernet of
    MTU 1500: 1024. On the udp link it is rxe's rule applied to the network interface that holds this
    host's address (lo, for any 127.0.0.x: 4096)."""
    global _active_mtu
    if _active_mtu is None:
        netdev = _link.netdev_mtu(HOST) if LINK == "udp" else None
        _active_mtu = rxe_active_mtu(netdev or 1500)
    return _active_mtu


def rxe_active_mtu(netdev_mtu):
    """rxe's active MTU on a network interface of MTU `netdev_mtu`: the largest IB MTU that fits once
    80 bytes of headers are taken off (1500: 1024; lo's 65536, or jumbo frames' 9000: 4096; at least 256)."""
    usable = netdev_mtu - 80
    return max((m for m in range(IBV_MTU_256, IBV_MTU_4096 + 1) if 128 << m <= usable), default=IBV_MTU_256)
