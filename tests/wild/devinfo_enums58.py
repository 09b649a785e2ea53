#!/usr/bin/env python3
"""List the RDMA devices and query the first one, in the pyverbs <= 58 spelling.

Shape: linux-rdma/rdma-core pyverbs/examples/ib_devices.py (the device table) and
Documentation/pyverbs.md of v44.0 .. v58.0 ("Query a device", "Query port", "Query GID"), with the
GID-table walk of rdma-core tests/base.py (RDMATestCase._add_gids_per_port: skip zero GIDs, note
RoCE v2 entries). Enums: `import pyverbs.enums as e`, flat integer names.

What it does: prints a table of devices (name, node type, transport, GUID), opens the first device
by name, prints a few DeviceAttr fields and the PortAttr of port 1, and the populated part of the
GID table with each entry's type. Asserts: at least one device, port 1 ACTIVE, at least one
non-zero GID. Prints "OK devinfo_enums58" on success.
"""
import sys

from pyverbs import device as d
import pyverbs.enums as e

ZERO_GID = '0000:0000:0000:0000:0000:0000:0000:0000'


def main():
    lst = d.get_device_list()
    if not lst:
        print('FAIL devinfo_enums58: no RDMA device found')
        return 1
    row = '{:^16}{:^12}{:^16}{:^20}'
    print(row.format('Device', 'Node Type', 'Transport Type', 'Node GUID'))
    for dev in lst:
        print(row.format(dev.name.decode(), d.translate_node_type(dev.node_type),
                         d.translate_transport_type(dev.transport_type), d.guid_to_hex(dev.guid)))

    name = lst[0].name.decode()
    ctx = d.Context(name=name)
    attr = ctx.query_device()
    print(f'{name}: fw {attr.fw_version}, max_qp {attr.max_qp}, max_cqe {attr.max_cqe}, '
          f'max_mr_size {hex(attr.max_mr_size)}, phys ports {attr.phys_port_cnt}, '
          f'atomic caps {attr.atomic_caps}')
    port_num = 1
    port_attr = ctx.query_port(port_num)
    print(f'port {port_num}: state {d.port_state_to_str(port_attr.state)}, '
          f'active MTU {d.translate_mtu(port_attr.active_mtu)}, '
          f'link layer {d.translate_link_layer(port_attr.link_layer)}, gid_tbl_len {port_attr.gid_tbl_len}')
    if port_attr.state != e.IBV_PORT_ACTIVE:
        print(f'FAIL devinfo_enums58: port {port_num} of {name} is not active')
        return 1

    populated = 0
    for idx in range(port_attr.gid_tbl_len):
        gid = ctx.query_gid(port_num, idx)
        if gid.gid == ZERO_GID:
            continue
        populated += 1
        kind = 'RoCE v2' if ctx.query_gid_type(port_num, idx) == e.IBV_GID_TYPE_SYSFS_ROCE_V2 else 'IB/RoCE v1'
        print(f'  GID[{idx:3}] {gid}  {kind}')
    if populated == 0:
        print('FAIL devinfo_enums58: the GID table is empty')
        return 1
    if port_attr.link_layer == e.IBV_LINK_LAYER_ETHERNET:
        print('link layer is Ethernet: this is a RoCE device')
    ctx.close()
    print('OK devinfo_enums58')
    return 0


if __name__ == '__main__':
    sys.exit(main())
