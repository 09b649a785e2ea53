"""One user's process for tests/soft/test_two_users.py: soft0 through the pyverbs API, on command.

The test runs it as a real Unix user (setpriv) and drives it with one JSON object a line on stdin;
it answers each with one JSON line on stdout ({"error": traceback} if the command raised).

  open                   Context, PD, an MR (local write, remote write/read/atomic) filled with a pattern,
                         a source MR, a CQ and a QP; answers what a peer (or an attacker) would learn:
                         endpoint (qp_num, psn, gid, rkey, addr), pid, uid, the segments' directory and names
  connect remote         bring the QP to RTS towards `remote`, as the lessons do (rdmalab.verbs.rc), and
                         post 4 receives
  write remote seed      RDMA WRITE a seeded payload into `remote`'s MR; its status and the payload's digest
  state                  what nobody else may change: MR digest, QP state and expected PSN (query()),
                         completions waiting on the CQ, this process's segments
  attack victim unlink   everything a process can try with another process's keys, address, QP number
                         and expected PSN; `unlink` also tries to delete its segment files
  forge                  plant a QP and an MR segment of its own, world-readable and writable, that look
                         valid (RTS, alive, remote access, one PD): what a process of another user could try
                         to make another user's soft0 trust; answers an endpoint that leads to them
  forged                 the digest of the forged MR's data now
  reach remote op        a QP connected to `remote` (with the PSN it expects), then one RDMA `op` to its MR
  plant_junk             files named like segments in the segments' directory, readable by all: a FIFO, a
                         5-byte file and a symlink to the FIFO
  start                  open soft0 (which reaps this user's orphans) and nothing else
  reap                   shm.reap_orphans(), called explicitly
  unlink paths           try to delete these files
  exit                   close everything and exit
"""
import hashlib
import json
import mmap
import os
import random
import sys
import traceback

import numpy as np

from rdmalab import verbs as v
from rdmalab.errors import WC_STATUS_NAMES
from rdmalab.verbs import rc
from rdmalab.verbs.soft import shm

e = v.enums
SIZE = 1 << 16
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
OPS = {"WRITE": e.IBV_WR_RDMA_WRITE, "READ": e.IBV_WR_RDMA_READ, "FETCH_ADD": e.IBV_WR_ATOMIC_FETCH_AND_ADD,
       "SEND": e.IBV_WR_SEND}


def digest(data):
    return hashlib.sha256(data).hexdigest()


def outcome(action):
    """'ok', or the name of the exception `action()` raised."""
    try:
        action()
    except Exception as error:
        return type(error).__name__
    return "ok"


def map_file(path):
    fd = os.open(path, os.O_RDWR)
    try:
        mmap.mmap(fd, 4096).close()
    finally:
        os.close(fd)


class Peer:
    ctx = None
    planted = ()

    def open(self):
        self.ctx = v.device.Context(name="soft0")
        self.pd = v.pd.PD(self.ctx)
        self.mr = v.mr.MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | REMOTE)
        self.mr.write(np.random.default_rng(os.getpid()).bytes(SIZE), SIZE)
        self.src = v.mr.MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        self.cq = v.cq.CQ(self.ctx, 64)
        self.qp = self.new_qp(self.cq)
        self.me = rc.endpoint(self.ctx, self.qp, self.mr)
        self.attack_cq = v.cq.CQ(self.ctx, 64)
        return {**self.me, "pid": os.getpid(), "uid": os.geteuid(), "dir": shm.directory(),
                "mr_name": f"{shm.PREFIX}mr-{self.mr.lkey:08x}", "qp_name": f"{shm.PREFIX}qp-{self.qp.qp_num:06x}",
                "segments": sorted(shm.leftovers(os.getpid())), "digest": digest(self.mr.read(SIZE, 0))}

    def new_qp(self, cq):
        return v.qp.QP(self.pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))

    def connect(self, remote):
        rc.connect(self.ctx, self.qp, self.me, remote, access=REMOTE)
        for i in range(4):   # receives a SEND would consume
            self.qp.post_recv(v.wr.RecvWR(wr_id=i, num_sge=1, sg=[v.wr.SGE(self.src.buf + 64 * i, 64, self.src.lkey)]))
        return {}

    def write(self, remote, seed):
        payload = np.random.default_rng(seed).bytes(SIZE)
        self.src.write(payload, SIZE)
        return {"status": self.post(self.qp, self.cq, "WRITE", remote["rkey"], remote["addr"]), "digest": digest(payload)}

    def post(self, qp, cq, op, rkey, addr, wait=5.0):
        """Post one signaled WR; the name of its completion status, or None if none came within `wait`."""
        w = v.wr.SendWR(wr_id=7, opcode=OPS[op], num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                        sg=[v.wr.SGE(self.src.buf, {"FETCH_ADD": 8, "SEND": 64}.get(op, SIZE), self.src.lkey)])
        if op == "FETCH_ADD":
            w.set_wr_atomic(rkey, addr, 1)
        elif op != "SEND":
            w.set_wr_rdma(rkey, addr)
        qp.post_send(w)
        try:
            return WC_STATUS_NAMES.get(rc.wait_for_completion(cq, wait).status, "unknown")
        except TimeoutError:
            return None

    def state(self):
        attr, _ = self.qp.query(e.IBV_QP_STATE | e.IBV_QP_RQ_PSN)
        n, wcs = self.cq.poll(16)
        return {"digest": digest(self.mr.read(SIZE, 0)), "qp_state": attr.qp_state, "expected_psn": attr.rq_psn,
                "completions": [repr(wc) for wc in wcs], "segments": sorted(shm.leftovers(os.getpid()))}

    def attack(self, victim, unlink):
        """What this process can do to `victim` (the answer of its open, plus its expected_psn)."""
        mark = bytes([0xA5]) * SIZE   # what a WRITE from here would leave in the victim's memory
        self.src.write(mark, SIZE)
        out = {"mark digest": digest(mark)}
        for kind in ("mr", "qp"):
            name = victim[f"{kind}_name"]
            path = os.path.join(victim["dir"], name)
            out[f"read {kind}"] = outcome(lambda: open(path, "rb").close())
            out[f"open {kind}"] = outcome(lambda: os.close(os.open(path, os.O_RDWR)))
            out[f"map {kind}"] = outcome(lambda: map_file(path))
            seg = shm.Segment.attach(name[len(shm.PREFIX):])
            out[f"shm.attach {kind}"] = "ok" if seg is not None else "refused"
            if seg is not None:
                seg.close()
            if unlink:
                out[f"unlink {kind}"] = outcome(lambda: os.unlink(path))
        out["read /proc/<pid>/mem"] = outcome(lambda: open(f"/proc/{victim['pid']}/mem", "rb").close())

        rkey, addr = victim["rkey"], victim["addr"]
        # the victim's rkey and address through a connection of our own (loopback): the responder is ours
        for op in ("WRITE", "READ", "FETCH_ADD"):
            a, b = self.new_qp(self.attack_cq), self.new_qp(self.attack_cq)
            ea, eb = rc.endpoint(self.ctx, a), rc.endpoint(self.ctx, b)
            self.connect_fast(a, ea["psn"], eb)
            self.connect_fast(b, eb["psn"], ea)
            out[f"{op} with its rkey, own loopback"] = self.post(a, self.attack_cq, op, rkey, addr)
            a.close(), b.close()
        # a QP connected to the victim's QP number, sending the PSN it expects: the victim's QP is the responder
        for op in ("WRITE", "READ", "FETCH_ADD", "SEND"):
            qp = self.new_qp(self.attack_cq)
            self.connect_fast(qp, victim["expected_psn"], victim)
            out[f"{op} to its QP"] = self.post(qp, self.attack_cq, op, rkey, addr)
            qp.close()
        # connected as the lessons connect (rc.connect: retry_cnt 7 retries forever, as rxe does)
        qp = self.new_qp(self.attack_cq)
        rc.connect(self.ctx, qp, {"psn": victim["expected_psn"]}, victim, access=REMOTE)
        out["WRITE to its QP, rc.connect"] = self.post(qp, self.attack_cq, "WRITE", rkey, addr, wait=0.3)
        qp.close()
        return out

    def connect_fast(self, qp, sq_psn, remote):
        """rc.connect with a short ACK timeout (8: about 1 ms) and two retries, so that silence ends soon."""
        route = v.route_of(self.ctx, "soft0")
        a = v.qp.QPAttr(port_num=route.port, path_mtu=route.path_mtu)
        a.pkey_index, a.qp_access_flags = 0, REMOTE
        a.ah_attr = v.addr.AHAttr(port_num=route.port, is_global=1, gr=v.addr.GlobalRoute(
            dgid=v.addr.GID(remote["gid"]), sgid_index=route.gid_index, hop_limit=64))
        a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = remote["qp_num"], remote["psn"], 1, 1
        a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = sq_psn, 8, 2, 1, 1
        qp.to_rts(a)

    def forge(self):
        """Segments named and laid out as soft0's, created by hand, mode 0666."""
        from rdmalab.verbs.soft import layout as at
        from rdmalab.verbs.soft import mr as mrmod
        pd, psn, addr = 0x5EED, 0x1234, 0x7F0000000000
        while True:   # a QP number and a key nobody uses
            qp_num, key = random.randrange(17, 1 << 24), random.getrandbits(32) or 1
            try:
                q = self.plant(f"qp-{qp_num:06x}", 4096)
                m = self.plant(mrmod.segment_name(key), SIZE)
                break
            except FileExistsError:
                continue
        q[at.Q_STATE], q[at.Q_ACCESS], q[at.Q_PD], q[at.Q_EXPECTED_PSN] = e.IBV_QPS_RTS, REMOTE, pd, psn
        q[at.Q_RQ_SIZE], q[at.Q_RQ_MAX_SGE], q[at.Q_ALIVE] = 1, 1, 1
        m[at.M_ACCESS], m[at.M_LENGTH], m[at.M_ADDR], m[at.M_PD] = e.IBV_ACCESS_LOCAL_WRITE | REMOTE, SIZE, addr, pd
        m[at.M_VALID] = 1
        self.forged_data = np.frombuffer(m.base, dtype=np.uint8, offset=shm.HEADER_BYTES)   # m.base: the mmap
        self.forged_data[:] = 0x5A
        return {"qp_num": qp_num, "psn": psn, "gid": self.me["gid"], "rkey": key, "addr": addr,
                "digest": digest(self.forged_data.tobytes())}

    def plant(self, name, data_bytes):
        """A file named and laid out as a segment (magic, owner pid), mode 0666; its header words."""
        path = os.path.join(shm.directory(), shm.PREFIX + name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        self.planted = [*self.planted, path]
        os.fchmod(fd, 0o666)
        os.ftruncate(fd, shm.HEADER_BYTES + data_bytes)
        words = np.frombuffer(mmap.mmap(fd, shm.HEADER_BYTES + data_bytes), dtype=np.int64)
        os.close(fd)
        words[shm.W_OWNER_PID], words[shm.W_MAGIC] = os.getpid(), shm.MAGIC
        return words

    def forged(self):
        return {"digest": digest(self.forged_data.tobytes())}

    def reach(self, remote, op):
        mark = bytes([0xA5]) * SIZE
        self.src.write(mark, SIZE)
        qp = self.new_qp(self.attack_cq)
        self.connect_fast(qp, remote["psn"], remote)
        status = self.post(qp, self.attack_cq, op, remote["rkey"], remote["addr"])
        qp.close()
        return {"status": status, "local memory changed": self.src.read(SIZE, 0) != mark}

    def plant_junk(self):
        base = os.path.join(shm.directory(), f"{shm.PREFIX}junk-{os.getpid()}")
        fifo, short, link = base + "-fifo", base + "-short", base + "-link"
        self.planted = [*self.planted, fifo, short, link]
        os.mkfifo(fifo, 0o666)
        os.chmod(fifo, 0o666)
        with open(short, "wb") as f:
            f.write(b"short")
        os.chmod(short, 0o644)
        os.symlink(fifo, link)
        return {"paths": self.planted}

    def start(self):
        self.ctx = v.device.Context(name="soft0")
        return {"pid": os.getpid()}

    def reap(self):
        return {"reaped": shm.reap_orphans()}

    def unlink(self, paths):
        return {path: outcome(lambda: os.unlink(path)) for path in paths}

    def close(self):
        for path in self.planted:
            if os.path.lexists(path):
                os.unlink(path)
        if self.ctx is not None:
            self.ctx.close()  # closes what depends on it: PD, MRs, CQs, QPs
        return {}


def main():
    peer = Peer()
    for line in sys.stdin:
        request = json.loads(line)
        command = request.pop("cmd")
        try:
            answer = peer.close() if command == "exit" else getattr(peer, command)(**request)
        except Exception:
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)
        if command == "exit":
            return
    peer.close()


if __name__ == "__main__":
    main()
