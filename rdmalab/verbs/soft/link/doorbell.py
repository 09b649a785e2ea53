"""The program's side of the udp link: it rings its host's NIC (nic.py) with work requests, and
takes the send completions the NIC sends back.

A hardware NIC is reached through a doorbell (a store into its registers) and answers through the
completion queue. Here the doorbell is a Unix datagram socket connected to the NIC process, which
the first program that needs it starts (`NIC.for_host`). A program checks each work request
locally first, as libibverbs and the driver do (an unknown lkey, an SGE out of bounds: an error
completion, after the whole packets before the bad bytes, which rxe sends first), and hands it over in order with everything else it posted, so the
completions come in order too. The data stays where it is: the NIC reads the program's registered
memory through its shared segment.

If the NIC dies, the program's QPs on it enter ERR: what was outstanding completes with
IBV_WC_FATAL_ERR (then WR_FLUSH_ERR), never a hang. The next QP created starts a new NIC.
"""
import atexit
import pickle
import select
import socket
import subprocess
import sys
import threading
import time
from collections import deque

from rdmalab.errors import WR_OPCODE_NAMES

from .. import checks, cq as cqmod, requester, responder
from ..datagram import MULTICAST_QPN, DatagramQueue
from ..constants import (IBV_QPS_ERR, IBV_QPS_RTS, IBV_SEND_INLINE, IBV_SEND_SOLICITED, IBV_WC_FATAL_ERR,
                         IBV_WC_WR_FLUSH_ERR, IBV_QPT_UC)
from ..layout import Q_RECV_CQ, Q_RQ_POLLED, Q_RQ_POSTED, Q_STATE, Q_TYPE
from ..pyverbs_error import PyverbsRDMAError
from ..operations import LOCAL_OPERATIONS, WITH_IMM
from rdmalab.wire.psn import psn_add
from ..responder import enter
from rdmalab.proc import waiting
from rdmalab.proc.procstat import pid_alive
from . import address_of, host as this_host
from .nic import doorbell_name

EIO = 5
START_TIMEOUT_S = 20
LIVENESS_CHECK_S = 0.25


class NIC:
    """This process's doorbell to its host's NIC process (one per host; started if need be)."""
    _by_host = {}

    @classmethod
    def running_on(cls, host):
        """This process's doorbell to `host`'s NIC, if it has opened one; else None."""
        return cls._by_host.get(host)

    @classmethod
    def for_host(cls, host=None):
        host = host or this_host()
        nic = cls._by_host.get(host)
        if nic is None or nic.lost:
            nic = cls._by_host[host] = cls(host)
        return nic

    def __init__(self, host):
        waiting.answers_come_through_nic_processes(2)   # ours, and the peer host's: they need CPUs too
        self.host, self.lost, self.pid = host, False, None
        self.queues = {}   # qp_num -> WireSendQueue of this process
        self.next_check = 0.0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(b"")   # an abstract name of the kernel's choosing: nothing to clean up
        if not self._hello():
            self._start()
            deadline = time.monotonic() + START_TIMEOUT_S
            while not self._hello():
                if time.monotonic() > deadline:
                    raise PyverbsRDMAError(f"soft0's NIC for host {host} does not answer its doorbell: "
                                           f"see its error above, or run `python -m rdmalab.verbs.soft.link.nic "
                                           f"--host {host}` to see why it does not start", EIO)
                time.sleep(0.05)
        self.sock.setblocking(False)
        atexit.register(self.close)

    def _hello(self):
        """Connect to the NIC and say hello; True once it answered."""
        try:
            self.sock.connect(doorbell_name(self.host))
            self.sock.send(pickle.dumps(("hello",)))
        except OSError:
            return False
        ready, _, _ = select.select([self.sock], [], [], 2.0)
        if not ready:
            return False
        try:
            message = pickle.loads(self.sock.recv(1 << 16))
        except OSError:
            return False
        if message[0] != "hello":
            return False
        self.pid = message[2]
        return True

    def _start(self):
        """Start the host's NIC process, and wait until it says it is ready (or why it cannot be)."""
        proc = subprocess.Popen([sys.executable, "-m", "rdmalab.verbs.soft.link.nic", "--host", self.host],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline().decode().strip() if ready else "error: it did not say it was ready"
        proc.stdout.close()
        threading.Thread(target=proc.wait, daemon=True).start()   # reaped when it ends, as a child is
        if line != "ready":
            raise PyverbsRDMAError(f"soft0's NIC for host {self.host} did not start: {line.removeprefix('error: ')}",
                                   EIO)

    # ------------------------------------------------------------ ringing and listening

    def ring(self, message):
        """Hand a message to the NIC, waiting while its doorbell queue is full; False if the NIC is gone."""
        data = pickle.dumps(message)
        while not self.lost:
            try:
                self.sock.send(data)
                return True
            except BlockingIOError:
                self.drain()   # (the NIC may be waiting for us to take its completions)
                select.select([], [self.sock], [], 0.05)
                self.check_alive(force=True)
            except OSError:
                self.nic_died()
        return False

    def drain(self):
        """Take what the NIC sent: completions, for each QP's CQ."""
        sock, queues = self.sock, self.queues
        while True:
            try:
                data = sock.recv(1 << 17)
            except BlockingIOError:
                return
            except OSError:
                self.nic_died()
                return
            message = pickle.loads(data)
            if message[0] == "wc":
                for qpn, retired, completion in message[1]:
                    sq = queues.get(qpn)
                    if sq is not None:
                        sq.delivered(retired, completion)
            elif message[0] in ("counters", "describe"):
                self.counters_answer = message[1]

    def check_alive(self, force=False):
        now = time.monotonic()
        if (force or now >= self.next_check) and not self.lost:
            self.next_check = now + LIVENESS_CHECK_S
            if not pid_alive(self.pid):
                self.nic_died()

    def nic_died(self):
        """The NIC process is gone: every QP on it fails what it had outstanding, and enters ERR."""
        if self.lost:
            return
        self.lost = True
        for sq in list(self.queues.values()):
            sq.nic_lost()

    def counters(self, timeout=2.0, what="counters"):
        """The NIC's port counters (a dict), as it counts them now (what="describe": its QPs' state)."""
        self.counters_answer = None
        self.sock.setblocking(True)
        try:
            self.ring((what,))
        finally:
            self.sock.setblocking(False)
        deadline = time.monotonic() + timeout
        while self.counters_answer is None and time.monotonic() < deadline and not self.lost:
            select.select([self.sock], [], [], 0.05)
            self.drain()
        return self.counters_answer

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class WireSendQueue(requester.Queue):
    """An RC (or UC) QP's send queue on the udp link: what requester.SendQueue is on the shared-memory link,
    with the NIC process doing the sending, the retries and the timers."""

    def __init__(self, header, qp_num, pd, cq, sig_all):
        self.header, self.qp_num, self.pd, self.cq, self.sig_all = header, qp_num, pd, cq, sig_all
        self.outstanding = deque()   # (seq, wr_id, local WR or None) handed to the NIC and not yet retired
        self.held = []               # WRs posted before RTS: rxe keeps them in its ring
        self.seq = 0
        self.reset()
        self.nic = NIC.for_host()
        self.nic.queues[qp_num] = self

    def reset(self):
        """RESET: the queue is emptied, without completions (the NIC forgets its WRs too: modified())."""
        self.dest_qp_num = self.psn = self.timeout = self.retry_cnt = self.rnr_retry = 0
        self.dgid, self.mtu = None, 1024
        self.held.clear()
        self.outstanding.clear()

    # ------------------------------------------------------------ what the QP and its CQ call (requester.Queue)

    @property
    def qp_type(self):
        return self.header[Q_TYPE]

    def slots_held(self):
        self.progress()
        return len(self.outstanding) + len(self.held)

    def waiting(self, before_rts):
        return ([(wr_id, "", "with the NIC process") for _, wr_id, _ in list(self.outstanding)]
                + [(wr.wr_id, WR_OPCODE_NAMES.get(wr.opcode, "?"), "posted before RTS") for wr in list(self.held)])

    def peer(self):
        """The target QP where this process reaches it (a QP of this machine), else None."""
        found = responder.peer_qp(self.dest_qp_num) if self.dest_qp_num else None
        return found if found is not None and found.alive() else None

    def modified(self, state, max_rd_atomic=1):
        """modify() moved the QP: tell the NIC where it now sends, from which PSN, and how many READs and
        atomics it may have unanswered."""
        dest = address_of(self.dgid) if self.dgid else None
        if self.dgid and self.dgid.startswith("fe80"):
            dest = this_host()   # the link-local GID reaches this host only
        self.nic.ring(("modify", self.qp_num, dict(
            state=state, dest_qpn=self.dest_qp_num, dest_ip=dest, mtu=self.mtu, psn=self.psn, timeout=self.timeout,
            retry_cnt=self.retry_cnt, rnr_retry=self.rnr_retry, sig_all=self.sig_all, send_cq=self.cq._number,
            max_rd_atomic=max_rd_atomic, unreliable=self.header[Q_TYPE] == IBV_QPT_UC)))
        if state == IBV_QPS_ERR:
            self.flush_held()

    def post(self, wr):
        for held in self.held:
            self._hand_over(held)
        self.held.clear()
        self._hand_over(wr)

    def hold(self, wr):
        self.held.append(requester.snapshot(wr))

    def progress(self):
        """Take the NIC's news; in RTS, hand over the WRs held before it (rxe runs its ring at the next
        doorbell), in ERR flush them."""
        self.nic.drain()
        if self.outstanding:
            self.nic.check_alive()
        if self.held:
            state = self.header[Q_STATE]
            if state == IBV_QPS_ERR:
                self.flush_held()
            elif state == IBV_QPS_RTS:
                held, self.held = self.held, []
                for wr in held:
                    self._hand_over(wr)

    def next_retry(self):
        return None   # the NIC keeps the timers

    def close(self):
        self.nic.ring(("destroy", self.qp_num))
        self.nic.queues.pop(self.qp_num, None)

    # ------------------------------------------------------------ to and from the NIC

    def _hand_over(self, wr):
        if wr.opcode in LOCAL_OPERATIONS:   # binding and invalidating windows: done here, in order
            if not self.outstanding:
                return requester.local_operation(self, wr)
            self.seq += 1   # after the WRs before it are done, as rxe's requester reaches it in its ring
            self.outstanding.append((self.seq, wr.wr_id, requester.snapshot(wr)))
            return None
        status = requester.local_check(self, wr)
        inline = requester.inline_payload(wr) if wr.send_flags & IBV_SEND_INLINE and not status else None
        # the PSNs the NIC will give it: query() reports the next one, as rxe does (a WRITE or SEND whose local
        # SGEs fail further on: the packets sent before the bad one, requester.sent_before_error)
        sent = requester.sent_before_error(self, wr) if status and not checks.carried_out(self.qp_type, wr.opcode) \
            else 0
        if not status:
            length = len(inline) if inline is not None else sum(sge[1] for sge in wr._sges)
            sent = requester.psns(wr.opcode, length, self.mtu)
        self.psn = psn_add(self.psn, sent)
        if self.nic.lost:
            return self.nic_lost([(wr.wr_id, status)])
        self.seq += 1
        self.outstanding.append((self.seq, wr.wr_id, None))
        self.cq.wait_for_timer(self)   # poll() then calls progress(), which takes the NIC's completions
        self.nic.ring(("post", self.qp_num, self.seq, wr.wr_id, wr.opcode, wr.send_flags, list(wr._sges),
                       wr._remote_addr, wr._rkey, wr.imm_data, wr._compare_add, wr._swap, inline, status,
                       sent if status else 0))

    def delivered(self, retired, completion):
        """The NIC's news: WRs up to number `retired` are done, and this completion (if any) came of one.
        (The NIC has woken the CQ, and raised its event if it was armed, when it sent this.)"""
        outstanding = self.outstanding
        while outstanding and outstanding[0][0] <= retired:
            _, _, local = outstanding.popleft()
            if local is not None:   # a window bind or invalidation between WRs the NIC retired together
                requester.local_operation(self, local)
        if completion is not None:
            wr_id, status, opcode, byte_len, flags = completion
            self.cq.push(wr_id, status, opcode, byte_len, self.qp_num, 0, flags)
        while outstanding and outstanding[0][2] is not None:   # the WRs before it are done: its turn
            requester.local_operation(self, outstanding.popleft()[2])

    def nic_lost(self, more=()):
        """The NIC died: what it held fails (FATAL_ERR first, then WR_FLUSH_ERR), and the QP is in ERR,
        which flushes its posted receives: its receive CQ is told (its event raised, if armed)."""
        if self.header is not None and self.header[Q_STATE] != IBV_QPS_ERR:
            enter(self.header, IBV_QPS_ERR)
            if self.header[Q_RQ_POSTED] != self.header[Q_RQ_POLLED]:
                cqmod.announce(self.header[Q_RECV_CQ])
        status = IBV_WC_FATAL_ERR
        for _, wr_id, *_ in list(self.outstanding) + list(more):
            self.cq.push(wr_id, status, 0, 0, self.qp_num)
            status = IBV_WC_WR_FLUSH_ERR
        self.outstanding.clear()
        self.flush_held()

    def flush_held(self):
        for wr in self.held:
            self.cq.push(wr.wr_id, IBV_WC_WR_FLUSH_ERR, 0, 0, self.qp_num)
        self.held.clear()


class WireDatagramQueue(DatagramQueue):
    """A UD QP's send queue on the udp link. A datagram to an IPv4-mapped GID goes to the host's NIC
    process, which sends it as one packet (BTH, DETH, ImmDt if any, the payload); the NIC lands the
    datagrams that come for this QP (datagram.land). As on the shared-memory link, the send completes
    at once: nothing answers a datagram. Multicast and the link-local GID stay on this host, through
    shared memory."""

    def __init__(self, header, qp_num, pd, cq, sig_all):
        super().__init__(header, qp_num, pd, cq, sig_all)
        self.nic = NIC.for_host()
        self.nic.ring(("datagram_qp", qp_num))   # its datagrams reach it from now on

    def deliver(self, wqe, payload):
        dest = address_of(wqe._ah._dgid)
        if dest is None or wqe._remote_qpn == MULTICAST_QPN:
            return super().deliver(wqe, payload)
        with_imm = wqe.opcode in WITH_IMM
        self.nic.ring(("datagram", self.qp_num, dest, wqe._remote_qpn, wqe._remote_qkey, self.psn,
                       wqe.imm_data if with_imm else None, bool(wqe.send_flags & IBV_SEND_SOLICITED), bytes(payload)))

    def close(self):
        self.nic.ring(("destroy", self.qp_num))


def nic_counters(host=None):
    """The port counters of this user's NIC for `host` (default: this process's host), as a dict; None
    when no NIC runs there."""
    host = host or this_host()
    nic = NIC.running_on(host)
    if nic is not None and not nic.lost:
        return nic.counters()
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.bind(b"")
        probe.connect(doorbell_name(host))
        probe.send(pickle.dumps(("counters",)))
        ready, _, _ = select.select([probe], [], [], 2.0)
        return pickle.loads(probe.recv(1 << 17))[1] if ready else None
    except OSError:
        return None
    finally:
        probe.close()

