"""How rdmalab.verbs picks a provider, a device, a port, a GID and an MTU, with stand-in pyverbs
packages for the machines we do not have (no device, a port down, two ports, RoCE v1 and v2 GIDs)."""
import json
import os
import subprocess
import sys

import pytest

from rdmalab import verbs as v
from rdmalab.errors import ProviderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAKE_DEVICE = """
class _Dev:
    def __init__(self, name): self.name = name.encode()
DEVICES = {devices!r}          # name -> list of port states
def get_device_list():
    if not DEVICES:
        raise Exception("Failed to get devices list")
    return [_Dev(n) for n in DEVICES]
class _Attr:
    def __init__(self, **kw): self.__dict__.update(kw)
class Context:
    def __init__(self, name): self.ports = DEVICES[name]
    def __enter__(self): return self
    def __exit__(self, *exc): pass
    def query_port(self, port): return _Attr(state=self.ports[port - 1])
"""


def choose_with_fake_pyverbs(tmp_path, devices, provider="auto"):
    """(returncode, provider, reason or error) from a fresh interpreter seeing a fake pyverbs."""
    pkg = tmp_path / "pyverbs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "device.py").write_text(FAKE_DEVICE.format(devices=devices))
    for name in ("pd", "mr", "cq", "qp", "wr", "addr", "srq", "pyverbs_error", "enums"):   # imported once chosen
        (pkg / f"{name}.py").write_text("")
    code = ("import json\ntry:\n    from rdmalab import verbs\n    print(json.dumps([verbs.PROVIDER, verbs.REASON]))\n"
            "except Exception as e:\n    print(json.dumps([type(e).__name__, str(e)]))")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", RDMALAB_PROVIDER=provider)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_auto_without_a_device_falls_back_to_soft_and_says_how_to_get_one(tmp_path):
    provider, reason = choose_with_fake_pyverbs(tmp_path, {})
    assert provider == "soft"
    assert "no RDMA device" in reason and "rdma link add rxe0 type rxe" in reason


def test_auto_with_only_a_port_down_falls_back_to_soft(tmp_path):
    provider, reason = choose_with_fake_pyverbs(tmp_path, {"mlx5_0": [1]})
    assert (provider, reason) == ("soft", "pyverbs found mlx5_0 but no active port: using the emulated NIC soft0")


def test_auto_takes_pyverbs_when_a_port_is_active(tmp_path):
    provider, reason = choose_with_fake_pyverbs(tmp_path, {"rxe0": [4]})
    assert (provider, reason) == ("pyverbs", "pyverbs found rxe0 with an active port")


def test_asking_for_pyverbs_where_it_cannot_run_is_a_clear_error(tmp_path):
    kind, message = choose_with_fake_pyverbs(tmp_path, {}, provider="pyverbs")
    assert kind == "ProviderError"
    assert "no RDMA device" in message and "Unset it to use the emulated NIC" in message


def test_an_unknown_provider_name_is_rejected():
    with pytest.raises(ProviderError, match="'tcp' is not one of auto, soft, pyverbs"):
        v.select("tcp")


class FakeContext:
    """Ports and GID tables as a multi-port RoCE HCA or rxe shows them."""

    def __init__(self, ports):
        self.ports = ports

    def query_device(self):
        return type("Attr", (), {"phys_port_cnt": len(self.ports)})()

    def query_port(self, port):
        p = self.ports[port - 1]
        return type("Attr", (), dict(state=p["state"], active_mtu=p["mtu"], gid_tbl_len=len(p["gids"]),
                                     link_layer=2))()

    def query_gid(self, port, index):
        gid = self.ports[port - 1]["gids"][index]
        if gid is None:
            raise OSError(61, "empty GID entry")
        return gid[0]

    def query_gid_type(self, port, index):
        return self.ports[port - 1]["gids"][index][1]


LINK_LOCAL = "fe80:0000:0000:0000:0202:c9ff:fe5a:b000"
MAPPED = "0000:0000:0000:0000:0000:ffff:0a0a:0001"


def test_route_skips_a_down_port_and_takes_the_mapped_roce_v2_gid():
    ctx = FakeContext([
        {"state": 1, "mtu": 5, "gids": [(MAPPED, 1)]},
        {"state": 4, "mtu": 3, "gids": [(LINK_LOCAL, 0), (LINK_LOCAL, 1), None, (MAPPED, 0), (MAPPED, 1)]},
    ])
    route = v.route_of(ctx, "hca0")
    assert (route.port, route.gid_index, route.gid, route.path_mtu) == (2, 4, MAPPED, v.enums.IBV_MTU_1024)


def test_route_never_exceeds_the_ports_active_mtu():
    ctx = FakeContext([{"state": 4, "mtu": v.enums.IBV_MTU_512, "gids": [(MAPPED, 1)]}])
    assert v.route_of(ctx, "hca0").path_mtu == v.enums.IBV_MTU_512


def test_infiniband_ports_without_a_mapped_gid_use_index_0():
    ctx = FakeContext([{"state": 4, "mtu": 5, "gids": [("fe80:0000:0000:0000:0002:c903:0000:0001", 0)]}])
    assert v.route_of(ctx, "mlx4_0").gid_index == 0


def test_no_active_port_is_a_clear_error():
    with pytest.raises(ProviderError, match="hca0 has no active port"):
        v.route_of(FakeContext([{"state": 1, "mtu": 3, "gids": [(MAPPED, 1)]}]), "hca0")


def test_choose_route_on_the_emulated_nic_and_a_missing_device():
    if v.PROVIDER != "soft":
        pytest.skip("checks soft0's route; on a real device test_doctor covers it")
    route = v.choose_route()
    assert (route.device, route.port, route.gid_index, route.path_mtu) == ("soft0", 1, 1, v.enums.IBV_MTU_1024)
    with pytest.raises(ProviderError, match="no RDMA device 'mlx5_0'; this machine has soft0"):
        v.choose_route("mlx5_0")
