"""Device, port, GID table and memory registration, as rxe reports them."""
from errno import EINVAL, ENODATA

import pytest

from rdmalab import verbs as v

from .conftest import ALL_ACCESS, e, rdma_error


def test_device_list_gives_bytes_names_and_context_opens_by_str(ctx):
    devices = v.device.get_device_list()
    assert devices and isinstance(devices[0].name, bytes)
    assert devices[0].node_type == 1 and devices[0].transport_type == 0  # CA, IB transport (RoCE too)


def test_unknown_device_name_is_refused():
    with pytest.raises(v.pyverbs_error.PyverbsRDMAError, match="Failed to find device nope0"):
        v.device.Context(name="nope0")


def test_port_is_active_with_a_usable_mtu(ctx):
    port = ctx.query_port(1)
    assert port.state == e.IBV_PORT_ACTIVE
    assert e.IBV_MTU_256 <= port.active_mtu <= port.max_mtu
    assert port.gid_tbl_len > 1


def test_port_two_does_not_exist(ctx):
    assert rdma_error(lambda: ctx.query_port(2)) == EINVAL


def test_routable_gid_is_ipv4_mapped_roce_v2(ctx, gid_index):
    if ctx.query_port(1).link_layer != e.IBV_LINK_LAYER_ETHERNET:
        pytest.skip("InfiniBand port: no RoCE GIDs")
    assert str(ctx.query_gid(1, gid_index)).startswith(v.IPV4_MAPPED_PREFIX)
    assert ctx.query_gid_type(1, gid_index) == 1  # RoCE v2


def test_rkey_is_zero_without_remote_access_and_equals_lkey_with_it(pd):
    local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    remote = v.mr.MR(pd, 4096, ALL_ACCESS)
    read_only = v.mr.MR(pd, 4096, e.IBV_ACCESS_REMOTE_READ)
    assert local.rkey == 0 and local.lkey != 0
    assert remote.rkey == remote.lkey != 0
    assert read_only.rkey == read_only.lkey
    assert remote.length == 4096 and remote.buf % 4096 == 0


@pytest.mark.parametrize("access", [e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_ATOMIC])
def test_remote_write_or_atomic_without_local_write_is_refused(pd, access):
    assert rdma_error(lambda: v.mr.MR(pd, 4096, access)) == EINVAL


def test_zero_length_registration_is_refused(pd):
    assert rdma_error(lambda: v.mr.MR(pd, 0, e.IBV_ACCESS_LOCAL_WRITE)) == EINVAL


def test_mr_write_read_round_trip_and_fresh_buffer_is_zero(pd):
    mr = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    assert mr.read(8, 0) == bytes(8)
    mr.write(b"hello", 5, 3)
    assert mr.read(8, 0) == b"\0\0\0hello"


def test_negative_read_offset_is_a_user_error(pd):
    mr = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    with pytest.raises(v.pyverbs_error.PyverbsUserError):
        mr.read(4, -1)


@pytest.mark.parametrize("cqe", [0, 32768])
def test_cq_size_outside_device_limits_is_refused(ctx, cqe):
    assert rdma_error(lambda: v.cq.CQ(ctx, cqe)) == EINVAL


def test_gid_table_extended_queries_and_device_ex_as_rxe_reports_them(ctx):
    """What rdma-core's own test_device checks: a nonzero vendor id, RoCE ports requiring a GRH, the GID
    table and query_gid_ex agreeing with query_gid, ENODATA past the populated entries, and -EINVAL
    (libibverbs' negative errno, passed on as is) for a GID table buffer too small."""
    attr = ctx.query_device_ex()
    assert attr.orig_attr.vendor_id != 0 and attr.phys_port_cnt_ex == attr.orig_attr.phys_port_cnt == 1
    assert attr.odp_caps.general_caps == 0 and attr.max_dm_size == 0   # neither has ODP nor device memory
    port = ctx.query_port(1)
    if port.link_layer == e.IBV_LINK_LAYER_ETHERNET:
        assert port.flags & 1   # IBV_QPF_GRH_REQUIRED
    entries = ctx.query_gid_table(port.gid_tbl_len)
    assert [entry.gid_index for entry in entries] == list(range(len(entries))) and len(entries) >= 2
    for entry in entries:
        assert entry.port_num == 1 and entry.gid_str() == str(ctx.query_gid(1, entry.gid_index))
        assert ctx.query_gid_ex(1, entry.gid_index).gid_str() == entry.gid_str()
    assert rdma_error(lambda: ctx.query_gid_ex(1, len(entries))) == ENODATA
    assert rdma_error(lambda: ctx.query_gid_table(0)) == -22
