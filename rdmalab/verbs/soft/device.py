"""The device: one emulated RoCE NIC, `soft0`, shared by every process of this user on this host.

Its attributes mirror a Soft-RoCE (rxe) port: Ethernet link layer, active MTU 1024, GID 0 a link-local
address and GID 1 an IPv4-mapped RoCE v2 address (the one that routes). Its limits are its own.
"""
import collections
import os
import select
import weakref
from errno import EINTR, EINVAL, ENODATA

from . import shm
from .gid import GID
from .base import Resource, readonly, since
from .constants import IBV_EVENT_SRQ_LIMIT_REACHED, IBV_NODE_CA, IBV_TRANSPORT_IB
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .utils import be64toh, field_lines, gid_str
from .hardware import (DEVICE_ATTR, DEVICE_NAME, GID_TABLE_LEN, GIDS, NODE_GUID, PORT_ATTR,  # noqa: F401
                       SOFT_ROCE_PREFIX, active_mtu, device_names,
                       rxe_active_mtu)   # (pyverbs' device module; soft0's modules read hardware)



class Device:
    """An entry of get_device_list(); `name` is bytes, as in pyverbs."""

    def __init__(self, name, guid, node_type, transport_type, index):
        self.name, self.guid, self.node_type, self.transport_type, self.index = \
            name, guid, node_type, transport_type, index

    def __str__(self):
        return (f"Device {self.name.decode()}, node type {translate_node_type(self.node_type)}, transport type "
                f"{translate_transport_type(self.transport_type)}, guid {guid_to_hex(self.guid)}, index {self.index}")


def get_device_list():
    return [Device(DEVICE_NAME.encode(), NODE_GUID, IBV_NODE_CA, IBV_TRANSPORT_IB, 0)]


class _Attrs:
    """A plain record (DeviceAttr, PortAttr): attributes named as in pyverbs."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class DeviceAttr(_Attrs):
    def __str__(self):
        return field_lines((
            ("FW version", self.fw_version), ("Node guid", guid_format(self.node_guid)),
            ("Sys image GUID", guid_format(self.sys_image_guid)), ("Max MR size", hex(self.max_mr_size)),
            ("Page size cap", hex(self.page_size_cap)), ("Vendor ID", hex(self.vendor_id)),
            ("Vendor part ID", self.vendor_part_id), ("HW version", self.hw_ver), ("Max QP", self.max_qp),
            ("Max QP WR", self.max_qp_wr), ("Device cap flags", translate_device_caps(self.device_cap_flags)),
            ("Max SGE", self.max_sge), ("Max SGE RD", self.max_sge_rd), ("MAX CQ", self.max_cq),
            ("Max CQE", self.max_cqe), ("Max MR", self.max_mr), ("Max PD", self.max_pd),
            ("Max QP RD atom", self.max_qp_rd_atom), ("Max EE RD atom", self.max_ee_rd_atom),
            ("Max res RD atom", self.max_res_rd_atom), ("Max QP init RD atom", self.max_qp_init_rd_atom),
            ("Max EE init RD atom", self.max_ee_init_rd_atom), ("Atomic caps", self.atomic_caps),
            ("Max EE", self.max_ee), ("Max RDD", self.max_rdd), ("Max MW", self.max_mw),
            ("Max raw IPv6 QPs", self.max_raw_ipv6_qps), ("Max raw ethy QP", self.max_raw_ethy_qp),
            ("Max mcast group", self.max_mcast_grp), ("Max mcast QP attach", self.max_mcast_qp_attach),
            ("Max AH", self.max_ah), ("Max FMR", self.max_fmr), ("Max map per FMR", self.max_map_per_fmr),
            ("Max SRQ", self.max_srq), ("Max SRQ WR", self.max_srq_wr), ("Max SRQ SGE", self.max_srq_sge),
            ("Max PKeys", self.max_pkeys), ("local CA ack delay", self.local_ca_ack_delay),
            ("Phys port count", self.phys_port_cnt)))


class PortAttr(_Attrs):
    def __str__(self):
        return field_lines((
            ("Port state", port_state_to_str(self.state)), ("Max MTU", translate_mtu(self.max_mtu)),
            ("Active MTU", translate_mtu(self.active_mtu)), ("SM lid", self.sm_lid), ("Port lid", self.lid),
            ("lmc", hex(self.lmc)), ("Link layer", translate_link_layer(self.link_layer)),
            ("Max message size", hex(self.max_msg_sz)),
            ("Port cap flags", translate_port_cap_flags(self.port_cap_flags)),
            ("Port cap flags 2", translate_port_cap_flags2(self.port_cap_flags2)), ("max VL num", self.max_vl_num),
            ("Bad Pkey counter", self.bad_pkey_cntr), ("Qkey violations counter", self.qkey_viol_cntr),
            ("GID table len", self.gid_tbl_len), ("Pkey table len", self.pkey_tbl_len), ("SM sl", self.sm_sl),
            ("Subnet timeout", self.subnet_timeout), ("Init type reply", self.init_type_reply),
            ("Active width", width_to_str(self.active_width)),
            ("Active speed", speed_to_str(self.active_speed, self.active_speed_ex)),
            ("Phys state", phys_state_to_str(self.phys_state)), ("Flags", self.flags)), width=24)


_reaped_once = False


class Context(Resource):
    """An open device. Opening the first one in a process also reaps segments of dead processes.

    The device is soft0. A Soft-RoCE tutorial's Context(name="rxe0") opens it when RDMALAB_DEVICE=rxe0 is
    set (any Soft-RoCE name, rxe...): soft0 then answers to that name too (hardware.device_names), and
    ctx.name is the name it was opened by, as in pyverbs; get_device_list() still says soft0."""
    name = readonly("_name")

    def __init__(self, **kwargs):
        super().__init__()
        global _reaped_once
        self._cmd_fd = None
        if kwargs.get("cmd_fd") is not None:   # ibv_import_device: a context another process opened
            raise not_supported("Importing a device (Context(cmd_fd=...))")
        self._name = kwargs.get("name")
        if self._name is None:
            raise PyverbsUserError("Device name must be provided")
        if isinstance(self._name, bytes):
            self._name = self._name.decode()
        if self._name not in device_names():
            raise PyverbsRDMAError(f"Failed to find device {self._name}: {_not_found(self._name)}")
        if not _reaped_once:
            shm.reap_orphans()
            _reaped_once = True
        self._srqs = weakref.WeakSet()   # whose limit events get_async_event() reports
        self._async_events = collections.deque()   # raised by this process's own verbs objects (a CQ's overflow)

    @readonly
    def num_comp_vectors(self):
        return 1

    @readonly
    def cmd_fd(self):
        """The device's command file. soft0 has no kernel device: an open /dev/null stands in, which a
        program may dup() and hand on, though importing it (Context(cmd_fd=...)) is EOPNOTSUPP."""
        self.check_open()
        if self._cmd_fd is None:
            self._cmd_fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        return self._cmd_fd

    def _release(self):
        if self._cmd_fd is not None:
            os.close(self._cmd_fd)

    def query_device(self):
        self.check_open()
        return DeviceAttr(**DEVICE_ATTR)

    def query_port(self, port_num):
        self.check_open()
        if port_num != 1:
            raise PyverbsRDMAError(f"Failed to query port {port_num}", EINVAL)
        return PortAttr(**dict(PORT_ATTR, active_mtu=active_mtu()))

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
        return returned(_enums.ibv_gid_type_sysfs, 1 if index < len(GIDS) else 0)   # (a C enum: >= 59, a member)

    def query_device_ex(self, ex_input=None):
        """ibv_query_device_ex: the plain attributes (orig_attr) and the extended ones, as rxe reports
        them where soft0 has the feature, 0 where it has not (no ODP, TSO, RSS, DM, tag matching)."""
        self.check_open()
        return DeviceAttrEx(orig_attr=self.query_device(), **DEVICE_ATTR_EX)

    def query_gid_ex(self, port_num, gid_index, flags=0):
        self.check_open()
        if port_num != 1 or not 0 <= gid_index < GID_TABLE_LEN:
            raise PyverbsRDMAError(f"Failed to query gid table of port {port_num} in index {gid_index}", EINVAL)
        if gid_index >= len(GIDS):
            raise PyverbsRDMAError(f"Failed to query gid table of port {port_num} in index {gid_index}", ENODATA)
        return GIDEntry.of(gid_index)

    def query_gid_table(self, max_entries, flags=0):
        """The populated GID entries, at most max_entries of them; too small a buffer is -EINVAL (the
        negative errno libibverbs returns, which pyverbs passes on as is)."""
        self.check_open()
        if max_entries < len(GIDS):
            raise PyverbsRDMAError("Failed to query gid tables of the device", -EINVAL)
        return [GIDEntry.of(i) for i in range(len(GIDS))]

    @since(52)
    def get_pkey_index(self, port_num, pkey):
        """The index of `pkey` in the port's P_Key table (soft0's holds the default, 0xFFFF, alone): a P_Key not
        there is PyverbsRDMAError with no error code (-1), as ibv_get_pkey_index's -1 gives in pyverbs."""
        self.check_open()
        if port_num != 1 or pkey & 0x7FFF != 0x7FFF:
            raise PyverbsRDMAError(f"Failed to get pkey index of pkey = {pkey} of port {port_num}")
        return 0

    def query_rt_values_ex(self, comp_mask=1):
        raise not_supported("Real time values (ibv_query_rt_values_ex)")

    def raise_async_event(self, event_type):
        """Queue an asynchronous event for get_async_event()."""
        self._async_events.append(event_type)

    def get_async_event(self):
        """Wait for the next asynchronous event (ibv_get_async_event), as long as it takes; a signal ends
        the wait, as it ends the real blocking read (pyverbs raises the C call's return value, -1, as the
        error code here, where get_cq_event gives errno, 4). soft0 raises a CQ's IBV_EVENT_CQ_ERR (it
        overflowed: CQ.push) and an SRQ's IBV_EVENT_SRQ_LIMIT_REACHED (SRQ.take_event)."""
        from rdmalab.proc import waiting
        with waiting.signal_pipe() as signalled:   # (first: a signal between two naps ends the wait too)
            self.check_open()
            pause = 0.0005
            while True:
                if self._async_events:
                    return AsyncEvent(self._async_events.popleft())
                for srq in list(self._srqs):
                    if srq._take_event():
                        return AsyncEvent(IBV_EVENT_SRQ_LIMIT_REACHED)
                if signalled is not None:
                    if select.select([signalled], [], [], pause)[0]:
                        raise PyverbsRDMAError("Failed to get async event", -1)
                elif waiting.nap(pause) == EINTR:
                    raise PyverbsRDMAError("Failed to get async event", -1)
                pause = min(pause * 2, 0.05)

    def query_pkey(self, port_num, index):
        self.check_open()
        if port_num != 1 or index != 0:
            raise PyverbsRDMAError(f"Failed to query pkey {index} of port {port_num}")
        return 0xFFFF


import socket  # noqa: E402
import struct  # noqa: E402

from .base import Record, absent, not_supported  # noqa: E402
from . import libibverbs_enums as _enums  # noqa: E402
from .libibverbs_enums import ibv_device_cap_flags, ibv_port_cap_flags2  # noqa: E402
from .pyverbs_generation import returned, returns  # noqa: E402

DM = absent("DM", "Device memory (ibv_alloc_dm)", rxe_has=False)


def _not_found(name):
    """What a learner who named another device needs to know: this machine's device is soft0, and how
    to have it answer to a Soft-RoCE tutorial's name."""
    hint = (f"; or set RDMALAB_DEVICE={name} before opening it, and soft0 answers to '{name}' as well"
            if name.startswith(SOFT_ROCE_PREFIX) else "")
    return f"the RDMA device here is soft0, rdmalab's emulated NIC: open it with Context(name='soft0'){hint}"


class AsyncEvent:
    """An asynchronous event (pyverbs.device.AsyncEvent): its type; ack() acknowledges it."""

    def __init__(self, event_type=0):
        self.event_type = event_type

    def ack(self):
        pass


# what pyverbs >= 59 returns as enum members (pyverbs_generation.py)
returns(PortAttr, state=_enums.ibv_port_state, max_mtu=_enums.ibv_mtu, active_mtu=_enums.ibv_mtu)
returns(DeviceAttr, atomic_caps=_enums.ibv_atomic_cap)
returns(AsyncEvent, event_type=_enums.ibv_event_type)


class AllocDmAttr:
    def __init__(self, length=0, log_align_req=0, comp_mask=0):
        self.length, self.log_align_req, self.comp_mask = length, log_align_req, comp_mask


class FdArr:
    """ibv_fd_arr, for mlx5's DevX: a list of file descriptors."""

    def __init__(self, arr=None, count=0):
        self.arr, self.count = list(arr or []), count


try:
    NETDEV_INDEX = socket.if_nametoindex("lo")
except OSError:   # (a system without one: Linux numbers it 1)
    NETDEV_INDEX = 1


class GIDEntry(Record):
    """ibv_gid_entry. The GID's two halves are kept as the C struct has them, big-endian 64-bit words."""
    _fields = dict(gid_subnet_prefix=0, gid_interface_id=0, gid_index=0, port_num=0, gid_type=0, ndev_ifindex=0)

    @classmethod
    def of(cls, index):
        raw = bytes.fromhex(GIDS[index].replace(":", ""))
        prefix, interface = struct.unpack("=QQ", raw)
        # ibv_gid_type: 0 IB, 1 RoCE v1, 2 RoCE v2 (soft0's entries are RoCE v2, as rxe's IPv4-mapped one), on the
        # netdev soft0's addresses are on (the loopback interface), as rxe's are on the netdev it was added to
        return cls(prefix, interface, index, 1, 2, NETDEV_INDEX)

    def gid_str(self):
        return gid_str(self.gid_subnet_prefix, self.gid_interface_id)

    def __str__(self):
        return field_lines((("GID", self.gid_str()), ("GID Index", self.gid_index), ("Port number", self.port_num),
                            ("GID type", translate_gid_type(self.gid_type)), ("Ndev ifindex", self.ndev_ifindex)),
                           width=24)


class OdpCaps(Record):
    _fields = dict(general_caps=0, rc_odp_caps=0, uc_odp_caps=0, ud_odp_caps=0, xrc_odp_caps=0)


class PCIAtomicCaps(Record):
    _fields = dict(fetch_add=0, swap=0, compare_swap=0)


class TSOCaps(Record):
    _fields = dict(max_tso=0, supported_qpts=0)


class RSSCaps(Record):
    _fields = dict(supported_qpts=0, max_rwq_indirection_tables=0, rx_hash_fields_mask=0, rx_hash_function=0,
                   max_rwq_indirection_table_size=0)


class PacketPacingCaps(Record):
    _fields = dict(qp_rate_limit_min=0, qp_rate_limit_max=0, supported_qpts=0)


class TMCaps(Record):
    _fields = dict(max_rndv_hdr_size=0, max_num_tags=0, flags=0, max_ops=0, max_sge=0)


class CQModerationCaps(Record):
    _fields = dict(max_cq_count=0, max_cq_period=0)


class DeviceAttrEx(Record):
    _fields = dict(orig_attr=None, comp_mask=0, odp_caps=None, completion_timestamp_mask=0, hca_core_clock=0,
                   device_cap_flags_ex=0, tso_caps=None, pci_atomic_caps=None, rss_caps=None, max_wq_type_rq=0,
                   packet_pacing_caps=None, raw_packet_caps=0, tm_caps=None, cq_mod_caps=None, max_dm_size=0,
                   phys_port_cnt_ex=1)


DEVICE_ATTR_EX = dict(odp_caps=OdpCaps(), tso_caps=TSOCaps(), pci_atomic_caps=PCIAtomicCaps(), rss_caps=RSSCaps(),
                      packet_pacing_caps=PacketPacingCaps(), tm_caps=TMCaps(), cq_mod_caps=CQModerationCaps(),
                      device_cap_flags_ex=DEVICE_ATTR["device_cap_flags"], phys_port_cnt_ex=1)


# pyverbs.device's helpers: numbers to the words ibv_devinfo prints
def _named(table, value, invalid):
    return f"{table[value]} ({value})" if value in table else invalid


def translate_gid_type(gid_type):
    return {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}.get(gid_type, f"Unknown gid_type ({gid_type})")


def translate_transport_type(transport_type):
    return {0: "IB", 1: "IWARP", 2: "USNIC", 3: "USNIC UDP"}.get(transport_type, "Unknown")


def translate_node_type(node_type):
    return {1: "CA", 2: "Switch", 3: "Router", 4: "RNIC", 5: "USNIC", 6: "USNIC UDP"}.get(node_type, "Unknown")


def guid_to_hex(node_guid):
    return f"{node_guid:x}"


def guid_format(num):
    """A __be64 GUID as pyverbs reads it (host order), shown in 4 groups of 4 hex digits."""
    h = f"{be64toh(num):016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def port_state_to_str(port_state):
    return _named({0: "NOP", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "Defer"}, port_state,
                  f"Invalid state ({port_state})")


def translate_mtu(mtu):
    return _named({1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}, mtu, f"Invalid MTU ({mtu})")


def translate_link_layer(ll):
    return {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}.get(ll, f"Invalid link layer ({ll})")


def phys_state_to_str(phys):
    return _named({1: "Sleep", 2: "Polling", 3: "Disabled", 4: "Port configuration training", 5: "Link up",
                   6: "Link error recovery", 7: "Phy test"}, phys, "Invalid physical state")


def width_to_str(width):
    return _named({1: "1X", 2: "4X", 4: "8X", 8: "12X", 16: "2X"}, width, "Invalid width")


def speed_to_str(active_speed, active_speed_ex=0):
    speed = active_speed_ex or active_speed
    return _named({0: "0.0 Gbps", 1: "2.5 Gbps", 2: "5.0 Gbps", 4: "5.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps",
                   32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps", 256: "200.0 Gbps"}, speed, "Invalid speed")


def str_from_flags(flags, names):
    """The names of the bits set in `flags`, a line each, indented by 2, as pyverbs.device lists them."""
    return "\n  " + "".join(name + "\n  " for bit, name in names.items() if flags & bit)


DEVICE_CAP_NAMES = {int(flag): name for name, flag in ibv_device_cap_flags.__members__.items()}
PORT_CAP_NAMES = {int(getattr(_enums, name)): name for name in (
    "IBV_PORT_SM IBV_PORT_NOTICE_SUP IBV_PORT_TRAP_SUP IBV_PORT_OPT_IPD_SUP IBV_PORT_AUTO_MIGR_SUP "
    "IBV_PORT_SL_MAP_SUP IBV_PORT_MKEY_NVRAM IBV_PORT_PKEY_NVRAM IBV_PORT_LED_INFO_SUP "
    "IBV_PORT_SYS_IMAGE_GUID_SUP IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP IBV_PORT_EXTENDED_SPEEDS_SUP "
    "IBV_PORT_CAP_MASK2_SUP IBV_PORT_CM_SUP IBV_PORT_SNMP_TUNNEL_SUP IBV_PORT_REINIT_SUP IBV_PORT_DEVICE_MGMT_SUP "
    "IBV_PORT_VENDOR_CLASS_SUP IBV_PORT_DR_NOTICE_SUP IBV_PORT_CAP_MASK_NOTICE_SUP IBV_PORT_BOOT_MGMT_SUP "
    "IBV_PORT_LINK_LATENCY_SUP IBV_PORT_CLIENT_REG_SUP IBV_PORT_IP_BASED_GIDS").split()}
PORT_CAP2_NAMES = {int(flag): name for name, flag in ibv_port_cap_flags2.__members__.items()}


def translate_device_caps(flags):
    return str_from_flags(flags, DEVICE_CAP_NAMES)


def translate_port_cap_flags(flags):
    return str_from_flags(flags, PORT_CAP_NAMES)


def translate_port_cap_flags2(flags):
    return str_from_flags(flags, PORT_CAP2_NAMES)
