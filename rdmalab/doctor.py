"""`rdmalab doctor` (rdmalab.doctor()): what this machine offers for RDMA, and the next step towards real RDMA.

    import rdmalab; rdmalab.doctor()      # a table in a notebook, text in a terminal
    rdmalab doctor [--json]               # the same from a shell
"""
import html
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import subprocess

from rdmalab import settings, verbs
from rdmalab.verbs import emulated
from rdmalab.verbs.provider import real_pyverbs_status
from rdmalab.verbs.route import ipv4_of


MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet"}
MEMLOCK_ENOUGH = 64 << 20   # enough to register the lessons' buffers

SOFT_ROCE_STEPS = ("Create a Soft-RoCE device (Debian/Ubuntu, as root): apt-get install rdma-core "
                   "ibverbs-providers python3-pyverbs iproute2 (on Ubuntu also linux-modules-extra-$(uname -r)); "
                   "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev <interface>, where <interface> has an "
                   "IPv4 address (ip -br addr). Then run `rdmalab doctor` again.")


def pyverbs_version():
    """pyverbs' version (it ships with rdma-core: Debian's python3-pyverbs), or None when absent."""
    if importlib.util.find_spec("pyverbs") is None:
        return None
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "python3-pyverbs"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout:
            return out.stdout
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "installed (version unknown)"


def memlock():
    """The locked-memory limit: real MRs pin pages, and a low limit makes registration fail (ENOMEM)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    as_bytes = (lambda v: None if v == resource.RLIM_INFINITY else v)
    root = os.geteuid() == 0
    ok = root or soft == resource.RLIM_INFINITY or soft >= MEMLOCK_ENOUGH
    note = ("root: not limited (CAP_IPC_LOCK)" if root else
            "enough" if ok else
            f"{soft >> 10} KiB is too little to register large buffers on a real device: `ulimit -l unlimited` "
            "(permanently: '* - memlock unlimited' in /etc/security/limits.conf; containers: "
            "docker run --ulimit memlock=-1)")
    return {"soft_bytes": as_bytes(soft), "hard_bytes": as_bytes(hard), "ok": ok, "note": note}


def describe_devices(verbs):
    """Every device the provider sees, each port's state, MTU, link layer and GID table."""
    devices = []
    try:
        listed = verbs.device.get_device_list()
    except Exception as error:   # real pyverbs raises when there is no device at all
        return [], str(error)
    for dev in listed:
        name = dev.name.decode()
        entry = {"name": name, "ports": []}
        try:
            with verbs.device.Context(name=name) as ctx:
                attr = ctx.query_device()
                entry.update(fw_version=attr.fw_version, node_guid=f"{attr.node_guid:016x}")
                for port in range(1, attr.phys_port_cnt + 1):
                    p = ctx.query_port(port)
                    gids = []
                    for index in range(min(p.gid_tbl_len, 16)):
                        try:
                            gid = str(ctx.query_gid(port, index))
                        except Exception:
                            continue           # an empty entry (ENODATA)
                        if gid.strip("0:") == "":
                            continue
                        try:
                            kind = verbs.GID_TYPE_NAMES.get(ctx.query_gid_type(port, index), "?")
                        except Exception:
                            kind = "?"
                        gids.append({"index": index, "gid": gid, "type": kind, "ipv4": ipv4_of(gid)})
                    entry["ports"].append({
                        "port": port, "state": PORT_STATES.get(p.state, str(p.state)),
                        "active_mtu": MTU_BYTES.get(p.active_mtu), "max_mtu": MTU_BYTES.get(p.max_mtu),
                        "link_layer": LINK_LAYERS.get(p.link_layer, str(p.link_layer)), "gids": gids})
        except Exception as error:
            entry["error"] = str(error)
        devices.append(entry)
    return devices, None


def next_steps(report):
    steps = []
    if report["provider"] == "soft":
        steps.append("You are on the emulated NIC soft0: every lesson runs, with pyverbs' API and rxe's "
                     "behaviour, but no data crosses a real NIC.")
        if settings.in_container():
            steps.append("This is the lab's container image, which has no pyverbs: for real RDMA, run the lab on a "
                         "Linux machine with an RDMA device or Soft-RoCE (git clone, then make lab).")
        elif report["pyverbs"] is None:
            steps.append("For real RDMA, install pyverbs (Debian/Ubuntu: apt-get install python3-pyverbs "
                         "rdma-core ibverbs-providers); `make lab` then links it into the lab's .venv "
                         "(by hand: python -m rdmalab.verbs.link_pyverbs).")
            steps.append(SOFT_ROCE_STEPS)
        elif "no RDMA device" in report["real_rdma"]:
            steps.append(SOFT_ROCE_STEPS)
        else:
            steps.append(f"Real RDMA is not usable yet: {report['real_rdma']}.")
    else:
        route = report.get("route") or {}
        steps.append(f"You are on real RDMA: {route.get('device')} port {route.get('port')}, GID index "
                     f"{route.get('gid_index')}. Compare with perftest: ib_write_lat -d {route.get('device')} "
                     f"-x {route.get('gid_index')} (server) and the same plus the server's address (client).")
    if (report.get("soft_memory") or {}).get("small_dev_shm"):
        steps.append(report["soft_memory"]["small_dev_shm"])
    if not report["memlock"]["ok"] and not settings.in_container():   # (soft0 locks no memory)
        steps.append("Raise the locked-memory limit: " + report["memlock"]["note"])
    return steps


def soft_link():
    """soft0's link: shared memory, or the udp link with its host, and the host NIC's port counters if it runs."""
    try:
        name, host = settings.soft_link(), settings.soft_host()
    except ValueError as error:
        return {"link": None, "error": str(error)}
    if name != "udp":
        return {"link": name}
    return {"link": name, "host": host, "counters": emulated.nic_counters(host)}


def collect():
    """The doctor's findings as a plain dict (what --json prints)."""
    report = {"rdmalab": _version(), "python": platform.python_version(),
              "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
              "pyverbs": pyverbs_version(), "provider": verbs.PROVIDER, "reason": verbs.REASON,
              "real_rdma": real_pyverbs_status()[1] if verbs.PROVIDER == "soft" else verbs.REASON,
              "memlock": memlock()}
    soft_memory = emulated.memory()   # the emulated NIC's "host memory": how much it may register
    if soft_memory is not None:
        report["soft_memory"] = soft_memory
        report["soft_link"] = soft_link()
    report["devices"], report["device_error"] = describe_devices(verbs)
    try:
        route = verbs.choose_route()
        report["route"] = {"device": route.device, "port": route.port, "gid_index": route.gid_index,
                           "gid": route.gid, "path_mtu": 128 << route.path_mtu}
    except Exception as error:
        report["route"], report["route_error"] = None, str(error)
    report["next_steps"] = next_steps(report)
    return report


class Report:
    """The doctor's findings: text in a terminal, a table in a notebook, `.data` as a dict."""

    def __init__(self, data):
        self.data = data

    def to_json(self):
        return json.dumps(self.data, indent=2)

    def _rows(self):
        d = self.data
        yield "rdmalab", d["rdmalab"]
        yield "Python", f"{d['python']} on {d['platform']}"
        yield "pyverbs", d["pyverbs"] or "not installed"
        yield "provider", f"{d['provider']}: {d['reason']}"
        if d.get("device_error"):
            yield "devices", d["device_error"]
        for dev in d["devices"]:
            for p in dev["ports"]:
                yield (f"{dev['name']} port {p['port']}",
                       f"{p['state']}, {p['link_layer']}, MTU {p['active_mtu']} (max {p['max_mtu']})")
                for g in p["gids"]:   # as show_gids prints them: index, GID, IPv4, RoCE version
                    yield f"  GID {g['index']}", f"{g['gid']}  {g.get('ipv4') or '-':15}  {g['type']}"
        r = d.get("route")
        yield "route", (f"{r['device']} port {r['port']}, GID index {r['gid_index']}, path MTU {r['path_mtu']}"
                        if r else d.get("route_error", "none"))
        if r:
            yield "NCCL", (f"NCCL_IB_GID_INDEX={r['gid_index']} on this device (the RoCE v2 entry of an IPv4 address). "
                           "The 3 that tutorials hard-code is mlx5's layout, a v1 and a v2 entry per address; rxe "
                           "lists v2 entries only")
        m = d["memlock"]
        limit = "unlimited" if m["soft_bytes"] is None else f"{m['soft_bytes'] >> 10} KiB"
        yield "memlock", f"{limit} ({m['note']})"
        if "soft_memory" in d:
            yield "soft0 memory", (f"{d['soft_memory']['directory']}, {d['soft_memory']['free_bytes'] >> 20} MiB free "
                                   f"for registered memory and queues")
        if "soft_link" in d:
            yield "soft0 link", self._link_row(d["soft_link"])

    @staticmethod
    def _link_row(link):
        if link.get("error"):
            return link["error"]
        if link["link"] != "udp":
            return "shared memory (RDMALAB_SOFT_LINK=udp carries RC as RoCEv2 packets between NIC processes)"
        c = link.get("counters")
        if c is None:
            return f"udp, host {link['host']}: its NIC is not running (the first QP starts it)"
        return (f"udp, host {link['host']}: sent {c['sent_pkts']} packets ({c['sent_bytes']} B), received "
                f"{c['rcvd_pkts']} ({c['rcvd_bytes']} B), retransmitted {c['retransmitted_pkts']}, NAKs sent "
                f"{c['nak_sent']}, RNR NAKs sent {c['send_rnr_err']} / received {c['rcvd_rnr_err']}, duplicate "
                f"requests {c['duplicate_request']}")

    def __str__(self):
        rows = list(self._rows())
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        lines += ["", "Next steps:"] + [f"  - {s}" for s in self.data["next_steps"]]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self):
        colour = "#1a7f37" if self.data["provider"] == "pyverbs" else "#9a6700"
        rows = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(k)}</th>"
                       f"<td style='text-align:left;font-family:monospace'>{html.escape(str(v))}</td></tr>"
                       for k, v in self._rows())
        steps = "".join(f"<li>{html.escape(s)}</li>" for s in self.data["next_steps"])
        return (f"<div><h4 style='color:{colour};margin:0'>rdmalab doctor: provider "
                f"<code>{self.data['provider']}</code></h4><table>{rows}</table>"
                f"<p style='margin-bottom:0'><b>Next steps</b></p><ul>{steps}</ul></div>")


def _version():
    try:
        return importlib.metadata.version("rdmalab")
    except importlib.metadata.PackageNotFoundError:   # run from a checkout that was not installed
        return "unknown (not installed)"


def doctor():
    """What this machine offers for RDMA and the next step; displays as a table in notebooks."""
    return Report(collect())


def main(args):
    report = doctor()
    print(report.to_json() if args.json else report)
    return 0
