"""Freeze the target (lesson 05): the learner stops the process whose memory they reach, and sees what still
moves. The learner writes the experiment as a function; this module keeps the plumbing.

    def stop_and_reach(pid, post, cq, local, sock):     # the learner's
        os.kill(pid, signal.SIGSTOP)
        ... post a WRITE, a READ and a FETCH_AND_ADD, poll each completion, push sock until it would block ...
        os.kill(pid, signal.SIGCONT)
        return {"statuses": [...], "read_back": ..., "old_counter": ..., "tcp_bytes": ...}

    result = freeze.run(stop_and_reach, post, cq, local, target)   # target: lesson 05's RemoteBuffer
    result          # a table in a notebook; result.data for the figures, result.record for what happened

run() stages a fresh pattern at local offset 0 (and zeros where the READ and the atomic return their bytes),
has the target accept a TCP connection (`sock`), and calls the function with watched stand-ins for `post`,
`cq`, `local` and `sock`, which note when each WR was posted and in what state the target was, each completion
polled, each local read, and each send. A stopped process runs no instruction until continued: not in user
space, not in a system call. So whatever reaches its memory meanwhile was done by someone else: on a hardware
NIC its DMA engine, on Soft-RoCE the target host's kernel (softirq or kworker time, not the target process's),
on soft0 the initiator's CPU standing in for the NIC. TCP's bytes wait in the kernels' buffers until the
receiving program runs read(). The answer does not depend on the device.

Whatever the function does (raises, leaves the target stopped, blocks on the socket, loops), run() continues
the target (SIGCONT) before it returns: a blocking send gives up after HANG_S, polling with no completion after
POLL_S, and the whole function after DEADLINE_S. Then the target looks: it drains its socket (the bytes the
kernel held, and 1 MiB more), and reads its pattern and counter; the completions the function left unpolled are
polled, so the QP's next user finds its CQ empty.
"""
import contextlib
import html
import os
import signal
import socket
import time

from rdmalab.errors import RequestError
from rdmalab.proc import procstat
from rdmalab import verbs as v

PATTERN_AT, READ_AT, ADD_AT = 0, 64, 128       # in the initiator's buffer: the pattern, the READ's and the atomic's
REMOTE_PATTERN, REMOTE_COUNTER = 1024, 3072    # in the target's 4 KiB: where the pattern goes, the 8-byte counter
PATTERN_BYTES = 64
STOP_SETTLE_S = 0.5   # SIGSTOP is delivered asynchronously: a post waits this long for the stop to take hold
HANG_S = 2.0          # a blocking send() that has taken nothing for this long is stopped: its receiver never reads
POLL_S = 10.0         # polling that finds no completion for this long is stopped
DEADLINE_S = 60.0     # the whole function
REST = 1 << 20        # what the sender sends after the function, once the target reads its socket again


def state(pid):
    """'stopped', 'sleeping', 'running', ... from /proc/<pid>/stat."""
    code = procstat.stat_fields(pid)[0]
    return {"T": "stopped", "t": "stopped", "S": "sleeping", "R": "running", "D": "waiting (D)"}.get(code, code)


def _settled(pid):
    """The target's state at a post: if not stopped yet, wait up to STOP_SETTLE_S for a SIGSTOP in flight."""
    deadline = time.monotonic() + STOP_SETTLE_S
    while (now := state(pid)) != "stopped" and time.monotonic() < deadline:
        time.sleep(0.001)
    return now


class Record:
    """What the learner's function did, in order: posts, completions polled, local reads, sends."""

    def __init__(self):
        self.posts = []        # {"opcode", "length", "remote_offset", "local_offset", "target", "polled_before"}
        self.polled = []       # {"status", "opcode"}
        self.reads = []        # {"offset", "length", "polled_before"}
        self.sends = []        # {"bytes", "target", "outcome": "took", "would block" or "blocked"}
        self.nonblocking = False


class _Post:
    """post(), noting the target's state at each post. A WR outside either buffer (or an atomic not of 8 aligned
    bytes) is refused here, before the NIC would fail it and leave the lesson's QP in ERR for its later cells."""

    def __init__(self, post, pid, record, remote_size, local_size):
        self.post, self.pid, self.record = post, pid, record
        self.remote_size, self.local_size = remote_size, local_size

    def __call__(self, opcode, length, remote_offset=0, local_offset=0, **more):
        e = v.enums
        if not (0 <= remote_offset and remote_offset + length <= self.remote_size and 0 <= local_offset
                and local_offset + length <= self.local_size and length > 0):
            raise ValueError(f"{length} bytes at remote offset {remote_offset} and local offset {local_offset} do not "
                             f"fit the target's {self.remote_size} bytes and your {self.local_size}")
        if opcode in (e.IBV_WR_ATOMIC_FETCH_AND_ADD, e.IBV_WR_ATOMIC_CMP_AND_SWP) and (length != 8 or remote_offset % 8):
            raise ValueError(f"an atomic works on 8 bytes at an 8-byte aligned address, not {length} at offset "
                             f"{remote_offset}")
        self.record.posts.append({"opcode": int(opcode), "length": length, "remote_offset": remote_offset,
                                  "local_offset": local_offset, "target": _settled(self.pid),
                                  "polled_before": len(self.record.polled)})
        return self.post(opcode, length, remote_offset, local_offset, **more)


class _CQ:
    """The CQ, noting each completion polled; polling that finds nothing for POLL_S raises TimeoutError."""

    def __init__(self, cq, record):
        self._cq, self._record, self._empty_since = cq, record, None

    def poll(self, num_entries=1):
        n, wcs = self._cq.poll(num_entries)
        for wc in wcs:
            self._record.polled.append({"status": int(wc.status), "opcode": int(wc.opcode)})
        if n:
            self._empty_since = None
        elif self._empty_since is None:
            self._empty_since = time.monotonic()
        elif time.monotonic() - self._empty_since > POLL_S:
            raise TimeoutError(f"you polled for {POLL_S:.0f} s and no completion came")
        return n, wcs

    def __getattr__(self, name):
        return getattr(self._cq, name)


class _MR:
    """The local MR, noting each read of it (and how many completions had been polled by then)."""

    def __init__(self, mr, record):
        self._mr, self._record = mr, record

    def read(self, length, offset=0):
        self._record.reads.append({"offset": offset, "length": length, "polled_before": len(self._record.polled)})
        return self._mr.read(length, offset)

    def __getattr__(self, name):
        return getattr(self._mr, name)


class _Socket:
    """The TCP socket to the target, noting every send and whether it ended 'would block'. A blocking send
    gives up after HANG_S (TimeoutError), as it would otherwise wait for a receiver that never reads."""

    def __init__(self, sock, pid, record):
        self._sock, self._pid, self._record = sock, pid, record
        sock.settimeout(HANG_S)

    def setblocking(self, flag):
        self._record.nonblocking = not flag
        self._sock.settimeout(HANG_S if flag else 0.0)

    def settimeout(self, value):
        self._record.nonblocking = value == 0
        self._sock.settimeout(HANG_S if value is None else min(value, HANG_S))

    def send(self, data, *flags):
        note = {"bytes": 0, "target": state(self._pid), "outcome": "took"}
        self._record.sends.append(note)
        try:
            note["bytes"] = self._sock.send(data, *flags)
        except BlockingIOError:
            note["outcome"] = "would block"
            raise
        except socket.timeout:
            note["outcome"] = "blocked"
            raise TimeoutError(f"send() blocked for {HANG_S:.0f} s on a blocking socket") from None
        return note["bytes"]

    def sendall(self, data, *flags):
        view = memoryview(data).cast("B")
        while view:
            view = view[self.send(view, *flags):]

    def __getattr__(self, name):
        return getattr(self._sock, name)


@contextlib.contextmanager
def _deadline(seconds):
    """TimeoutError in this (the main) thread after `seconds`: a function that loops is stopped. Elsewhere
    (not the main thread) nothing: the watched objects' own timeouts still hold."""
    def expired(*_):
        raise TimeoutError(f"your function was still running after {seconds:.0f} s")
    try:
        previous = signal.signal(signal.SIGALRM, expired)
    except ValueError:
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def poster(qp, local, target):
    """post(opcode, length, remote_offset=0, local_offset=0, imm=0) as lessons 05 and 06 use it: one signaled WR
    from `local` into the target's buffer (an atomic adds 1); `signaled=False` for one of a stream whose
    every n-th WR alone is. For the benchmark and the tests, which run the experiment outside the lesson."""
    e = v.enums

    def post(opcode, length, remote_offset=0, local_offset=0, imm=0, signaled=True):
        w = v.wr.SendWR(opcode=opcode, num_sge=1, sg=[v.wr.SGE(local.buf + local_offset, length, local.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED if signaled else 0, imm_data=imm)
        rkey, address = target.endpoint["rkey"], target.endpoint["addr"] + remote_offset
        if opcode == e.IBV_WR_ATOMIC_FETCH_AND_ADD:
            w.set_wr_atomic(rkey, address, 1, 0)
        else:
            w.set_wr_rdma(rkey, address)
        qp.post_send(w)
    return post


def run(fn, post, cq, local, target):
    """Call fn(pid, post, cq, local, sock) as described above; returns a FreezeResult. The target runs on this
    host: the learner's code signals its pid here (on two machines, tests/twohost shows the same experiment
    with ssh doing the signalling)."""
    if getattr(target, "host", None):
        raise RequestError(f"freeze.run stops the target with os.kill on this machine, and this target runs on "
                           f"{target.host}: start it here (RemoteBuffer()), or signal it there over ssh "
                           f"(`ssh {target.host} kill -STOP {target.pid}`, as tests/twohost does)")
    pid, record = target.pid, Record()
    pattern = os.urandom(PATTERN_BYTES)
    local.write(pattern, PATTERN_BYTES, PATTERN_AT)
    local.write(bytes(ADD_AT + 8 - READ_AT), ADD_AT + 8 - READ_AT, READ_AT)
    counter_before = int.from_bytes(target.read(8, REMOTE_COUNTER), "little")
    port = target.tcp_listen()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    answer = error = None
    try:
        target.tcp_accept()
        try:
            with _deadline(DEADLINE_S):
                answer = fn(pid, _Post(post, pid, record, target.endpoint["size"], local.length), _CQ(cq, record),
                            _MR(local, record),
                            _Socket(sock, pid, record))
        except Exception as raised:   # what the learner's code raised is part of the result
            error = raised
        finally:
            left_stopped = state(pid) == "stopped"
            os.kill(pid, signal.SIGCONT)   # whatever happened: never leave a stopped process behind
        _poll_the_rest(cq, len(record.posts) - len(record.polled))
        sock.setblocking(True)
        target.start_draining()
        sock.sendall(bytes(REST))
        sock.shutdown(socket.SHUT_WR)
        received = target.drained()
        found = target.read(PATTERN_BYTES, REMOTE_PATTERN) == pattern
        counter_after = int.from_bytes(target.read(8, REMOTE_COUNTER), "little")
    finally:
        sock.close()
    return FreezeResult({
        "device": v.choose_route().device, "provider": v.PROVIDER, "target_pid": pid,
        "rdma": [{"what": _name(p["opcode"]), "target": p["target"], "status": s["status"] if s else None}
                 for p, s in zip(record.posts, record.polled + [None] * len(record.posts))],
        "rdma_posted": len(record.posts), "rdma_completed": sum(c["status"] == 0 for c in record.polled),
        "stopped_throughout": bool(record.posts) and all(p["target"] == "stopped" for p in record.posts)
        and all(s["target"] == "stopped" for s in record.sends),
        "pattern": pattern, "target_found_pattern": found, "counter_before": counter_before,
        "counter_after": counter_after, "tcp_bytes_before_stall": received - REST,
        "tcp_stalled": bool(record.sends) and record.sends[-1]["outcome"] == "would block",
        "tcp_bytes_sent": sum(send["bytes"] for send in record.sends) + REST, "tcp_bytes_received": received,
        "left_stopped": left_stopped,
    }, record, answer, error)


def _poll_the_rest(cq, missing, timeout=2.0):
    """Poll the completions the function did not (its QP's next user finds an empty CQ)."""
    deadline = time.monotonic() + timeout
    while missing > 0 and time.monotonic() < deadline:
        n, _ = cq.poll(missing)
        missing -= n
        if not n:
            time.sleep(0.001)
    while cq.poll(16)[0]:
        pass


def _name(opcode):
    e = v.enums
    return {int(e.IBV_WR_RDMA_WRITE): "RDMA WRITE", int(e.IBV_WR_RDMA_READ): "RDMA READ",
            int(e.IBV_WR_ATOMIC_FETCH_AND_ADD): "FETCH_AND_ADD", int(e.IBV_WR_ATOMIC_CMP_AND_SWP): "COMPARE_AND_SWAP",
            int(e.IBV_WR_RDMA_WRITE_WITH_IMM): "RDMA WRITE_WITH_IMM", int(e.IBV_WR_SEND): "SEND"}.get(opcode, f"opcode {opcode}")


WHO = {"soft": "soft0's initiator, standing in for the NIC's DMA engine",
       "rxe": "the target host's kernel (rdma_rxe, in softirq or kworker time: not the target process)",
       "hardware": "the target's NIC (DMA), with no CPU"}


class FreezeResult:
    """The experiment's figures (`data`), what the function did (`record`), what it returned (`answer`) or
    raised (`error`); shown as a table and a sentence."""

    def __init__(self, data, record=None, answer=None, error=None):
        self.data, self.record, self.answer, self.error = data, record, answer, error

    @property
    def who(self):
        from rdmalab.lessons.answer import kind_of
        return WHO.get(kind_of(self.data["device"], self.data["provider"]), "the NIC")

    def _stopped(self):
        d = self.data
        return (f"Target process {d['target_pid']} was stopped (SIGSTOP) throughout: at every post and every send"
                if d["stopped_throughout"] else f"Target process {d['target_pid']} was not stopped throughout")

    def lines(self):
        d = self.data
        out = [self._stopped() + "."]
        for op in d["rdma"]:
            out.append(f"  {op['what']} posted while the target was {op['target']}: {_outcome(op['status'])}")
        out.append(f"  TCP to the same process: the kernel took {_mib(d['tcp_bytes_before_stall'])}, then "
                   + ("send() would block" if d["tcp_stalled"] else "the sender stopped before it would block"))
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
            f"<tr><td style='text-align:left'>{esc(op['what'])}</td><td>{esc(op['target'])}</td>"
            f"<td>{'&#10004; ' if op['status'] == 0 else ''}{esc(_outcome(op['status']))}</td></tr>" for op in d["rdma"])
        tcp = (f"<tr><td style='text-align:left'>TCP send()s to the same process</td>"
               f"<td>{esc(self.record.sends[0]['target']) if self.record and self.record.sends else ''}</td>"
               f"<td>{'&#10008; would block' if d['tcp_stalled'] else 'no stall'} after "
               f"{_mib(d['tcp_bytes_before_stall'])}</td></tr>")
        return (f"<p><b>{esc(self._stopped())}</b>.</p>"
                f"<table><tr><th style='text-align:left'>asked of the process</th><th>the target was</th>"
                f"<th>outcome</th></tr>{rows}{tcp}</table>"
                f"<p>Continued (SIGCONT), the target found the pattern in its memory: "
                f"<b>{d['target_found_pattern']}</b>; its counter went {d['counter_before']} &rarr; "
                f"{d['counter_after']}; its socket delivered {_mib(d['tcp_bytes_received'])} of the "
                f"{_mib(d['tcp_bytes_sent'])} sent.<br>On <b>{esc(d['device'])}</b> the RDMA operations were "
                f"served by {esc(self.who)}.</p>")


def _outcome(status):
    return "no completion polled" if status is None else "completed" if status == 0 else f"status {status}"


def _mib(n):
    return f"{n / (1 << 20):.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"
