"""How ranks move bytes for a collective: one small interface, over RDMA and over TCP.

Each rank owns named *regions* of memory: "data" (the user's buffer, where results land) and
"stage" (where incoming pieces wait to be reduced). A transport offers these operations:

    put(peer, src, region, offset)   deliver the bytes of `src` into `peer`'s region at `offset`,
                                     then let `peer` know (in order with everything else we put);
                                     signaled=True: the last put before a flush (RDMA: its completion
                                     is asked for now, so the flush sends nothing more)
    signal(peer)                     only let `peer` know (a credit: "you may write to me now")
    wait(peer)                       block until the next put or signal from `peer` has landed
    flush()                          block until everything we put has left our buffers
    exchanged()                      how many puts and signals we sent and waits we ended, so far
    prepared(peer, src, region, offset)
                                     that put, checked and built once: put_it(signaled=False) sends it
                                     (a plan that puts the same pieces every call, as the ring does)

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
from rdmalab.errors import RdmalabError, explain_status
from rdmalab.proc import waiting
from rdmalab import verbs as v
from rdmalab.verbs import rc

TRANSPORTS = ("rdma", "tcp")   # RdmaTransport, TcpTransport
REGIONS = ("data", "stage")
# a peer silent for this long while we wait is treated as dead (RDMALAB_TIME_SCALE stretches it on
# slow machines, as the Soft-RoCE guest under CPU emulation is)
def peer_timeout():
    return 10.0 * settings.time_scale()


class PeerLost(RdmalabError):
    """A peer stopped answering (it died, or hangs): the collective cannot complete."""


class Transport:
    """What every transport offers besides its own put, signal, wait, flush and exchanged."""

    def prepared(self, peer, src, region, offset):
        """put(peer, src, region, offset, signaled) for a plan that puts the same piece every call: returns
        put_it(signaled=False). Here it puts as put() does; a transport that can build a put once overrides it."""
        return lambda signaled=False: self.put(peer, src, region, offset, signaled)


class RdmaTransport(Transport):
    """Full mesh of RC QPs (one per peer), a registered region per name, and a flag array:
    flags[2 * peer] holds the sequence number of the last put or signal from `peer`.

    What a put costs is what a ring step costs, so it is built as RDMA programs build their fast path:
    - one post_send per put: the data's WRITE carries its flag's WRITE as next_wr (one doorbell);
    - the flag WRs are built once, at connect(): a WR's SGE is fixed when it is built (pyverbs copies
      it), so each peer gets a ring of SLOTS flag WRs, flag n sent from slot n % SLOTS of our sequence
      memory. The NIC reads a slot when it sends, which may be after we post the next flag: a slot is
      written again only SLOTS flags later, once the flag sent from it has completed (see _flag);
    - one flag in SIGNAL_EVERY asks for a completion (a completion costs the NIC and us work: perftest's
      --cq-mod does the same). An unsignaled WR's queue slot is freed by the next signaled completion,
      and an error completes whether asked for or not, so a failed write is still seen."""
    SLOTS = 64            # sequence slots per peer (flags in flight at most)
    SIGNAL_EVERY = 16     # one flag in this many is signaled
    DATA_WRS = 256        # the puts' WRs kept for the next call (a ring of p ranks, s segments: 2 (p - 1) s)

    def __init__(self, rank, size, region_bytes):
        self.rank, self.size = rank, size
        self.timeout = peer_timeout()   # (read once: a wait's cost is a ring step's)
        peers = [peer for peer in range(size) if peer != rank]
        # one QP per peer, their sends all on one CQ (their receive CQ never sees a completion: nothing is
        # received, so the CQ we poll looks at no receive queue); MRs (local and remote write): the regions, the
        # flags, and the sequence numbers we WRITE from (SLOTS a peer)
        sizes = [max(int(region_bytes[name]), 64) for name in REGIONS] + [16 * max(size, 1), 8 * self.SLOTS * size]
        self.res = rc.Resources(mr_sizes=sizes, qps=len(peers), max_send_wr=4 * self.SLOTS, max_recv_wr=1,
                                cq_depth=4096, two_cqs=True, sq_sig_all=0)
        *regions, self.seq_mr = self.res.mrs
        self.cq, self.mrs = self.res.send_cq, dict(zip([*REGIONS, "flags"], regions))
        self.views = {name: v.as_array(mr) for name, mr in self.mrs.items()}
        self.bases = {name: (view.ctypes.data, view.nbytes, self.mrs[name]) for name, view in self.views.items()}
        self.flags = self.views["flags"].view(np.int64)
        self.qps = dict(zip(peers, self.res.qps))
        self.local = {peer: self.res.endpoint(i) for i, peer in enumerate(peers)}
        self.sent = [0] * size          # sequence numbers we put/signalled to each peer
        self.seen = [0] * size          # sequence numbers we have waited for, from each peer
        self.done = [0] * size          # the last of our flags to each peer known to have completed
        self.signaled = [0] * size      # the last of our flags to each peer that asked for a completion
        self.data_wrs = {}              # (peer, address, bytes, region, offset) -> the WR that puts them
        self.seq_view = v.as_array(self.seq_mr).view(np.int64)
        # what _wr builds every put from, looked up once (a put's cost is a ring step's)
        self.SendWR, self.SGE = v.wr.SendWR, v.wr.SGE
        self.WRITE, self.SIGNALED = v.enums.IBV_WR_RDMA_WRITE, v.enums.IBV_SEND_SIGNALED

    def endpoints(self):
        """What each peer needs: our QP for it, and every region's rkey and address."""
        regions = {name: {"rkey": mr.rkey, "addr": mr.buf, "length": mr.length} for name, mr in self.mrs.items()}
        return {peer: {**self.local[peer], "regions": regions} for peer in self.qps}

    def connect(self, theirs):
        """`theirs[peer]` is the endpoint `peer` made for us."""
        self.remote, self.flag_wrs = {}, {}
        for i, peer in enumerate(self.qps):
            self.remote[peer] = theirs[peer]
            self.res.connect(theirs[peer], i)
            # flag n: slot n % SLOTS of our sequence memory into peer's flag word for us; signaled or not
            flag = theirs[peer]["regions"]["flags"]
            self.flag_wrs[peer] = [[self._wr(peer, self.seq_mr.buf + 8 * (peer * self.SLOTS + slot), 8, self.seq_mr.lkey,
                                             flag["rkey"], flag["addr"] + 16 * self.rank, signaled)
                                    for signaled in (False, True)] for slot in range(self.SLOTS)]

    def buffer(self, region="data"):
        return self.views[region]

    def _wr(self, wr_id, local_addr, length, lkey, rkey, remote_addr, signaled=False, next_wr=None):
        wr = self.SendWR(wr_id=wr_id, opcode=self.WRITE, num_sge=1, sg=[self.SGE(local_addr, length, lkey)],
                         send_flags=self.SIGNALED if signaled else 0, next_wr=next_wr)
        wr.set_wr_rdma(rkey, remote_addr)
        return wr

    def _flag(self, peer, signaled=False):
        """The WR that carries our next sequence number to peer, written into its slot. First, if need be,
        waits until the flag sent from that slot SLOTS flags ago has completed."""
        n = self.sent[peer] = self.sent[peer] + 1
        if n - self.SLOTS > self.done[peer]:
            self._until_done(peer, n - self.SLOTS)
        slot = n % self.SLOTS
        self.seq_view[peer * self.SLOTS + slot] = n
        signaled = signaled or n % self.SIGNAL_EVERY == 0
        if signaled:
            self.signaled[peer] = n
        wr = self.flag_wrs[peer][slot][signaled]
        wr.wr_id = n << 16 | peer     # (its completion says which flag, to whom)
        return wr

    def put(self, peer, src, region, offset, signaled=False):
        """RDMA WRITE the bytes of `src` (a view into one of our regions) into peer's region at `offset`,
        then our next sequence number into its flag: one post_send, two WRITEs, in order. signaled: ask for
        its completion now, as the put a flush() will follow (which then sends nothing more)."""
        # a ring puts the same pieces every call: their WRs are built once (a WR is copied to the NIC's queue
        # as it is posted, so one may be posted again; only the flag chained after it changes)
        at, size = src.__array_interface__["data"][0], src.nbytes
        key = (peer, at, size, region, offset)
        wr = self.data_wrs.get(key)
        if wr is None:
            if len(self.data_wrs) >= self.DATA_WRS:
                self.data_wrs.clear()
            wr = self.data_wrs[key] = self._data_wr(peer, src, region, offset)
        self._post(peer, wr, signaled)

    def prepared(self, peer, src, region, offset):
        """put(peer, src, region, offset, signaled) checked and built once, for a plan that puts the same
        piece every call (as NCCL builds its plans before it runs them): returns put_it(signaled=False)."""
        wr, post = self._data_wr(peer, src, region, offset), self._post
        return lambda signaled=False: post(peer, wr, signaled)

    def _data_wr(self, peer, src, region, offset):
        """The WRITE of `src`'s bytes into peer's `region` at `offset` (None for no bytes), checked."""
        at, size = src.__array_interface__["data"][0], src.nbytes
        for base, nbytes, mr in self.bases.values():
            if base <= at and at + size <= base + nbytes:
                break
        else:
            raise ValueError("put() sends from a registered region only: use transport.buffer(...)")
        if not src.flags.c_contiguous:
            raise ValueError("put() sends contiguous bytes: a slice x[a:b], not x[::2]")
        if not size:
            return None
        r = self.remote[peer]["regions"][region]
        if offset + size > r["length"]:
            raise ValueError(f"put of {size} bytes at {offset} overflows rank {peer}'s {region} ({r['length']} bytes)")
        return self._wr(peer, mr.buf + (at - base), size, mr.lkey, r["rkey"], r["addr"] + offset)

    def _post(self, peer, wr, signaled):
        """One doorbell: the data's WRITE (if any bytes), then our next flag's."""
        flag = self._flag(peer, signaled)
        if wr is None:
            return self.qps[peer].post_send(flag)
        wr.next_wr = flag
        self.qps[peer].post_send(wr)

    def signal(self, peer):
        """WRITE our next sequence number into peer's flag slot for us; RC keeps it after the data."""
        self.qps[peer].post_send(self._flag(peer))

    def exchanged(self):
        return sum(self.sent) + sum(self.seen)

    def wait(self, peer, alive=None):
        """Watch our own flag memory until peer's next sequence number has landed (rdmalab.proc.waiting:
        spin as long as a collective's step may take while every rank has a CPU, then sleep until the
        write wakes us; between sleeps, check for failed writes)."""
        self.seen[peer] += 1
        want, slot = self.seen[peer], 2 * peer
        flags = self.flags
        if flags[slot] >= want:
            return

        def healthy():
            self._reap()
            return alive is None or alive(peer)
        try:
            waiting.memory(lambda: flags[slot] >= want, self.mrs["flags"], self.timeout, f"rank {peer}", healthy,
                           spin_s=waiting.COLLECTIVE_SPIN_S)
        except TimeoutError:
            raise PeerLost(f"rank {self.rank}: rank {peer} sent nothing for {self.timeout:.0f} s") from None

    def _reap(self, wcs=None):
        """Take completions (polled now, or those given): each is a signaled flag's, and says its QP's
        earlier WRs are done too; an error completion, asked for or not, means a peer is gone."""
        for wc in self.cq.poll(16)[1] if wcs is None else wcs:
            peer, flag = wc.wr_id & 0xFFFF, wc.wr_id >> 16
            if wc.status != 0:
                raise PeerLost(f"rank {self.rank}: a write to rank {peer} failed with status "
                               f"{explain_status(wc.status)}")
            self.done[peer] = max(self.done[peer], flag)

    def _until_done(self, peer, flag):
        """Wait until our flag number `flag` to peer has completed."""
        while self.done[peer] < flag:
            try:
                self._reap(waiting.poll(self.cq, 16, self.timeout, "our writes' completions"))
            except TimeoutError:
                raise PeerLost(f"rank {self.rank}: writes to rank {peer} not completed within "
                               f"{self.timeout:.0f} s") from None

    def flush(self):
        """Block until every WRITE we posted has completed (so the memory it read may change). A last flag
        that was not signaled is sent again, signaled: the same number again changes nothing there."""
        for peer, n in enumerate(self.sent):
            if peer == self.rank or self.done[peer] >= n:
                continue
            if self.signaled[peer] < n:
                wr = self.flag_wrs[peer][n % self.SLOTS][True]
                wr.wr_id = n << 16 | peer
                self.qps[peer].post_send(wr)
            self._until_done(peer, n)

    def close(self):
        try:
            self.res.close()
        except Exception:
            pass


class TcpTransport(Transport):
    """Full mesh of TCP connections; a sender thread per peer so that puts never block the receiver
    (two ranks putting to each other at once would otherwise fill both socket buffers and deadlock)."""
    HEADER = struct.Struct("<BQQ")   # region (0 data, 1 stage, 255 signal), offset, length

    def __init__(self, rank, size, region_bytes, host="127.0.0.1"):
        self.rank, self.size, self.host = rank, size, host
        self.regions = {name: np.zeros(max(int(region_bytes[name]), 64), np.uint8) for name in REGIONS}
        self.server, self.port = sockets.listen(host)
        self.socks, self.threads = {}, {}
        self.error = None
        self.messages = 0   # puts and signals sent, waits ended: exchanged()

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

    def put(self, peer, src, region, offset, signaled=False):
        self.messages += 1
        self.threads[peer].send(self.HEADER.pack(REGIONS.index(region), offset, src.nbytes), src.view(np.uint8).reshape(-1))

    def signal(self, peer):
        self.messages += 1
        self.threads[peer].send(self.HEADER.pack(255, 0, 0), None)

    def exchanged(self):
        return self.messages

    def wait(self, peer, alive=None):
        self.messages += 1
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
