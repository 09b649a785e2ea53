#!/usr/bin/env python3
"""ibv_devinfo-like report of the first RDMA device, in the pyverbs >= 59 spelling.

Shape: linux-rdma/rdma-core Documentation/pyverbs.md of v59.0 ("Query a device", "Query port",
"Extended query device") and tests/test_device.py of v59 (query_gid_table / query_gid_ex /
query_device_ex), enums as IntFlag classes imported from pyverbs.libibverbs_enums
(`ibv_port_state.IBV_PORT_ACTIVE`, `ibv_gid_type.IBV_GID_TYPE_ROCE_V2`).

What it does: opens the first device of get_device_list() by name, prints DeviceAttr fields,
query_device_ex()'s phys_port_cnt_ex, PortAttr fields of port 1 (using pyverbs.device's
translate_*/..._to_str helpers), the GID table from query_gid_table() and entry 0 again from
query_gid_ex(), and last the device and port capability flags as words (translate_device_caps,
translate_port_cap_flags, as ibv_devinfo -v shows them). Asserts: port 1 is ACTIVE, the table has
entries, query_gid_ex(1, 0) agrees with query_gid(1, 0). Prints "OK devinfo_enums59".
"""
import sys

import pyverbs.device as d
from pyverbs.libibverbs_enums import ibv_port_state, ibv_gid_type, ibv_node_type


def main():
    devices = d.get_device_list()
    if len(devices) == 0:
        print('FAIL devinfo_enums59: no RDMA device')
        return 1
    dev = devices[0]
    with d.Context(name=dev.name.decode()) as ctx:
        attr = ctx.query_device()
        attr_ex = ctx.query_device_ex()
        print(f'hca_id: {dev.name.decode()}')
        print(f'  node type:        {"CA" if dev.node_type == ibv_node_type.IBV_NODE_CA else dev.node_type}')
        print(f'  fw_ver:           {attr.fw_version}')
        print(f'  node_guid:        {d.guid_format(attr.node_guid)}')
        print(f'  vendor_id:        {hex(attr.vendor_id)}')
        print(f'  vendor_part_id:   {attr.vendor_part_id}')
        print(f'  phys_port_cnt:    {attr.phys_port_cnt} (ex: {attr_ex.phys_port_cnt_ex})')
        print(f'  max_qp_wr:        {attr.max_qp_wr}  max_sge: {attr.max_sge}  max_mr: {attr.max_mr}')

        port = ctx.query_port(1)
        print('  port: 1')
        print(f'    state:          {d.port_state_to_str(port.state)}')
        print(f'    max_mtu:        {d.translate_mtu(port.max_mtu)}')
        print(f'    active_mtu:     {d.translate_mtu(port.active_mtu)}')
        print(f'    link_layer:     {d.translate_link_layer(port.link_layer)}')
        print(f'    phys_state:     {d.phys_state_to_str(port.phys_state)}')
        print(f'    active_width:   {d.width_to_str(port.active_width)}')
        print(f'    active_speed:   {d.speed_to_str(port.active_speed, port.active_speed_ex)}')
        if port.state != ibv_port_state.IBV_PORT_ACTIVE:
            print('FAIL devinfo_enums59: port 1 is not active')
            return 1

        entries = ctx.query_gid_table(port.gid_tbl_len)
        if not entries:
            print('FAIL devinfo_enums59: query_gid_table returned no entry')
            return 1
        for entry in entries:
            v2 = ' (RoCE v2)' if entry.gid_type == ibv_gid_type.IBV_GID_TYPE_ROCE_V2 else ''
            print(f'    GID[{entry.gid_index:3}]: {entry.gid_str()}, {d.translate_gid_type(entry.gid_type)}{v2}')
        first = ctx.query_gid_ex(1, 0)
        if first.gid_str() != ctx.query_gid(1, 0).gid:
            print(f'FAIL devinfo_enums59: query_gid_ex gives {first.gid_str()}, query_gid {ctx.query_gid(1, 0)}')
            return 1

        print(f'  device_cap_flags: {d.translate_device_caps(attr.device_cap_flags)}')
        print(f'    port_cap_flags: {d.translate_port_cap_flags(port.port_cap_flags)}')
    print('OK devinfo_enums59')
    return 0


if __name__ == '__main__':
    sys.exit(main())
