"""The TCP baseline: what moving a message costs through sockets, the path RDMA avoids.

Every byte goes user buffer -> kernel (send) -> kernel (receive) -> user buffer, one syscall at least
per call on each side, and the receiver's CPU runs to take it. Loopback (127.0.0.1) by default;
TCP_NODELAY, so that small messages go out at once instead of waiting to be batched (Nagle).
The data path uses plain read() and write() on the socket, as C programs often do, so that
/proc/<pid>/io counts every call (it does not count recv() and send()).

The loops the benchmarks use, one per side and pattern, each returning its timestamps (ns):
    pingpong_client / pingpong_server   latency: send `size` bytes, wait for them to come back
    request_client / request_server     a remote read: an 8-byte request (an offset), `size` bytes back
                                        from the server's memory; what RDMA READ does without the server
    stream_send / stream_receive        bandwidth: `iters` messages of `size` bytes, one ack at the end
"""
import os
import socket
import time

DEFAULT_HOST = "127.0.0.1"


def address_toward(host):
    """This machine's address on the network that reaches `host` (the route a packet would take: a UDP
    socket's choice, nothing is sent). OSError if no route leads there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return probe.getsockname()[0]


def listen(host=DEFAULT_HOST, port=0):
    """A listening socket (port 0: any free one); returns (socket, port)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(1)
    return server, server.getsockname()[1]


def _tune(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)   # blocking: read() and write() below wait as recv() and send() would
    return sock


def accept(server, timeout=30.0):
    server.settimeout(timeout)
    conn, _ = server.accept()
    return _tune(conn)


def connect(host, port, timeout=30.0):
    return _tune(socket.create_connection((host, port), timeout=timeout))


def recv_exactly(sock, view):
    """Fill `view` (a writable memoryview) from the socket; ConnectionError if the peer closes."""
    got, size, fd = 0, len(view), sock.fileno()
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise ConnectionError("the peer closed the connection mid-message")
        got += n


def send_all(sock, data):
    """write() until every byte of `data` is in the kernel's send buffer."""
    view, sent, fd = memoryview(data), 0, sock.fileno()
    while sent < len(view):
        sent += os.write(fd, view[sent:])


def pingpong_client(sock, size, iters):
    """Send, wait for the echo, `iters` times; returns the post timestamp of every iteration."""
    out, back = bytearray(size), memoryview(bytearray(size))
    tposted = [0] * iters
    clock = time.perf_counter_ns
    for i in range(iters):
        tposted[i] = clock()
        send_all(sock, out)
        recv_exactly(sock, back)
    return tposted


def pingpong_server(sock, size, iters):
    """Echo `iters` messages of `size` bytes."""
    buf = memoryview(bytearray(size))
    for _ in range(iters):
        recv_exactly(sock, buf)
        send_all(sock, buf)


REQUEST_BYTES = 8


def request_client(sock, size, iters):
    """Ask for `size` bytes at offset 0 of the server's memory and wait for them, `iters` times; returns
    the post timestamp of every iteration."""
    request, back = (0).to_bytes(REQUEST_BYTES, "little"), memoryview(bytearray(size))
    tposted = [0] * iters
    clock = time.perf_counter_ns
    for i in range(iters):
        tposted[i] = clock()
        send_all(sock, request)
        recv_exactly(sock, back)
    return tposted


def request_server(sock, memory, size, iters):
    """Answer `iters` requests: read the 8-byte offset, write back `size` bytes of `memory` from there.
    Every answer needs this process to be scheduled: the kernel can only queue the request."""
    request, view = memoryview(bytearray(REQUEST_BYTES)), memoryview(memory)
    for _ in range(iters):
        recv_exactly(sock, request)
        offset = int.from_bytes(request, "little")
        send_all(sock, view[offset:offset + size])


def stream_send(sock, size, iters, ack=True):
    """Send `iters` messages back to back, then (if `ack`) wait for the receiver's one-byte ack.
    Returns (tposted, tcompleted): each send's start, and when the kernel took it (the last entry:
    when the ack arrived, i.e. every byte reached the receiver's buffer)."""
    out = bytearray(size)
    tposted, tcompleted = [0] * iters, [0] * iters
    clock = time.perf_counter_ns
    for i in range(iters):
        tposted[i] = clock()
        send_all(sock, out)
        tcompleted[i] = clock()
    if ack:
        recv_exactly(sock, memoryview(bytearray(1)))
        tcompleted[-1] = clock()
    return tposted, tcompleted


def stream_receive(sock, size, iters, chunk=1 << 20, ack=True):
    """Receive size * iters bytes into one reusable buffer, then (if `ack`) ack with one byte."""
    remaining = size * iters
    buf = memoryview(bytearray(min(max(size, 1), chunk)))
    while remaining:
        n = os.readv(sock.fileno(), [buf[:min(remaining, len(buf))]])
        if n == 0:
            raise ConnectionError("the sender closed the connection mid-stream")
        remaining -= n
    if ack:
        send_all(sock, b"\x01")
