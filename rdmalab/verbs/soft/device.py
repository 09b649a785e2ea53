"""The device: one emulated RoCE NIC, `soft0`, shared by every process of this user on this host.

Its attributes mirror a Soft-RoCE (rxe) port: Ethernet link layer, active MTU 1024, GID 0 a link-local
address and GID 1 an IPv4-mapped RoCE v2 address (the one that routes). Its limits are its own.
"""
from . import shm
from .addr import GID
from .base import Resource
from .enums import (IBV_ATOMIC_HCA, IBV_LINK_LAYER_ETHERNET, IBV_MTU_1024, IBV_MTU_4096,
                               IBV_NODE_CA, IBV_PORT_ACTIVE, IBV_TRANSPORT_IB)
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError

DEVICE_NAME = "soft0"
NODE_GUID = 0x0002C9FFFE5AB000
GIDS = ["fe80:0000:0000:0000:0202:c9ff:fe5a:b000",   # 0: link-local (reaches this host only)
        "0000:0000:0000:0000:0000:ffff:7f00:0001"]   # 1: ::ffff:127.0.0.1, IPv4-mapped RoCE v2
GID_TABLE_LEN = 1024
EINVAL = 22


class Device:
    """An entry of get_device_list(); `name` is bytes, as in pyverbs."""

    def __init__(self, name, guid, node_type, transport_type, index):
        self.name, self.guid, self.node_type, self.transport_type, self.index = \
            name, guid, node_type, transport_type, index

    def __str__(self):
        return f"Device {self.name.decode()}, node type CA, transport type IB, guid {self.guid:016x}, index {self.index}"


def get_device_list():
    return [Device(DEVICE_NAME.encode(), NODE_GUID, IBV_NODE_CA, IBV_TRANSPORT_IB, 0)]


class _Attrs:
    """A plain record (DeviceAttr, PortAttr): attributes named as in pyverbs."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class DeviceAttr(_Attrs):
    pass


class PortAttr(_Attrs):
    pass


DEVICE_ATTR = dict(
    fw_version="0.1.0 (rdmalab emulated NIC)", node_guid=NODE_GUID, sys_image_guid=NODE_GUID,
    max_mr_size=(1 << 64) - 1, page_size_cap=0xFFFFF000, vendor_id=0, vendor_part_id=0, hw_ver=0,
    max_qp=65536, max_qp_wr=16384, device_cap_flags=0, max_sge=32, max_sge_rd=32, max_cq=65536,
    max_cqe=32767, max_mr=65536, max_pd=65536, max_qp_rd_atom=128, max_ee_rd_atom=0,
    max_res_rd_atom=258048, max_qp_init_rd_atom=128, max_ee_init_rd_atom=0, atomic_caps=IBV_ATOMIC_HCA,
    max_ee=0, max_rdd=0, max_mw=0, max_raw_ipv6_qp=0, max_raw_ethy_qp=0, max_mcast_grp=0,
    max_mcast_qp_attach=0, max_total_mcast_qp_attach=0, max_ah=65536, max_fmr=0, max_map_per_fmr=0,
    max_srq=0, max_srq_wr=0, max_srq_sge=0, max_pkeys=1, local_ca_ack_delay=15, phys_port_cnt=1)

PORT_ATTR = dict(
    state=IBV_PORT_ACTIVE, max_mtu=IBV_MTU_4096, active_mtu=IBV_MTU_1024, gid_tbl_len=GID_TABLE_LEN,
    port_cap_flags=0x10000, max_msg_sz=0x800000, bad_pkey_cntr=0, qkey_viol_cntr=0, pkey_tbl_len=1,
    lid=0, sm_lid=0, lmc=0, max_vl_num=1, sm_sl=0, subnet_timeout=0, init_type_reply=0,
    active_width=1, active_speed=1, phys_state=5, link_layer=IBV_LINK_LAYER_ETHERNET, flags=0,
    port_cap_flags2=0)

_reaped_once = False


class Context(Resource):
    """An open device. Opening the first one in a process also reaps segments of dead processes."""

    def __init__(self, **kwargs):
        super().__init__()
        global _reaped_once
        self.name = kwargs.get("name")
        if self.name is None:
            raise PyverbsUserError("Device name must be provided")
        if isinstance(self.name, bytes):
            self.name = self.name.decode()
        if self.name != DEVICE_NAME:
            raise PyverbsRDMAError(f"Failed to find device {self.name}")
        if not _reaped_once:
            shm.reap_orphans()
            _reaped_once = True

    @property
    def num_comp_vectors(self):
        return 1

    def query_device(self):
        self.check_open()
        return DeviceAttr(**DEVICE_ATTR)

    def query_port(self, port_num):
        self.check_open()
        if port_num != 1:
            raise PyverbsRDMAError(f"Failed to query port {port_num}", EINVAL)
        return PortAttr(**PORT_ATTR)

    def query_gid(self, port_num, index):
        self.check_open()
        if port_num != 1 or not 0 <= index < GID_TABLE_LEN:
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}")
        return GID(GIDS[index]) if index < len(GIDS) else GID()

    def query_gid_type(self, port_num, index):
        """1 (RoCE v2) for the populated entries, 0 for the empty ones, as rxe reports them."""
        self.check_open()
        if port_num != 1 or not 0 <= index < GID_TABLE_LEN:
            raise PyverbsRDMAError(f"Failed to query gid type of port {port_num} and gid index {index}")
        return 1 if index < len(GIDS) else 0

    def query_pkey(self, port_num, index):
        self.check_open()
        if port_num != 1 or index != 0:
            raise PyverbsRDMAError(f"Failed to query pkey {index} of port {port_num}")
        return 0xFFFF
