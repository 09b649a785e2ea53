"""soft0's links: how a request reaches the target's NIC.

- `shm` (the default): the initiator's process carries every request through shared memory
  (requester.py calls responder.respond() on the target QP's segment). Nothing goes on a wire.
- `udp` (RDMALAB_SOFT_LINK=udp): every RC request travels as RoCEv2 packets over UDP port 4791,
  between NICs that run as processes of their own, one per host and user (nic.py). The program
  still posts and polls as before (doorbell.py is its side), and the target's process runs no code.

A host is an IPv4 address of this machine: any 127.0.0.x, or a network namespace's address. A
process's host is RDMALAB_SOFT_HOST (default 127.0.0.1); on the udp link soft0's RoCE v2 GID
(GID index 1) is that address, IPv4-mapped (::ffff:127.0.0.2), and a QP whose destination GID is
an IPv4-mapped address sends its packets there.

Faults on the udp link, read by the NIC when it starts: RDMALAB_SOFT_LOSS, RDMALAB_SOFT_DUP and
RDMALAB_SOFT_REORDER (rates, 0..1, of the packets it sends), RDMALAB_SOFT_SEED (so a run repeats).
RDMALAB_SOFT_CAPTURE=FILE.pcap makes each NIC write the packets it sends and receives.
"""
import fcntl
import ipaddress
import socket
import struct

from rdmalab.settings import LINKS, soft_host as host, soft_link as name   # noqa: F401 (read once, checked there)


def hosts_from(first, count):
    """`count` consecutive host addresses from `first`: a local cluster's ranks, a host each."""
    start = ipaddress.IPv4Address(first)
    return [str(start + i) for i in range(count)]


SIOCGIFADDR, SIOCGIFNETMASK, SIOCGIFMTU = 0x8915, 0x891B, 0x8921   # Linux's ioctls on a network interface


def netdev_mtu(address):
    """The MTU of the network interface that holds `address`, or whose subnet does (lo, 127.0.0.1/8,
    holds every 127.x.y.z: 65536; an Ethernet: 1500 as a rule); None if none here does (or not Linux)."""
    target, best = ipaddress.IPv4Address(address), None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, interface in socket.if_nameindex():
                request = struct.pack("16s16x", interface.encode()[:15])
                try:
                    own = fcntl.ioctl(s, SIOCGIFADDR, request)[20:24]
                    mask = fcntl.ioctl(s, SIOCGIFNETMASK, request)[20:24]
                    mtu = struct.unpack_from("i", fcntl.ioctl(s, SIOCGIFMTU, request), 16)[0]
                except OSError:   # no IPv4 address on this one
                    continue
                subnet = ipaddress.IPv4Network(f"{socket.inet_ntoa(own)}/{socket.inet_ntoa(mask)}", strict=False)
                if ipaddress.IPv4Address(own) == target:
                    return mtu
                if target in subnet and best is None:
                    best = mtu
    except OSError:
        return best
    return best


def gid_of(address):
    """The IPv4-mapped GID of an address, as soft0 writes GIDs: '0000:...:ffff:7f00:0002'."""
    mapped = ipaddress.IPv6Address(f"::ffff:{address}").exploded
    return mapped


def address_of(gid):
    """The IPv4 address an IPv4-mapped GID names, or None for any other GID."""
    try:
        mapped = ipaddress.IPv6Address(str(gid)).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped is not None else None


