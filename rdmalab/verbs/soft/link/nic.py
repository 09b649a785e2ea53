"""soft0's NIC as a process of its own, on the udp link: one per host address and user.

    python -m rdmalab.verbs.soft.link.nic --host 127.0.0.2

A NIC is hardware of its own, so on the udp link soft0's NIC is a process of its own. The first
program of a user that needs it on a host starts it (doorbell.py); it ends when its last program
has exited or died. It owns:
- the host's RoCEv2 port: a UDP socket bound to HOST:4791, and to nothing else;
- its doorbell: a Unix datagram socket in the abstract namespace, `@rdmalab-nic-<uid>-<host>`
  (abstract: no file to leave behind; the name is also the lock that makes the NIC one of a kind;
  the kernel tells it who rings, and it serves only its own user's processes).
Programs ring the doorbell with their work requests (after checking them locally, as libibverbs
and the driver do); the NIC carries them out as RoCEv2 packets (transport.py), reading and writing
the programs' registered memory through its shared-memory segments as a NIC reads and writes host
memory by DMA, pushing receive completions into the receive queues in shared memory, and sending
send completions back to the program over the doorbell.

Faults (RDMALAB_SOFT_LOSS, _DUP, _REORDER, _SEED) apply to the packets it sends. With
RDMALAB_SOFT_CAPTURE=FILE.pcap it writes every packet it sends and receives to FILE.<host>.pcap.
"""
import argparse
import dataclasses
import errno
import os
import pickle
import random
import select
import socket
import struct
import sys
import time
import traceback

from .. import checks, cq as cqmod, datagram, mr, responder as verbs_responder
from ..constants import IBV_QPS_ERR, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_WC_WR_FLUSH_ERR
from ..layout import Q_PD, Q_STATE
from rdmalab.wire import DETH, BadICRC, Flow, ImmDt, Packet, PcapWriter, WireError, encap
from rdmalab.wire.icrc import ICRC_SIZE, icrc_bytes, icrc_of_trailer, ip_id_delta
from rdmalab.wire.packet import sender_ip_id
from rdmalab.wire.opcodes import Op
from . import gid_of, transport
from rdmalab import settings
from rdmalab.proc.cpus import usable_cpus
from rdmalab.proc.procstat import pid_alive

PORT = encap.ROCEV2_PORT
BUFFER_BYTES = 4 << 20
CLIENT_CHECK_S = 0.25   # how often it looks for programs that died
ALONE_S = 5.0           # a NIC nobody used this long after it started ends
KEEP_POLLING_S = 500e-6  # after any work, how long it keeps looking for more before it sleeps
UCRED = struct.Struct("3i")   # what SCM_CREDENTIALS says about the sender: pid, uid, gid
# Linux's UDP segmentation offload: a train of datagrams of one length (the last may be shorter) goes in
# one system call and the kernel cuts it up (UDP_SEGMENT, "GSO"); on the way in, datagrams of one flow
# come up together, with their length (UDP_GRO). The packets on the wire are the same.
UDP_SEGMENT, UDP_GRO = 103, 104
TRAIN_BYTES, TRAIN_DATAGRAMS = 65000, 64
SEGMENT_SIZE = struct.Struct("H")
GRO_SIZE = struct.Struct("i")
RESPONSES = {Op.RC_ACKNOWLEDGE, Op.RC_ATOMIC_ACKNOWLEDGE, Op.RC_RDMA_READ_RESPONSE_FIRST,
             Op.RC_RDMA_READ_RESPONSE_MIDDLE, Op.RC_RDMA_READ_RESPONSE_LAST, Op.RC_RDMA_READ_RESPONSE_ONLY}
# Port counters, named as Linux's rxe names its hw_counters where it has one
COUNTERS = ("sent_pkts", "rcvd_pkts", "sent_bytes", "rcvd_bytes", "retransmitted_pkts", "ack_timeouts", "completer_retry_err",
            "duplicate_request", "out_of_seq_request", "rcvd_seq_err", "rcvd_rnr_err", "send_rnr_err", "nak_sent", "retry_exceeded_err",
            "retry_rnr_exceeded_err", "dropped_malformed", "dropped_bad_icrc", "dropped_unknown_qp",
            "dropped_wrong_peer", "dropped_out_of_window", "dropped_qp_not_ready", "dropped_duplicate_unanswerable",
            "dropped_datagram", "send_err", "fault_lost", "fault_duplicated", "fault_reordered", "internal_error")


def doorbell_name(host, uid=None):
    """The NIC's doorbell address (abstract Unix socket) for a host and user."""
    return f"\0rdmalab-nic-{os.geteuid() if uid is None else uid}-{host}".encode()


def capture_path(base, host):
    """Where the NIC of `host` writes its capture when RDMALAB_SOFT_CAPTURE=base."""
    root, ext = os.path.splitext(base)
    return f"{root}.{host}{ext or '.pcap'}"


class Faults:
    """Loss, duplication and reordering of the packets a NIC sends, at seeded random rates."""

    def __init__(self, environ):
        self.loss = _rate(environ, "RDMALAB_SOFT_LOSS")
        self.dup = _rate(environ, "RDMALAB_SOFT_DUP")
        self.reorder = _rate(environ, "RDMALAB_SOFT_REORDER")
        self.rng = random.Random(settings.soft_seed(environ))
        self.held = None   # a packet kept back, to go out after the next one

    def any(self):
        return self.loss or self.dup or self.reorder

    def apply(self, datagram, nic):
        """The datagrams to put on the wire now, in order, for one the NIC sends (each as it is given:
        here, a (bytes, destination) pair)."""
        rng = self.rng
        if self.loss and rng.random() < self.loss:
            nic.count("fault_lost")
            return self.release()
        out = [datagram]
        if self.dup and rng.random() < self.dup:
            nic.count("fault_duplicated")
            out.append(datagram)
        if self.reorder and self.held is None and rng.random() < self.reorder:
            nic.count("fault_reordered")
            self.held = out
            return []
        return out + self.release()

    def release(self):
        held, self.held = self.held or [], None
        return held


def _rate(environ, name):
    return settings.number(name, 0.0, 0, 1, "a rate between 0 and 1 (e.g. 0.01 for 1%)", environ)


class Connection:
    """One RC (or UC) QP of this host, as its NIC knows it: where it sends, and both halves of its
    transport. A UC QP's (unreliable) is RC's without the answers: no ACKs, NAKs or retries."""

    def __init__(self, nic, qpn, owner, client):
        self.nic, self.qpn, self.owner, self.client = nic, qpn, owner, client
        self.dest_qpn, self.dest_ip, self.mtu, self.sig_all, self.send_cq = 0, None, 1024, 0, 0
        self.known_state = IBV_QPS_RESET
        self.flow = None
        self.unreliable = False
        self.retired, self.reported = 0, 0   # the last WR done, and the last the program was told of
        self.requester, self.responder = transport.Requester(self), transport.Responder(self)

    def modify(self, info):
        state, previous = info["state"], self.known_state
        self.sig_all, self.send_cq, self.unreliable = info["sig_all"], info["send_cq"], info.get("unreliable", False)
        if state == IBV_QPS_RESET:
            self.requester, self.responder = transport.Requester(self), transport.Responder(self)
        elif state == IBV_QPS_RTR and previous != IBV_QPS_RTR:
            self.dest_qpn, self.dest_ip, self.mtu = info["dest_qpn"], info["dest_ip"], info["mtu"]
            self.flow = Flow(self.nic.host, self.dest_ip, PORT) if self.dest_ip else None
            self.responder.reset()
        elif state == IBV_QPS_RTS and previous == IBV_QPS_RTR:
            self.requester.configure(info["psn"], info["timeout"], info["retry_cnt"], info["rnr_retry"],
                                     info["max_rd_atomic"])
        elif state == IBV_QPS_ERR:
            self.requester.fail_all(IBV_WC_WR_FLUSH_ERR)
        self.requester.draining = state == IBV_QPS_SQD   # it sends nothing, not even a resend; answers still land
        self.known_state = state

    def describe(self):
        r, p = self.requester, self.responder.partial
        return dict(dest=(self.dest_ip, self.dest_qpn), mtu=self.mtu, next_psn=r.psn, resend_from=r.next, acked=r.acked,
                    error=r.error, retries_left=r.retries_left, deadline=r.deadline,
                    wqes=[(w.seq, w.opcode, w.first, w.count, w.got, w.done, w.status) for w in r.wqes],
                    receiving=(p.first, p.count) if p else None, msn=self.responder.msn)

    def peer(self):
        """The QP's shared segment, as soft0's responder reaches it (None once it is gone)."""
        return verbs_responder.peer_qp(self.qpn)

    def state(self):
        peer = self.peer()
        return peer.header[Q_STATE] if peer is not None else IBV_QPS_ERR

    def enter_error(self):
        peer = self.peer()
        if peer is not None and peer.header[Q_STATE] != IBV_QPS_ERR:
            verbs_responder.enter(peer.header, IBV_QPS_ERR)

    def local_memory(self, addr, length, lkey, need):
        """The program's registered memory an SGE names (a writable view), if checks.memory allows it: the key
        valid in the QP's PD, granting `need`, holding [addr, addr+length); else None."""
        seg, peer = mr.find(lkey), self.peer()
        if peer is None:
            return None
        offset, refused = checks.memory(seg, addr, length, peer.header[Q_PD], need)
        return None if refused is not None else seg.bytes[offset:offset + length]

    def completion(self, wr_id, status, opcode, byte_len, flags):
        """A send completion for the program: queued in the order completions happen, across its QPs."""
        self.nic.outbox.setdefault(self.client, []).append((self.qpn, self.retired, (wr_id, status, opcode, byte_len,
                                                                                    flags), self.send_cq))
        self.reported = self.retired


class NIC:
    def __init__(self, host, doorbell, environ=os.environ):
        self.host, self.uid = host, os.geteuid()
        self.faults = Faults(environ)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.conns, self.clients = {}, {}   # qpn -> Connection; pid -> doorbell address
        self.datagram_qps = {}              # qpn -> pid: this host's UD QPs, and whose they are
        self.datagram_flows = {}            # destination address -> Flow of the datagrams sent there
        self.flows = {}                     # (source address, port) -> Flow of packets from there
        self.outbox = {}                    # program's address -> [(qpn, retired, completion, send CQ)] to send
        self.started = time.monotonic()
        self.had_clients = False
        # After any work it keeps polling its sockets for a while before it sleeps, as a NIC's driver
        # polls while traffic flows (Linux's NAPI): a sleeping process takes tens of microseconds to wake.
        # Only with two CPUs or more: on one, it would only keep the programs waiting for the CPU.
        self.keep_polling_s = KEEP_POLLING_S if usable_cpus() >= 2 else 0.0
        self.busy_until = 0.0
        self.doorbell = doorbell
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        encap.dont_fragment(self.udp)   # unconnected, DF: Linux sends IPv4 ID 0, which the ICRC covers
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.udp.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)
        self.udp.bind((host, PORT))
        # a train of packets in one sendmsg (UDP segmentation offload), until the kernel says it has none; off
        # (RDMALAB_SOFT_GSO=0) every packet is a datagram of its own, as a sniffer on the loopback should see them
        self.gso = settings.number("RDMALAB_SOFT_GSO", 1, 0, 1, "0 or 1") == 1
        try:
            self.udp.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
            self.gro = True
        except OSError:
            self.gro = False
        self.outgoing = []   # (datagram, destination address) put on the wire in this pass of the loop
        self.doorbell.setblocking(False)
        self.udp.setblocking(False)
        capture = settings.soft_capture(environ)
        self.pcap = PcapWriter(capture_path(capture, host)) if capture else None

    def count(self, name, n=1):
        self.counters[name] += n

    # ------------------------------------------------------------ the loop

    def serve(self):
        next_check = time.monotonic() + CLIENT_CHECK_S
        while True:
            now = time.monotonic()
            deadlines = [next_check] + [t for t in (c.requester.next_deadline() for c in self.conns.values()) if t]
            if self.faults.held:
                deadlines.append(now + 0.001)
            wait = max(0.0, min(deadlines) - now)
            if now < self.busy_until:
                wait = 0.0   # traffic flows: look again at once rather than sleep
            ready, _, _ = select.select([self.doorbell, self.udp], [], [], wait)
            if ready:
                self.busy_until = time.monotonic() + self.keep_polling_s
            if self.doorbell in ready:
                self.take_doorbells()
            if self.udp in ready:
                self.take_packets()
            now = time.monotonic()
            for conn in list(self.conns.values()):
                self.guarded(self.work, conn, now)
            if self.faults.held and not ready:
                self.put_on_wire(self.faults.release())
            self.flush()
            self.guarded(self.report)
            if now >= next_check:
                next_check = now + CLIENT_CHECK_S
                if not self.check_clients(now):
                    return

    def guarded(self, function, *args):
        """Run one step; a bug in it is counted and reported, and never ends the NIC."""
        try:
            return function(*args)
        except Exception:   # noqa: BLE001 (a NIC must not die of one bad packet or request)
            self.count("internal_error")
            traceback.print_exc(file=sys.stderr)
            return None

    def work(self, conn, now):
        requester = conn.requester
        if requester.wqes and not requester.error and conn.state() == IBV_QPS_ERR:
            requester.fail_all(IBV_WC_WR_FLUSH_ERR)   # the QP entered ERR (its responder NAKed, or the program)
        requester.timer(self, now)
        requester.pump(self, now)

    def check_clients(self, now):
        """Forget the programs that are gone, and their QPs. False when nobody is left."""
        gone = [pid for pid in self.clients if not pid_alive(pid)]
        for pid in gone:
            del self.clients[pid]
            for qpn in [q for q, c in self.conns.items() if c.owner == pid]:
                del self.conns[qpn]
            for qpn in [q for q, owner in self.datagram_qps.items() if owner == pid]:
                del self.datagram_qps[qpn]
        if gone:
            self.guarded(_forget_segments_of_the_dead)
        if self.clients:
            return True
        return not self.had_clients and now - self.started < ALONE_S

    # ------------------------------------------------------------ the doorbell

    def take_doorbells(self):
        for _ in range(256):
            try:
                data, ancillary, _, address = self.doorbell.recvmsg(1 << 16, socket.CMSG_SPACE(UCRED.size))
            except (BlockingIOError, InterruptedError):
                return
            pid = uid = None
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(value) >= UCRED.size:
                    pid, uid, _ = UCRED.unpack_from(value)
            if uid != self.uid or not address:
                continue   # only its own user's programs ring this NIC
            try:
                message = pickle.loads(data)
            except Exception:   # noqa: BLE001
                continue
            self.guarded(self.doorbell_message, message, pid, address)

    def doorbell_message(self, message, pid, address):
        kind = message[0]
        if kind == "hello":
            self.clients[pid] = address
            self.had_clients = True
            self.tell(address, ("hello", self.host, os.getpid()))
        elif kind == "counters":
            self.tell(address, ("counters", dict(self.counters)))
        elif kind == "describe":   # what the NIC holds for each QP, for a learner (and a test) to read
            self.tell(address, ("describe", {qpn: conn.describe() for qpn, conn in self.conns.items()}))
        elif kind == "modify":
            _, qpn, info = message
            conn = self.conns.get(qpn)
            if conn is None or conn.owner != pid:
                conn = self.conns[qpn] = Connection(self, qpn, pid, address)
            conn.modify(info)
        elif kind == "post":
            conn = self.conns.get(message[1])
            wqe = transport.WQE(*message[2:])
            if conn is None:   # a QP the NIC never heard of: flush it, so the program is not left waiting
                self.tell(address, ("wc", [(message[1], wqe.seq, (wqe.wr_id, IBV_WC_WR_FLUSH_ERR, 0, 0, 0))]))
                return
            conn.requester.post(wqe)
            conn.requester.pump(self, time.monotonic())   # at once: WRs go out in the order they were rung
        elif kind == "datagram_qp":
            self.datagram_qps[message[1]] = pid
        elif kind == "datagram":
            if self.datagram_qps.get(message[1]) == pid:
                self.send_datagram(*message[1:])
        elif kind == "destroy":
            conn = self.conns.get(message[1])
            if conn is not None and conn.owner == pid:
                del self.conns[message[1]]
            if self.datagram_qps.get(message[1]) == pid:
                del self.datagram_qps[message[1]]

    def tell(self, address, message):
        try:
            self.doorbell.sendto(pickle.dumps(message), address)
            return True
        except BlockingIOError:
            return False   # the program's queue is full: try again later
        except OSError:
            return True    # the program is gone

    def report(self):
        """Send each program its QPs' completions, in the order they happened, and which WRs are done
        (unsignaled ones included: their slots in the send queue are free again); wake the CQs."""
        for conn in self.conns.values():
            if conn.retired != conn.reported:   # WRs done without a completion to show for it
                self.outbox.setdefault(conn.client, []).append((conn.qpn, conn.retired, None, 0))
                conn.reported = conn.retired
        for client, items in list(self.outbox.items()):
            while items:
                batch = items[:400]
                if not self.tell(client, ("wc", [item[:3] for item in batch])):
                    break   # its queue is full: the rest goes next time round
                del items[:len(batch)]
                for cq in {item[3] for item in batch if item[2] is not None}:
                    seg = cqmod.find_segment("cq", cq)
                    if seg is not None:
                        cqmod.announce_to(seg)
            if not items:
                del self.outbox[client]

    # ------------------------------------------------------------ the wire

    def send(self, pkt, conn, retransmit=False):
        """Put one packet of `conn` on the wire (through the faults, if any)."""
        if conn.flow is None:
            return   # a destination GID that names no IPv4 host: the packet goes nowhere
        if retransmit:
            self.count("retransmitted_pkts")
        self.emit(pkt.encode(conn.flow), conn.flow)

    def send_datagram(self, qpn, dest, dest_qpn, q_key, psn, imm, solicited, payload):
        """A UD QP's datagram: one packet, UD SEND ONLY (with immediate), its DETH naming the Q_Key the
        destination QP must hold and the sender's QP. Nothing answers it."""
        flow = self.datagram_flows.get(dest)
        if flow is None:
            flow = self.datagram_flows[dest] = Flow(self.host, dest, PORT)
        opcode = Op.UD_SEND_ONLY if imm is None else Op.UD_SEND_ONLY_WITH_IMMEDIATE
        pkt = Packet(opcode, dest_qpn, psn, payload, deth=DETH(q_key, qpn),
                     immdt=None if imm is None else ImmDt.of_imm_data(imm), se=solicited)
        self.emit(pkt.encode(flow), flow)

    def emit(self, datagram, flow):
        self.count("sent_pkts")
        self.count("sent_bytes", len(datagram))
        out = (datagram, flow.dst)
        if self.pcap is not None:
            self.pcap.write(encap.ipv4_udp(flow, datagram))
        self.put_on_wire(self.faults.apply(out, self) if self.faults.any() else [out])

    def put_on_wire(self, datagrams):
        """Queue (datagram, destination address) pairs to go from the host's port 4791 (flush() sends them)."""
        self.outgoing.extend(datagrams)

    def flush(self):
        """Send what this pass of the loop put on the wire, in order. A run of datagrams to one host, of
        one length (the last may be shorter: a message's last packet), goes as one train: one system
        call instead of one per packet, as a NIC's segmentation offload saves its host's CPU."""
        out, self.outgoing = self.outgoing, []
        start = 0
        while start < len(out):
            end = self.train_end(out, start) if self.gso else start + 1
            self.send_train(out[start:end])
            start = end

    @staticmethod
    def train_end(out, start):
        first, dest = out[start]
        size, total, end = len(first), len(first), start + 1
        while end < len(out) and end - start < TRAIN_DATAGRAMS:
            datagram, to = out[end]
            if to != dest or len(datagram) > size or total + len(datagram) > TRAIN_BYTES:
                break
            total += len(datagram)
            end += 1
            if len(datagram) < size:
                break
        return end

    def send_train(self, train):
        address = (train[0][1], PORT)
        try:
            if len(train) == 1:
                self.udp.sendto(train[0][0], address)
            else:
                parts = [train[0][0]]   # (packet k ends with its ICRC for Identification k: no copy made)
                for k in range(1, len(train)):
                    datagram = train[k][0]
                    parts += (memoryview(datagram)[:-ICRC_SIZE], icrc_for_identification(datagram, k))
                self.udp.sendmsg(parts,
                                 [(socket.IPPROTO_UDP, UDP_SEGMENT, SEGMENT_SIZE.pack(len(train[0][0])))], 0, address)
        except OSError as error:
            if len(train) > 1 and error.errno in (errno.EINVAL, errno.ENOPROTOOPT, errno.EOPNOTSUPP, errno.EIO):
                self.gso = False   # a kernel without UDP segmentation offload: one datagram at a time
                for one in train:
                    self.send_train([one])
            else:   # a full socket buffer (the packets are lost, as on a congested link), or ICMP news
                self.count("send_err", len(train))

    def take_packets(self):
        for _ in range(512):
            try:
                data, ancillary, _, (src, sport) = self.udp.recvmsg(1 << 16, socket.CMSG_SPACE(GRO_SIZE.size))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:   # an ICMP error from an earlier send (port unreachable): nothing to read
                continue
            size = next((GRO_SIZE.unpack(value[:GRO_SIZE.size])[0] for level, kind, value in ancillary
                         if level == socket.IPPROTO_UDP and kind == UDP_GRO and len(value) >= GRO_SIZE.size), 0)
            if 0 < size < len(data):   # several datagrams of one flow, together: `size` bytes each, the last shorter
                for k, at in enumerate(range(0, len(data), size)):   # (a soft0 train's packet k has IPv4 ID k)
                    self.guarded(self.receive, data[at:at + size], src, sport, k)
            else:
                self.guarded(self.receive, data, src, sport)
            if self.outgoing:
                self.flush()   # the ACKs at once: the sender's window moves on while we take the rest

    def receive(self, data, src, sport, ip_id=0):
        """One packet from src:sport; `ip_id`: the IPv4 Identification it most likely had (a UDP socket
        does not show it, but the ICRC covers it: see numbered())."""
        self.count("rcvd_pkts")
        self.count("rcvd_bytes", len(data))
        flow = self.flows.get((src, sport, ip_id))
        if flow is None:
            flow = self.flows[src, sport, ip_id] = Flow(src, self.host, sport, ip_id=ip_id)
            if len(self.flows) > 4096:
                self.flows.clear()
        if self.pcap is not None and src != self.host:   # (from itself: captured already, as sent)
            try:
                self.pcap.write(encap.ipv4_udp(flow, data))
            except WireError:
                pass
        try:
            try:
                pkt = Packet.decode(data, flow)
            except BadICRC:   # right, perhaps, for the IPv4 Identification its sender's kernel gave it (rxe's do)
                ip_id = sender_ip_id(data, flow)
                if ip_id is None:
                    return self.count("dropped_bad_icrc")
                pkt = Packet.decode(data)
        except WireError:
            return self.count("dropped_malformed")
        if pkt.deth is not None:
            return self.datagram_arrived(pkt, dataclasses.replace(flow, ip_id=ip_id), len(data))
        conn = self.conns.get(pkt.destqp)
        if conn is None:
            return self.count("dropped_unknown_qp")
        if src != conn.dest_ip:   # (any source port: rxe picks one per QP)
            return self.count("dropped_wrong_peer")
        if pkt.opcode in transport.REQUESTS:
            conn.responder.request(pkt, self)
        elif pkt.opcode in RESPONSES:
            conn.requester.answer(pkt, self, time.monotonic())
        else:
            self.count("dropped_malformed")   # an opcode this NIC does not carry (XRC, CNP, ...)

    def datagram_arrived(self, pkt, flow, udp_payload_length):
        """A UD SEND for one of this host's UD QPs: its receive gets the GRH (the packet's IPv4 header;
        from this host, the one rxe writes for its own address) and the payload, unless the QP does not
        take it (datagram.land: not ready, another Q_Key, no receive posted), when it is dropped unseen."""
        if pkt.opcode not in (Op.UD_SEND_ONLY, Op.UD_SEND_ONLY_WITH_IMMEDIATE) or pkt.destqp not in self.datagram_qps:
            return self.count("dropped_unknown_qp")
        with_imm = pkt.immdt is not None
        if flow.src == self.host:
            grh = datagram.grh(gid_of(flow.src), gid_of(self.host), 0, len(pkt.payload), with_imm)
        else:
            grh = bytes(20) + encap.ipv4_header(flow, 8 + udp_payload_length)
        if not datagram.land(verbs_responder.peer_qp(pkt.destqp), pkt.deth.srcqp, pkt.deth.q_key, grh + pkt.payload,
                             pkt.immdt.imm_data if with_imm else None, pkt.se):
            self.count("dropped_datagram")

    def close(self):
        if self.pcap is not None:
            self.pcap.close()
        self.doorbell.close()
        self.udp.close()


def icrc_for_identification(datagram, k):
    """The ICRC of a packet (encoded for IPv4 Identification 0) if its Identification is k. The kernel
    sends a train (UDP segmentation) from one header whose Identification is 0 (unconnected,
    don't-fragment) and numbers its packets 0, 1, 2...; the ICRC covers the Identification, so a
    receiver that reads it (rxe, any RoCE NIC) drops a packet whose ICRC was computed for 0. Packets
    are encoded for 0 (a packet sent alone keeps it), and packet k of a train ends with this one."""
    return icrc_bytes(icrc_of_trailer(datagram) ^ ip_id_delta(len(datagram), k))


def _forget_segments_of_the_dead():
    """Let go of segments whose owner died (the next soft0 process to start removes their files)."""
    verbs_responder.forget_the_dead()
    cqmod.forget_the_dead()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="this host's IPv4 address, e.g. 127.0.0.2")
    args = parser.parse_args(argv)
    doorbell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    doorbell.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    try:
        doorbell.bind(doorbell_name(args.host))
    except OSError:   # the name is taken: this user's NIC for this host runs already (two programs started one)
        print("ready", flush=True)
        return 0
    try:
        nic = NIC(args.host, doorbell)
    except OSError as error:
        print(f"error: {_explain(error, args.host)}", flush=True)
        return 1
    except SystemExit as error:
        print(error, flush=True)
        return 1
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)   # the program that started it reads no more
    try:
        nic.serve()
    finally:
        nic.close()
    return 0


def _explain(error, host):
    if error.errno == errno.EADDRINUSE:
        return (f"UDP port {PORT} on {host} is taken (another user's soft0 NIC, or a Soft-RoCE device): "
                f"choose another host address with RDMALAB_SOFT_HOST (any 127.0.0.x)")
    if error.errno == errno.EADDRNOTAVAIL:
        return (f"{host} is not an address of this host (or network namespace): RDMALAB_SOFT_HOST takes an "
                f"address the machine has, such as 127.0.0.2")
    return f"{error} (host {host})"


if __name__ == "__main__":
    sys.exit(main())
