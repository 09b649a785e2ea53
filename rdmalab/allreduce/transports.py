"""How ranks move bytes for a collective: one small interface, over RDMA and over TCP.

Each rank owns named *regions* of memory: "data" (the user's buffer, where results land) and
"stage" (where incoming pieces wait to be reduced). A transport offers four operations:

    put(peer, src, region, offset)   deliver the bytes of `src` into `peer`'s region at `offset`,
                                     then let `peer` know (in order with everything else we put)
    signal(peer)                     only let `peer` know (a credit: "you may write to me now")
    wait(peer)                       block until the next put or signal from `peer` has landed
    flush()                          block until everything we put has left our buffers

RDMA (RdmaTransport): put is an RDMA WRITE straight into the peer's registered region, then an
8-byte WRITE of a sequence number into the peer's flag slot for us; wait spins on our own memory.
No receive is posted, no copy is made, and the peer's CPU does nothing until it looks at the flag.
TCP (TcpTransport): put sends a header and the bytes on the socket to the peer; wait reads the next
message from that peer's socket straight into the region named in its header.
"""
import struct
import threading

import numpy as np

from rdmalab import settings, sockets
from rdmalab.errors import RdmalabError
from rdmalab.proc import waiting

TRANSPORTS = ("rdma", "tcp")   # RdmaTransport, TcpTransport
REGIONS = ("data", "stage")
# a peer silent for this long while we wait is treated as dead (RDMALAB_TIME_SCALE stretches it on
# slow machines, as the Soft-RoCE guest under CPU emulation is)
def peer_timeout():
    return 10.0 * settings.time_scale()


class PeerLost(RdmalabError):
    """A peer stopped answering (it died, or hangs): the collective cannot complete."""


class RdmaTransport:
    """Full mesh of RC QPs (one per peer), a registered region per name, and a flag array:
    flags[2 * peer] holds the sequence number of the last put or signal from `peer`."""

    def __init__(self, rank, size, region_bytes):
        from rdmalab import verbs as v
        from rdmalab.verbs import rc
        self.v, self.rank, self.size = v, rank, size
        peers = [peer for peer in range(size) if peer != rank]
        # one QP per peer, all on one CQ; MRs (local and remote write): the regions, the flags, and the
        # sequence numbers we WRITE from
        sizes = [max(int(region_bytes[name]), 64) for name in REGIONS] + [16 * max(size, 1), 8 * size]
        self.res = rc.Resources(mr_sizes=sizes, qps=len(peers), max_send_wr=512, max_recv_wr=1, cq_depth=4096,
                                sq_sig_all=0, max_inline_data=8)   # (a signal's 8 bytes go inline: signal())
        *regions, self.seq_mr = self.res.mrs
        self.cq, self.mrs = self.res.cq, dict(zip([*REGIONS, "flags"], regions))
        self.views = {name: v.as_array(mr) for name, mr in self.mrs.items()}
        self.flags = self.views["flags"].view(np.int64)
        self.qps = dict(zip(peers, self.res.qps))
        self.local = {peer: self.res.endpoint(i) for i, peer in enumerate(peers)}
        self.sent = [0] * size          # sequence numbers we put/signalled to each peer
        self.seen = [0] * size          # sequence numbers we have waited for, from each peer
        self.outstanding = 0
        self.seq_view = v.as_array(self.seq_mr).view(np.int64)

    def endpoints(self):
        """What each peer needs: our QP for it, and every region's rkey and address."""
        regions = {name: {"rkey": mr.rkey, "addr": mr.buf, "length": mr.length} for name, mr in self.mrs.items()}
        return {peer: {**self.local[peer], "regions": regions} for peer in self.qps}

    def connect(self, theirs):
        """`theirs[peer]` is the endpoint `peer` made for us."""
        self.remote = {}
        for i, peer in enumerate(self.qps):
            self.remote[peer] = theirs[peer]
            self.res.connect(theirs[peer], i)

    def buffer(self, region="data"):
        return self.views[region]

    def _write(self, peer, local_addr, length, lkey, region, offset, signaled, inline=False):
        v, e = self.v, self.v.enums
        r = self.remote[peer]["regions"][region]
        if offset + length > r["length"]:
            raise ValueError(f"put of {length} bytes at {offset} overflows rank {peer}'s {region} ({r['length']} bytes)")
        flags = (e.IBV_SEND_SIGNALED if signaled else 0) | (e.IBV_SEND_INLINE if inline else 0)
        wr = v.wr.SendWR(wr_id=peer, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[v.wr.SGE(local_addr, length, lkey)],
                         send_flags=flags)
        wr.set_wr_rdma(r["rkey"], r["addr"] + offset)
        self.qps[peer].post_send(wr)
        if signaled:
            self.outstanding += 1
            if self.outstanding >= 256:
                self.flush()

    def put(self, peer, src, region, offset):
        """RDMA WRITE the bytes of `src` (a view into one of our regions) into peer's region at `offset`."""
        src = src.view(np.uint8).reshape(-1)
        for name, view in self.views.items():
            base = view.ctypes.data
            if base <= src.ctypes.data and src.ctypes.data + src.nbytes <= base + view.nbytes:
                mr = self.mrs[name]
                break
        else:
            raise ValueError("put() sends from a registered region only: use transport.buffer(...)")
        if src.nbytes:
            self._write(peer, mr.buf + (src.ctypes.data - base), src.nbytes, mr.lkey, region, offset, False)
        self.signal(peer)

    def signal(self, peer):
        """WRITE our next sequence number into peer's flag slot for us; RC keeps it after the data.
        Inline: post_send copies the 8 bytes, so the next signal may change our slot at once. Without it
        the NIC reads the slot when it sends, which may be after the next signal has changed it: a flag
        would then arrive ahead of the data it stands for (a real NIC, or soft0's udp link, does that;
        soft0's shared memory copies at post time and never showed it)."""
        self.sent[peer] += 1
        self.seq_view[peer] = self.sent[peer]
        self._write(peer, self.seq_mr.buf + 8 * peer, 8, self.seq_mr.lkey, "flags", 16 * self.rank, True, inline=True)

    def wait(self, peer, alive=None):
        """Watch our own flag memory until peer's next sequence number has landed (rdmalab.proc.waiting:
        spin, yield, then sleep until the write wakes us; between sleeps, check for failed writes)."""
        self.seen[peer] += 1
        want, slot = self.seen[peer], 2 * peer
        flags = self.flags
        if flags[slot] >= want:
            return

        def healthy():
            self._reap()
            return alive is None or alive(peer)
        try:
            waiting.memory(lambda: flags[slot] >= want, self.mrs["flags"], peer_timeout(), f"rank {peer}", healthy)
        except TimeoutError:
            raise PeerLost(f"rank {self.rank}: rank {peer} sent nothing for {peer_timeout():.0f} s") from None

    def _reap(self):
        """Poll completions of signaled writes; an error completion means a peer is gone."""
        from rdmalab.errors import explain_status
        while True:
            n, wcs = self.cq.poll(16)
            for wc in wcs:
                if wc.status != 0:
                    raise PeerLost(f"rank {self.rank}: a write to rank {wc.wr_id} failed with status "
                                   f"{explain_status(wc.status)}")
                self.outstanding -= 1
            if not n:
                return

    def flush(self):
        def drained():
            self._reap()
            return self.outstanding <= 0
        try:
            waiting.until(drained, peer_timeout(), "our writes' completions", bell=getattr(self.cq, "bell", None))
        except TimeoutError:
            raise PeerLost(f"rank {self.rank}: writes not completed within {peer_timeout():.0f} s") from None

    def close(self):
        try:
            self.res.close()
        except Exception:
            pass


class TcpTransport:
    """Full mesh of TCP connections; a sender thread per peer so that puts never block the receiver
    (two ranks putting to each other at once would otherwise fill both socket buffers and deadlock)."""
    HEADER = struct.Struct("<BQQ")   # region (0 data, 1 stage, 255 signal), offset, length

    def __init__(self, rank, size, region_bytes, host="127.0.0.1"):
        self.rank, self.size, self.host = rank, size, host
        self.regions = {name: np.zeros(max(int(region_bytes[name]), 64), np.uint8) for name in REGIONS}
        self.server, self.port = sockets.listen(host)
        self.socks, self.threads = {}, {}
        self.error = None

    def endpoints(self):
        return {peer: {"host": self.host, "port": self.port, "rank": self.rank} for peer in range(self.size)
                if peer != self.rank}

    def connect(self, theirs):
        """Lower ranks accept, higher ranks connect; each connection starts with the connector's rank."""
        for peer in range(self.size):
            if peer == self.rank:
                continue
            if peer > self.rank:
                conn = sockets.accept(self.server)
                who = int.from_bytes(_read_exactly(conn, 8), "little")
                self.socks[who] = conn
            else:
                conn = sockets.connect(theirs[peer]["host"], theirs[peer]["port"])
                sockets.send_all(conn, self.rank.to_bytes(8, "little"))
                self.socks[peer] = conn
        for peer, conn in self.socks.items():
            self.threads[peer] = _Sender(conn, self)
            self.threads[peer].start()

    def buffer(self, region="data"):
        return self.regions[region]

    def put(self, peer, src, region, offset):
        self.threads[peer].send(self.HEADER.pack(REGIONS.index(region), offset, src.nbytes), src.view(np.uint8).reshape(-1))

    def signal(self, peer):
        self.threads[peer].send(self.HEADER.pack(255, 0, 0), None)

    def wait(self, peer, alive=None):
        conn = self.socks[peer]
        head = _read_exactly(conn, self.HEADER.size)
        region, offset, length = self.HEADER.unpack(head)
        if region != 255 and length:
            target = memoryview(self.regions[REGIONS[region]])[offset:offset + length]
            sockets.recv_exactly(conn, target)

    def flush(self):
        for t in self.threads.values():
            t.drain()
        if self.error:
            raise PeerLost(f"rank {self.rank}: {self.error}")

    def close(self):
        for t in self.threads.values():
            t.stop()
        for conn in [*self.socks.values(), self.server]:
            try:
                conn.close()
            except OSError:
                pass


def _read_exactly(conn, n):
    buf = bytearray(n)
    sockets.recv_exactly(conn, memoryview(buf))
    return bytes(buf)


class _Sender(threading.Thread):
    """Writes queued messages to one socket, in order, while the main thread receives."""

    def __init__(self, conn, owner):
        super().__init__(daemon=True)
        self.conn, self.owner = conn, owner
        self.items, self.cv, self.pending, self.stopped = [], threading.Condition(), 0, False

    def send(self, header, payload):
        with self.cv:
            self.items.append((header, payload))
            self.pending += 1
            self.cv.notify()

    def drain(self):
        with self.cv:
            while self.pending and not self.owner.error:
                self.cv.wait(0.5)

    def stop(self):
        with self.cv:
            self.stopped = True
            self.cv.notify()

    def run(self):
        while True:
            with self.cv:
                while not self.items and not self.stopped:
                    self.cv.wait()
                if self.stopped and not self.items:
                    return
                header, payload = self.items.pop(0)
            try:
                sockets.send_all(self.conn, header)
                if payload is not None and payload.nbytes:
                    sockets.send_all(self.conn, payload)
            except OSError as error:
                self.owner.error = f"sending failed: {error}"
            with self.cv:
                self.pending -= 1
                self.cv.notify_all()
