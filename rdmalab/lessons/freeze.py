"""Freeze the target: stop the process whose memory you reach (SIGSTOP), then see what still moves.

    from rdmalab.lessons import freeze
    result = freeze.experiment(qp, cq, local_mr, target)   # target: lesson 04's RemoteBuffer
    result          # a table in a notebook; result.data for the figures

A stopped process runs no instruction until it is continued: not in user space, not in a system call.
So whatever changes in its memory meanwhile was done by someone else. The experiment asks both
transports to reach the stopped target:

- RDMA: a WRITE of a fresh pattern, a READ of what was just written (its bytes come from the target's
  memory), and two FETCH_AND_ADDs on a counter (the second returns the first's result). Each must
  complete while the target is stopped: on a hardware NIC its DMA engine serves them, on Soft-RoCE the
  target host's kernel (softirq or kworker time, not charged to the target process), on soft0 the
  initiator's CPU standing in for the NIC. The answer does not depend on which.
- TCP: a sender writes to a socket whose receiver is that same stopped process. The kernel buffers what
  fits (the receiver's socket buffer and the sender's), then the sender stalls: nothing more moves until
  the receiver runs. The bytes accepted before the stall are measured.

Then the target is continued and looks at its own memory and its socket: the pattern is there, the
counter is 2 higher, every byte the sender sent arrives. The target is continued whatever happens
(an exception, a timeout), so a failed cell never leaves a stopped process behind.
"""
import contextlib
import html
import os
import select
import signal
import socket
import time

from rdmalab.proc import procstat

PATTERN_OFFSET, PATTERN_BYTES = 1024, 64       # in the target's 4 KiB buffer
COUNTER_OFFSET = 3072                          # an 8-byte aligned word for the atomics
LOCAL_READ_OFFSET, LOCAL_ATOMIC_OFFSET = 2048, 3072
STALL_S = 0.5                                  # a socket that takes nothing for this long has stalled
CHUNK = 64 << 10


@contextlib.contextmanager
def frozen(pid, timeout=5.0):
    """The process `pid` stopped (SIGSTOP) for the duration of the block; continued (SIGCONT) after it,
    however it ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout
        while procstat.stat_fields(pid)[0] not in ("T", "t"):   # the signal is delivered asynchronously
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {pid} did not stop within {timeout} s")
            time.sleep(0.001)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _state(pid):
    return {"T": "stopped", "t": "stopped (traced)"}.get(procstat.stat_fields(pid)[0], procstat.stat_fields(pid)[0])


class Operation:
    """One RDMA operation against the frozen target: what was asked and what came back."""

    def __init__(self, what, status, micros, detail):
        self.what, self.status, self.micros, self.detail = what, status, micros, detail

    def to_dict(self):
        return {"what": self.what, "status": self.status, "us": self.micros, "detail": self.detail}


def _post_and_wait(qp, cq, wr, timeout):
    from rdmalab.verbs import rc
    started = time.perf_counter()
    qp.post_send(wr)
    try:
        wc = rc.wait_for_completion(cq, timeout)
    except TimeoutError:
        return None, None
    return wc.status, (time.perf_counter() - started) * 1e6


def _rdma_operations(qp, cq, local, target, pattern, timeout):
    """WRITE, READ back, FETCH_AND_ADD twice, each waited for; the target is stopped throughout."""
    from rdmalab import verbs as v
    e, rkey, base = v.enums, target.endpoint["rkey"], target.endpoint["addr"]
    local.write(pattern, len(pattern))
    ops = []

    def wr(opcode, local_offset, length):
        return v.wr.SendWR(wr_id=7, opcode=opcode, num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                           sg=[v.wr.SGE(local.buf + local_offset, length, local.lkey)])

    write = wr(e.IBV_WR_RDMA_WRITE, 0, len(pattern))
    write.set_wr_rdma(rkey, base + PATTERN_OFFSET)
    status, us = _post_and_wait(qp, cq, write, timeout)
    ops.append(Operation("RDMA WRITE of a new pattern", status, us, f"{len(pattern)} bytes at offset {PATTERN_OFFSET}"))

    local.write(bytes(len(pattern)), len(pattern), LOCAL_READ_OFFSET)
    read = wr(e.IBV_WR_RDMA_READ, LOCAL_READ_OFFSET, len(pattern))
    read.set_wr_rdma(rkey, base + PATTERN_OFFSET)
    status, us = _post_and_wait(qp, cq, read, timeout)
    got = local.read(len(pattern), LOCAL_READ_OFFSET)
    ops.append(Operation("RDMA READ of those bytes", status, us,
                         "the pattern came back from the target's memory" if got == pattern else
                         f"read back {got[:16].hex()}..., not the pattern"))

    olds = []
    for _ in range(2):
        add = wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, LOCAL_ATOMIC_OFFSET, 8)
        add.set_wr_atomic(rkey, base + COUNTER_OFFSET, 1, 0)
        status, us = _post_and_wait(qp, cq, add, timeout)
        olds.append(int.from_bytes(local.read(8, LOCAL_ATOMIC_OFFSET), "little"))
        ops.append(Operation("FETCH_AND_ADD 1 to a counter", status, us, f"returned the old value {olds[-1]}"))
    return ops, got == pattern, olds


def _tcp_until_stalled(sock, budget):
    """Send zeros without blocking until the socket takes nothing for STALL_S (or `budget` bytes went):
    returns (bytes accepted, whether it stalled)."""
    sock.setblocking(False)
    chunk, sent = bytes(CHUNK), 0
    try:
        while sent < budget:
            try:
                sent += sock.send(chunk[:min(CHUNK, budget - sent)])
            except BlockingIOError:
                if not select.select([], [sock], [], STALL_S)[1]:
                    return sent, True
    finally:
        sock.setblocking(True)
    return sent, False


def experiment(qp, cq, local, target, timeout=10.0, tcp_budget=256 << 20):
    """Stop the target, reach it by RDMA and by TCP, continue it, let it look. Returns a FreezeResult."""
    from rdmalab import verbs as v
    pattern = os.urandom(PATTERN_BYTES)
    counter_before = int.from_bytes(target.read(8, COUNTER_OFFSET), "little")
    port = target.tcp_listen()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        target.tcp_accept()
        with frozen(target.pid):
            before = procstat.snapshot(target.pid)   # (exact: a stopped process's counters do not move under us)
            ops, read_ok, olds = _rdma_operations(qp, cq, local, target, pattern, timeout)
            started = time.perf_counter()
            accepted, stalled = _tcp_until_stalled(sock, tcp_budget)
            stalled_s = time.perf_counter() - started
            state = _state(target.pid)
            spent = procstat.since(before)
        # continued: the sender finishes (the receiver drains the socket now), the target looks
        rest = 1 << 20
        target.start_draining()
        sock.sendall(bytes(rest))
        sock.shutdown(socket.SHUT_WR)
        received = target.drained()
        found = target.read(PATTERN_BYTES, PATTERN_OFFSET) == pattern
        counter_after = int.from_bytes(target.read(8, COUNTER_OFFSET), "little")
    finally:
        sock.close()
    return FreezeResult({
        "device": v.choose_route().device, "provider": v.PROVIDER, "target_pid": target.pid,
        "target_state": state, "target_cpu_s_while_stopped": spent["cpu_s"],
        "rdma": [op.to_dict() for op in ops],
        "rdma_completed": sum(op.status == 0 for op in ops), "rdma_posted": len(ops),
        "read_returned_pattern": read_ok, "fetch_and_add_olds": olds,
        "target_found_pattern": found, "counter_before": counter_before, "counter_after": counter_after,
        "tcp_bytes_before_stall": accepted, "tcp_stalled": stalled, "tcp_seconds_until_stall": stalled_s,
        "tcp_bytes_sent": accepted + rest, "tcp_bytes_received": received,
    })


WHO = {"soft": "soft0's initiator, standing in for the NIC's DMA engine",
       "rxe": "the target host's kernel (rdma_rxe, in softirq or kworker time: not the target process)",
       "hardware": "the target's NIC (DMA), with no CPU"}


class FreezeResult:
    """The experiment's figures (`data`), shown as a table and a sentence."""

    def __init__(self, data):
        self.data = data

    @property
    def who(self):
        from rdmalab.lessons.answer import kind_of
        return WHO.get(kind_of(self.data["device"], self.data["provider"]), "the NIC")

    def lines(self):
        d = self.data
        out = [f"Target process {d['target_pid']}: {d['target_state']} throughout, "
               f"CPU {d['target_cpu_s_while_stopped'] * 1e3:.3f} ms while stopped."]
        for op in d["rdma"]:
            done = "no completion" if op["status"] is None else \
                "completed" if op["status"] == 0 else f"failed with status {op['status']}"
            out.append(f"  {op['what']}: {done} {_took(op)}; {op['detail']}")
        out.append(f"  TCP to the same process: the kernel took {_mib(d['tcp_bytes_before_stall'])}, then the "
                   + ("sender stalled" if d["tcp_stalled"] else "budget ran out before a stall"))
        out.append(f"Continued, the target found the pattern: {d['target_found_pattern']}; its counter went from "
                   f"{d['counter_before']} to {d['counter_after']}; it received {_mib(d['tcp_bytes_received'])} "
                   f"of the {_mib(d['tcp_bytes_sent'])} sent.")
        out.append(f"Who served the RDMA operations on {d['device']}: {self.who}.")
        return out

    def __str__(self):
        return "\n".join(self.lines())

    __repr__ = __str__

    def _repr_html_(self):
        d, esc = self.data, html.escape
        rows = "".join(
            f"<tr><td style='text-align:left'>{esc(op['what'])}</td>"
            f"<td>{'&#10004; completed' if op['status'] == 0 else esc('status ' + str(op['status']))}</td>"
            f"<td>{_took(op)}</td>"
            f"<td style='text-align:left'>{esc(op['detail'])}</td></tr>" for op in d["rdma"])
        tcp = (f"<tr><td style='text-align:left'>TCP send() to the same process</td>"
               f"<td>{'&#10008; stalled' if d['tcp_stalled'] else 'no stall'}</td>"
               f"<td>{d['tcp_seconds_until_stall'] * 1e3:.0f} ms</td>"
               f"<td style='text-align:left'>the kernel buffered {_mib(d['tcp_bytes_before_stall'])}, then "
               f"nothing more moved</td></tr>")
        return (f"<p><b>Target process {d['target_pid']} was {esc(d['target_state'])}</b> (SIGSTOP) throughout: "
                f"CPU {d['target_cpu_s_while_stopped'] * 1e3:.3f} ms.</p>"
                f"<table><tr><th style='text-align:left'>asked of the stopped process</th><th>outcome</th>"
                f"<th>time</th><th style='text-align:left'>detail</th></tr>{rows}{tcp}</table>"
                f"<p>Continued (SIGCONT), the target found the pattern in its memory: "
                f"<b>{d['target_found_pattern']}</b>; its counter went {d['counter_before']} &rarr; "
                f"{d['counter_after']}; its socket delivered {_mib(d['tcp_bytes_received'])} of the "
                f"{_mib(d['tcp_bytes_sent'])} sent.<br>On <b>{esc(d['device'])}</b> the RDMA operations were "
                f"served by {esc(self.who)}.</p>")


def _took(op):
    return "" if op["us"] is None else f"{op['us']:.0f} us"


def _mib(n):
    return f"{n / (1 << 20):.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"

