"""`rdmalab capture -o FILE.pcap -- CMD [ARGS...]`: run CMD with soft0 on the udp link, and write every
packet its NICs sent and received as one pcap that Wireshark and tshark dissect as RoCEv2.

Each NIC writes what it sends and receives to a file of its own (RDMALAB_SOFT_CAPTURE, nic.py). A
packet between two captured hosts is in both files, once as sent and once as received; the merged
capture keeps the sender's copy, the receiver's only when the sender was not captured (an rxe peer,
or a stranger), so each packet appears once, in time order. A packet the emulated link lost is in the
capture (its sender sent it), and nowhere after that; a duplicated one appears once.
"""
import glob
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from rdmalab import settings
from rdmalab.errors import RequestError
from rdmalab.proc import children

from rdmalab.wire import PcapWriter, read_pcap
from rdmalab.wire.encap import parse_ipv4_udp
from .nic import doorbell_name

NIC_EXIT_WAIT_S = 15


def run(output, command):
    """Run `command` on the udp link, capturing; returns its exit status. Interrupted (Ctrl-C, or
    SIGTERM, which rdmalab's command line turns into the same), it stops the command and still writes
    what was captured until then."""
    if not command:
        raise RequestError("capture needs a command to run: rdmalab capture -o FILE.pcap -- python prog.py")
    try:   # before the command runs, not after: a capture with nowhere to go is lost
        with open(output, "ab"):
            pass
    except OSError as error:
        raise RequestError(f"capture cannot write {output}: {error.strerror}; give -o a file in a "
                         f"directory you can write") from None
    host = settings.soft_host()
    if _nic_running(host):
        print(f"rdmalab capture: a NIC for host {host} runs already (another program of yours started it): "
              f"what this command sends through it is not captured. End that program first, or give this "
              f"one another host (RDMALAB_SOFT_HOST=127.0.0.2).", file=sys.stderr)
    workdir = tempfile.mkdtemp(prefix="rdmalab-capture-")
    base = os.path.join(workdir, "nic.pcap")
    env = {**os.environ, "RDMALAB_PROVIDER": os.environ.get("RDMALAB_PROVIDER", "soft"), "RDMALAB_SOFT_LINK": "udp",
           "RDMALAB_SOFT_CAPTURE": base}
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:
            raise RequestError(f"capture cannot run {command[0]}: {error.strerror}") from None
        try:
            status = child.wait()
        except KeyboardInterrupt as stopped:   # Ctrl-C reached the command too; SIGTERM did not: stop it either way
            _stop(child)
            signum = stopped.args[0] if stopped.args and isinstance(stopped.args[0], int) else signal.SIGINT
            print(f"rdmalab capture: stopped by {signal.Signals(signum).name}; writing what was captured",
                  file=sys.stderr)
            status = 128 + signum
        hosts = _hosts(base)
        deadline = time.monotonic() + NIC_EXIT_WAIT_S
        while any(_nic_running(host) for host in hosts) and time.monotonic() < deadline:
            time.sleep(0.05)   # each NIC ends when its last program has, and closes its file then
        count = merge(base, output)
        print(f"rdmalab capture: {count} packets from {len(hosts)} NIC(s) ({', '.join(hosts) or 'none'}) "
              f"written to {output}", file=sys.stderr)
        return status
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _stop(child, patience=2):
    """End the captured command: Ctrl-C reached it too, so it may be ending already; else SIGTERM."""
    try:
        child.wait(timeout=patience)
    except subprocess.TimeoutExpired:
        children.end(child, patience)


def merge(base, output):
    """Merge the per-NIC captures of RDMALAB_SOFT_CAPTURE=base into `output`; returns the packet count."""
    files = {host: path for host, path in ((_host_of(base, p), p) for p in glob.glob(_pattern(base))) if host}
    records = []
    for host, path in files.items():
        try:
            _, packets = read_pcap(path)
        except ValueError:   # a NIC killed mid-record: keep what is whole
            continue
        for ts, data in packets:
            try:
                flow = parse_ipv4_udp(data, verify=False)[0]
            except ValueError:
                continue
            if flow.src == host or flow.src not in files:   # sent by this NIC, or from a host nobody captured
                records.append((ts, data))
    records.sort(key=lambda record: record[0])
    with PcapWriter(output) as pcap:
        for ts, data in records:
            pcap.write(data, ts)
    return len(records)


def _pattern(base):
    root, ext = os.path.splitext(base)
    return f"{glob.escape(root)}.*{ext or '.pcap'}"


def _host_of(base, path):
    root, ext = os.path.splitext(base)
    middle = path[len(root) + 1:len(path) - len(ext or ".pcap")]
    try:
        return str(ipaddress.IPv4Address(middle))
    except ValueError:
        return None


def _hosts(base):
    return sorted(h for h in (_host_of(base, p) for p in glob.glob(_pattern(base))) if h)


def _nic_running(host):
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(doorbell_name(host))
        return True
    except OSError:
        return False
    finally:
        probe.close()
