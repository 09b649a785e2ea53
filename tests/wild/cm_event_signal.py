#!/usr/bin/env python3
"""rdma_cm: a signal ends a wait for a CM event with EINTR (pyverbs <= 58).

Usage: cm_event_signal.py [ADDRESS]

Shape: a listener with a time limit, as servers built on rdma-core's pyverbs documentation write one
(Documentation/pyverbs.md v44-v58, CMID: `CMEventChannel()`, `CMID(creator=channel)`,
`AddrInfo(src=..., src_service=..., port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)`, `bind_addr`,
`listen`, `CMEvent(channel)`), with the standard library's `signal.signal(signal.SIGALRM, handler)` and
`signal.alarm(seconds)` for the limit: the handler only notes that the alarm rang, and the blocking call
is expected to fail (librdmacm's rdma_get_cm_event is a read() of the channel's file, which a signal
interrupts). Enums: `import pyverbs.cm_enums as ce`. Address: the argument, else the IPv4 address in the
first device's IPv4-mapped GID.

What it does: waits for a CM event with nothing to come, twice: on a channel with a listening id, and on
a channel with no id at all; each time a no-op SIGALRM handler is installed and alarm(2) set first.
Asserts: each CMEvent(channel) raises PyverbsRDMAError with error_code 4 (EINTR) after the alarm rang.
A watchdog thread ends the program with a FAIL line if a wait outlives the alarm by far. Prints
"OK cm_event_signal".
"""
import errno
import os
import random
import signal
import socket
import sys
import threading

from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID
from pyverbs.device import Context, get_device_list
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.cm_enums as ce

RANG = []


def netdev_ipv4():
    with Context(name=get_device_list()[0].name.decode()) as ctx:
        for idx in range(ctx.query_port(1).gid_tbl_len):
            gid = ctx.query_gid(1, idx).gid
            if gid.startswith('0000:0000:0000:0000:0000:ffff:'):
                return socket.inet_ntoa(bytes.fromhex(gid.replace(':', '')[-8:]))
    return None


def on_alarm(signum, frame):
    RANG.append(signum)


def wait_with_alarm(channel, what):
    """CMEvent(channel) under alarm(2); the error code it failed with (None: an event came)."""
    RANG.clear()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(2)
    try:
        event = CMEvent(channel)
    except PyverbsRDMAError as error:
        code = error.error_code
    else:
        event.ack_cm_event()
        code = None
    finally:
        signal.alarm(0)
    print(f'{what}: CMEvent ended with error code {code} (alarm rang: {bool(RANG)})', flush=True)
    return code


def watchdog():
    print('FAIL cm_event_signal: a CMEvent wait outlived its alarm (2 s) by far', flush=True)
    os._exit(1)


def main():
    addr = sys.argv[1] if len(sys.argv) > 1 else netdev_ipv4()
    if addr is None:
        print('FAIL cm_event_signal: no IPv4 address on the RDMA device; give one as argument')
        return 1
    timer = threading.Timer(30, watchdog)
    timer.daemon = True
    timer.start()
    channel = CMEventChannel()
    listener = CMID(creator=channel)
    listener.bind_addr(AddrInfo(src=addr, src_service=str(random.randint(20000, 29999)),
                                port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE))
    listener.listen()
    with_listener = wait_with_alarm(channel, 'a channel with a listening id')
    empty = CMEventChannel()
    without_ids = wait_with_alarm(empty, 'a channel with no id')
    timer.cancel()
    listener.close()
    channel.close()
    empty.close()
    if (with_listener, without_ids) != (errno.EINTR, errno.EINTR):
        print(f'FAIL cm_event_signal: expected error code {errno.EINTR} (EINTR) both times, got '
              f'{with_listener} and {without_ids}')
        return 1
    print('OK cm_event_signal')
    return 0


if __name__ == '__main__':
    sys.exit(main())
