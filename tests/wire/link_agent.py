"""A soft0 program that a test drives, one JSON command a line on stdin, one JSON answer a line on stdout.

The tests of the udp link (test_link.py) run two of these, on two hosts (RDMALAB_SOFT_HOST), as two
programs on two machines would run: each with its own PD, MR, CQ and RC QP, connected by what the
other one tells about itself. Commands: setup, connect, write, read, send, recv, poll, state, counters;
setup_ud, send_ud and recv_ud for a UD QP beside the RC one (on the same CQ).
"""
import json
import signal
import sys
import time

from rdmalab import verbs as v

e = v.enums
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
          | e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_MW_BIND)
OPCODES = {"write": e.IBV_WR_RDMA_WRITE, "write_imm": e.IBV_WR_RDMA_WRITE_WITH_IMM, "send": e.IBV_WR_SEND,
           "send_imm": e.IBV_WR_SEND_WITH_IMM, "read": e.IBV_WR_RDMA_READ, "cas": e.IBV_WR_ATOMIC_CMP_AND_SWP,
           "faa": e.IBV_WR_ATOMIC_FETCH_AND_ADD}


class Agent:
    def setup(self, size=1 << 16, mtu=e.IBV_MTU_1024, max_wr=64, events=False, qp_type="rc"):
        self.ctx = v.device.Context(name="soft0")
        self.pd = v.pd.PD(self.ctx)
        self.mr = v.mr.MR(self.pd, size, ACCESS)
        self.channel = v.cq.CompChannel(self.ctx) if events else None
        self.cq = v.cq.CQ(self.ctx, 4 * max_wr, None, self.channel, 0)
        cap = v.qp.QPCap(max_send_wr=max_wr, max_recv_wr=max_wr)
        kind = {"rc": e.IBV_QPT_RC, "uc": e.IBV_QPT_UC}[qp_type]
        self.qp = v.qp.QP(self.pd, v.qp.QPInitAttr(qp_type=kind, scq=self.cq, rcq=self.cq, cap=cap,
                                                   sq_sig_all=0))
        self.mtu = mtu
        gid = self.ctx.query_gid(1, 1)
        return dict(qpn=self.qp.qp_num, gid=str(gid), rkey=self.mr.rkey, addr=self.mr.buf, psn=100,
                    active_mtu=self.ctx.query_port(1).active_mtu)

    def connect(self, qpn, gid, psn, timeout=14, retry_cnt=7, rnr_retry=7, min_rnr_timer=1, my_psn=100):
        attr = v.qp.QPAttr(port_num=1)
        attr.qp_access_flags = ACCESS
        attr.path_mtu = self.mtu
        attr.dest_qp_num, attr.rq_psn, attr.sq_psn = qpn, psn, my_psn
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = min_rnr_timer, timeout, retry_cnt, rnr_retry
        attr.ah_attr = v.addr.AHAttr(port_num=1, is_global=1, gr=v.addr.GlobalRoute(dgid=v.addr.GID(gid), sgid_index=1))
        self.qp.to_rts(attr)
        return {}

    def setup_ud(self, qkey):
        """A UD QP in RTS, holding `qkey`, on the RC QP's CQ."""
        cap = v.qp.QPCap(max_send_wr=16, max_recv_wr=16)
        self.ud = v.qp.QP(self.pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=cap))
        attr = v.qp.QPAttr(port_num=1)
        attr.qkey, attr.pkey_index = qkey, 0
        self.ud.to_rts(attr)
        return dict(qpn=self.ud.qp_num)

    def send_ud(self, gid, qpn, qkey, offset, length, imm=None, wr_id=1):
        ah = v.addr.AH(self.pd, attr=v.addr.AHAttr(port_num=1, is_global=1,
                                                   gr=v.addr.GlobalRoute(dgid=v.addr.GID(gid), sgid_index=1)))
        wr = v.wr.SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND if imm is None else e.IBV_WR_SEND_WITH_IMM, num_sge=1,
                         sg=[v.wr.SGE(self.mr.buf + offset, length, self.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED,
                         imm_data=imm or 0)
        wr.set_wr_ud(ah, qpn, qkey)
        self.ud.post_send(wr)
        return {}

    def recv_ud(self, offset, length, wr_id=1):
        sge = v.wr.SGE(self.mr.buf + offset, length, self.mr.lkey)
        self.ud.post_recv(v.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))
        return {}

    def write(self, offset, hex):
        data = bytes.fromhex(hex)
        self.mr.write(data, len(data), offset)
        return {}

    def fill(self, offset, length, seed):
        import numpy as np
        v.as_array(self.mr)[offset:offset + length] = np.random.default_rng(seed).integers(0, 256, length, dtype=np.uint8)
        return {}

    def digest(self, offset, length):
        import hashlib
        return dict(sha=hashlib.sha256(self.mr.read(length, offset)).hexdigest())

    def setup_mr(self, size):
        mr = v.mr.MR(self.pd, size, ACCESS)
        self.mrs = getattr(self, "mrs", {})
        self.mrs[mr.lkey] = mr
        return dict(lkey=mr.lkey, rkey=mr.rkey, addr=mr.buf)

    def fill_mr(self, key, length, seed):
        import numpy as np
        v.as_array(self.mrs[key])[:length] = np.random.default_rng(seed).integers(0, 256, length, dtype=np.uint8)
        return {}

    def digest_mr(self, key, length):
        import hashlib
        return dict(sha=hashlib.sha256(v.as_array(self.mrs[key])[:length]).hexdigest())

    def read(self, offset, length):
        return dict(hex=self.mr.read(length, offset).hex())

    def send(self, op, offset=0, length=0, remote_addr=0, rkey=0, imm=0, compare_add=0, swap=0, wr_id=1,
             signaled=True, lkey=None, addr=None, count=1):
        for i in range(count):
            sge = v.wr.SGE((self.mr.buf if addr is None else addr) + offset, length,
                           self.mr.lkey if lkey is None else lkey)
            wr = v.wr.SendWR(wr_id=wr_id + i, opcode=OPCODES[op], num_sge=1, sg=[sge], imm_data=imm,
                             send_flags=e.IBV_SEND_SIGNALED if signaled else 0)
            if op in ("cas", "faa"):
                wr.set_wr_atomic(rkey, remote_addr, compare_add, swap)
            elif op not in ("send", "send_imm"):
                wr.set_wr_rdma(rkey, remote_addr)
            self.qp.post_send(wr)
        return {}

    def bind_mw(self, offset, length, wr_id=1):
        """Bind a type 2 memory window over [offset, offset+length) of the MR, for remote writes (signaled)."""
        self.mw = v.mr.MW(self.pd, e.IBV_MW_TYPE_2)
        wr = v.wr.SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(self.mw, v.mr.MWBindInfo(self.mr, self.mr.buf + offset, length, e.IBV_ACCESS_REMOTE_WRITE))
        self.qp.post_send(wr)
        return dict(rkey=wr.rkey, addr=self.mr.buf + offset)

    def invalidate(self, rkey, wr_id=1):
        wr = v.wr.SendWR(wr_id=wr_id, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
        wr.imm_data = rkey
        self.qp.post_send(wr)
        return {}

    def recv(self, offset, length, wr_id=1):
        sge = v.wr.SGE(self.mr.buf + offset, length, self.mr.lkey)
        self.qp.post_recv(v.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))
        return {}

    def poll(self, n=1, timeout=20.0):
        wcs, deadline = [], time.monotonic() + timeout
        while len(wcs) < n and time.monotonic() < deadline:
            got, polled = self.cq.poll(n - len(wcs))
            wcs += polled
            if not got:
                time.sleep(0.0005)
        return dict(wcs=[dict(wr_id=w.wr_id, status=w.status, opcode=w.opcode, byte_len=w.byte_len,
                              imm_data=w.imm_data, wc_flags=w.wc_flags, qp_num=w.qp_num,
                              src_qp=w.src_qp) for w in wcs])

    def state(self):
        return dict(state=self.qp.query(e.IBV_QP_STATE)[0].qp_state)

    def to_error(self):
        self.qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        return {}

    def counters(self):
        from rdmalab.verbs.soft.link.doorbell import nic_counters
        return dict(counters=nic_counters())

    def describe(self):
        from rdmalab.verbs.soft.link.doorbell import NIC
        return dict(qps=NIC.for_host().counters(what="describe"))

    def nic_pid(self):
        from rdmalab.verbs.soft.link.doorbell import NIC
        return dict(pid=NIC.for_host().pid)


    def event(self, limit=20.0):
        """Arm the CQ and block in get_cq_event (a SIGALRM after `limit` seconds ends it: errno 4)."""
        self.cq.req_notify()
        signal.signal(signal.SIGALRM, lambda *_: None)
        signal.setitimer(signal.ITIMER_REAL, limit)
        start = time.monotonic()
        try:
            self.channel.get_cq_event(self.cq)
            self.cq.ack_events(1)
            got = "event"
        except v.pyverbs_error.PyverbsRDMAError as error:
            got = error.error_code
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return dict(got=got, seconds=time.monotonic() - start)


def main():
    agent = Agent()
    for line in sys.stdin:
        command = json.loads(line)
        name = command.pop("do")
        try:
            answer = getattr(agent, name)(**command)
        except Exception as error:   # noqa: BLE001 (the test reads it)
            answer = dict(error=f"{type(error).__name__}: {error}")
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
