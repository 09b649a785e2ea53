"""The data path of each benchmark, one class per transport, run inside rdmalab.bench's child processes.

Each side owns its resources for the whole run (registered once, at the largest size: registration
is far too slow to sit in a timed loop) and times only what perftest times.
"""
import time

from rdmalab import sockets
from rdmalab.errors import check
from rdmalab.bench.catalogue import CQ_MOD, TESTS, TX_DEPTH
from rdmalab.proc import procstat, waiting
from rdmalab import verbs as v
from rdmalab.verbs import emulated, rc

SIGNAL_EVERY = 64      # latency loops: one signaled WR in 64 keeps the send queue drained
RECEIVE_DEPTH = 128    # receives kept posted in send_lat
SPIN_TIMEOUT = 30.0    # a peer that stops answering is an error, never a hang


def make_side(role, test, max_size, host, events=False):
    if TESTS[test].transport == "rdma":
        return RdmaSide(role, test, max_size, host, events)
    return TcpSide(role, test, max_size, host)


def _measured(loop, warmup, iters, *args, copies=None):
    """Run `loop` for warmup iterations, then for iters under accounting. Returns (timestamps, spent).
    copies: what reads a count of bytes this process copied (emulated.copied_bytes: soft0 counts its own),
    whose growth over the measured iterations goes into spent["copied_bytes"] (None where nothing counts)."""
    if warmup:
        loop(warmup, *args)
    copied = copies() if copies else None
    before = procstat.snapshot()
    stamps = loop(iters, *args)
    spent = procstat.since(before)
    if copies:
        spent["copied_bytes"] = None if copied is None else copies() - copied
    return stamps, spent


class TcpSide:
    def __init__(self, role, test, max_size, host):
        self.role, self.test, self.host = role, test, host
        self.sock = self.server = None
        if role == "target":
            self.server, self.port = sockets.listen(host)
            self.memory = bytearray(max_size) if test == "tcp_rr" else None   # what tcp_rr's requests read

    def endpoint(self):
        info = {"port": self.port} if self.role == "target" else {"provider": "tcp", "device": "loopback"}
        return info

    def connect(self, peer):
        if self.role == "target":
            self.sock = sockets.accept(self.server)
        else:
            self.sock = sockets.connect(self.host, peer["port"])

    def prepare(self, size, iters):
        pass

    def serve(self, size, iters, warmup):
        """The target's part; returns what its measured iterations cost."""
        if self.test == "tcp_lat":
            return _measured(lambda n: sockets.pingpong_server(self.sock, size, n), warmup, iters)[1]
        if self.test == "tcp_rr":
            return _measured(lambda n: sockets.request_server(self.sock, self.memory, size, n), warmup, iters)[1]
        if warmup:
            sockets.stream_receive(self.sock, size, warmup, ack=False)
        return _measured(lambda n: sockets.stream_receive(self.sock, size, n), 0, iters)[1]

    def run(self, size, iters, warmup):
        if self.test in ("tcp_lat", "tcp_rr"):
            loop = sockets.pingpong_client if self.test == "tcp_lat" else sockets.request_client
            stamps, spent = _measured(lambda n: loop(self.sock, size, n), warmup, iters)
            return {"tposted": stamps, "spent": spent}
        # the target receives warmup + iters messages as one stream: the warm-up part goes first, unacknowledged
        if warmup:
            sockets.stream_send(self.sock, size, warmup, ack=False)
        (tposted, tcompleted), spent = _measured(lambda n: sockets.stream_send(self.sock, size, n), 0, iters)
        return {"tposted": tposted, "tcompleted": tcompleted, "cq_mod": 1, "spent": spent}

    def close(self):
        for s in (self.sock, self.server):
            if s is not None:
                s.close()


class RdmaSide:
    """Both roles of the RDMA tests. The MR holds an outbox (first half) and an inbox (second half)."""

    def __init__(self, role, test, max_size, host, events=False):
        self.v, self.rc, self.role, self.test = v, rc, role, test
        e = v.enums
        self.half = max(max_size, 64)
        # events (perftest -e): sleep on completion events instead of polling; sq_sig_all=0: only the
        # WRs flagged IBV_SEND_SIGNALED complete (pyverbs signals every WR by default)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.res = res = rc.Resources(mr_sizes=[2 * self.half], access=access, max_send_wr=256, max_recv_wr=256,
                                      cq_depth=1024, two_cqs=True, events=events, sq_sig_all=0)
        self.route, self.qp, self.mr, self.channel = res.route, res.qp, res.mr, res.channel
        self.send_cq, self.recv_cq = res.send_cq, res.recv_cq
        self.mem = memoryview(v.as_array(self.mr))
        self.local = {**res.endpoint(mr=self.mr), "addr": self.mr.buf + self.half}   # peers write into our inbox
        self.counter = 0                                # the value the next ping-pong message carries
        self.receives_posted, self.recv_wr = False, None

    def endpoint(self):   # link: soft0's ('shm' or 'udp'), None on a real device
        return {**self.local, "provider": self.v.PROVIDER, "device": self.route.device, "link": emulated.link()}

    def connect(self, peer):
        self.peer = peer
        self.res.connect(peer)

    @staticmethod
    def _measured(loop, warmup, iters, *args):
        """_measured, with the bytes soft0 copied meanwhile (None on a device that counts none)."""
        return _measured(loop, warmup, iters, *args, copies=emulated.copied_bytes)

    # ------------------------------------------------------------ work requests

    def _wr(self, opcode, size, signaled, wr_id=0, local_offset=0):
        v, e = self.v, self.v.enums
        sge = v.wr.SGE(self.mr.buf + local_offset, size, self.mr.lkey)
        flags = e.IBV_SEND_SIGNALED if signaled else 0
        wr = v.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge], send_flags=flags)
        if opcode != e.IBV_WR_SEND:
            wr.set_wr_rdma(self.peer["rkey"], self.peer["addr"])
        return wr

    def _post_recv(self):
        """A receive for a message of any size up to the largest, into the inbox (one WR, posted again and again)."""
        if self.recv_wr is None:
            v = self.v
            self.recv_wr = v.wr.RecvWR(wr_id=0, num_sge=1, sg=[v.wr.SGE(self.mr.buf + self.half, self.half, self.mr.lkey)])
        self.qp.post_recv(self.recv_wr)

    def _poll(self, cq, what):
        n, wcs = cq.poll(1)
        if n:
            wc = wcs[0]
        elif self.channel is not None:
            wc = self.rc.wait_for_event(cq, self.channel)
        else:
            wc = waiting.poll(cq, 1, SPIN_TIMEOUT, what)[0]
        return wc if wc.status == 0 else check(wc, what)

    # ------------------------------------------------------------ the target's side

    def prepare(self, size, iters):
        if self.test == "write_lat":
            self.mem[self.half + size - 1] = 0   # no stale counter from an earlier size may pass for an answer
        if self.test == "send_lat" and not self.receives_posted:   # kept topped up: one repost per receive
            for _ in range(RECEIVE_DEPTH):
                self._post_recv()
            self.receives_posted = True

    def serve(self, size, iters, warmup):
        """The target's part; returns what its measured iterations cost (None: it does nothing at all,
        read_lat and write_bw, and the orchestrator reads its counters from outside)."""
        if self.test == "write_lat":
            return self._measured(self._write_pingpong, warmup, iters, size, False)[1]
        if self.test == "send_lat":
            return self._measured(self._send_pingpong, warmup, iters, size, False)[1]
        return None

    # ------------------------------------------------------------ the initiator's side

    def run(self, size, iters, warmup):
        if self.test == "write_lat":
            stamps, spent = self._measured(self._write_pingpong, warmup, iters, size, True)
        elif self.test == "send_lat":
            self.prepare(size, warmup + iters)
            stamps, spent = self._measured(self._send_pingpong, warmup, iters, size, True)
        elif self.test == "read_lat":
            stamps, spent = self._measured(self._read_loop, warmup, iters, size)
        else:
            (stamps, completed), spent = self._measured(self._write_stream, warmup, iters, size)
            return {"tposted": stamps, "tcompleted": completed, "cq_mod": min(CQ_MOD, iters), "spent": spent}
        return {"tposted": stamps, "spent": spent}

    def _post_counted(self, i, post, quiet, loud, what):
        """Post iteration i's WR of a latency loop: one in SIGNAL_EVERY is signaled and its completion
        reaped, which keeps the send queue from filling with unsignaled WRs."""
        if i % SIGNAL_EVERY == SIGNAL_EVERY - 1:
            post(loud)
            self._poll(self.send_cq, what)
        else:
            post(quiet)

    def _write_pingpong(self, iters, size, first):
        """perftest's write_lat: write `size` bytes whose last byte carries a counter; the peer spins
        on its inbox's last byte, then writes back."""
        e = self.v.enums
        quiet, loud = self._wr(e.IBV_WR_RDMA_WRITE, size, False), self._wr(e.IBV_WR_RDMA_WRITE, size, True)
        mem, out_last, in_last = self.mem, size - 1, self.half + size - 1
        if first:
            mem[in_last] = 0   # no stale counter from an earlier size may pass for an answer
        post, clock, until, bell = self.qp.post_send, time.perf_counter_ns, waiting.until, getattr(self.mr, "_bell", None)
        want = [0]
        landed = lambda: mem[in_last] == want[0]   # noqa: E731 (the peer's WRITE carrying our counter arrived)
        stamps = [0] * iters
        for i in range(iters):
            self.counter = want[0] = self.counter % 255 + 1
            if not first and not landed():
                until(landed, SPIN_TIMEOUT, "the peer's RDMA WRITE", bell)
            mem[out_last] = want[0]
            stamps[i] = clock()
            self._post_counted(i, post, quiet, loud, "RDMA WRITE")
            if first and not landed():
                until(landed, SPIN_TIMEOUT, "the peer's RDMA WRITE", bell)
        return stamps

    def _send_pingpong(self, iters, size, first):
        e = self.v.enums
        quiet, loud = self._wr(e.IBV_WR_SEND, size, False), self._wr(e.IBV_WR_SEND, size, True)
        post, clock = self.qp.post_send, time.perf_counter_ns
        stamps = [0] * iters
        for i in range(iters):
            if not first:
                self._poll(self.recv_cq, "RECV")
            stamps[i] = clock()
            self._post_counted(i, post, quiet, loud, "SEND")
            self._post_recv()   # replaces the receive the peer's message used; RECEIVE_DEPTH stay posted,
            if first:           # so it can wait until our message is on its way
                self._poll(self.recv_cq, "RECV")
        return stamps

    def _read_loop(self, iters, size):
        e = self.v.enums
        wr = self._wr(e.IBV_WR_RDMA_READ, size, True)
        post, clock = self.qp.post_send, time.perf_counter_ns
        stamps = [0] * iters
        for i in range(iters):
            stamps[i] = clock()
            post(wr)
            self._poll(self.send_cq, "RDMA READ")
        return stamps

    def _write_stream(self, iters, size):
        """perftest's write_bw: up to TX_DEPTH writes in flight, one signaled in every cq_mod."""
        e = self.v.enums
        cq_mod = min(CQ_MOD, iters)
        quiet = self._wr(e.IBV_WR_RDMA_WRITE, size, False)
        loud = [self._wr(e.IBV_WR_RDMA_WRITE, size, True, wr_id=j) for j in range(iters)
                if j % cq_mod == cq_mod - 1 or j == iters - 1]
        loud_at = {w.wr_id: w for w in loud}
        post, poll, clock = self.qp.post_send, self.send_cq.poll, time.perf_counter_ns
        tposted, tcompleted = [0] * iters, [0] * iters
        posted = completed = 0
        while completed < iters:
            while posted < iters and posted - completed < TX_DEPTH:
                tposted[posted] = clock()
                post(loud_at.get(posted, quiet))
                posted += 1
            n, wcs = poll(16)
            if not n and self.channel is not None:
                wcs = [self.rc.wait_for_event(self.send_cq, self.channel)]
            elif not n:   # the send queue is full, or everything is posted: wait for the NIC
                wcs = waiting.poll(self.send_cq, 16, SPIN_TIMEOUT, "write_bw's completions")
            now = clock()
            for wc in wcs:
                check(wc, "RDMA WRITE")
                tcompleted[wc.wr_id] = now
                completed = wc.wr_id + 1
        return tposted, tcompleted

    def close(self):
        self.res.close()
