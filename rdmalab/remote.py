"""A second process whose registered memory you reach with one-sided RDMA (lesson 04).

    target = RemoteBuffer()                 # starts it; it registers 4 KiB and creates a QP
    rc.connect(ctx, qp, mine, target.endpoint)
    target.connect(mine)                    # it connects back, posts receives, then blocks in read()
    ... RDMA WRITE / READ / atomics into target.endpoint["addr"] with target.endpoint["rkey"] ...
    procstat.snapshot(target.pid)           # its CPU and syscalls, read from outside
    target.read(16)                         # only now does it run: it looks at its own memory
    target.close()

The child runs `python -m rdmalab.remote`, speaking JSON lines on stdin/stdout.
"""
import json
import os
import select
import sys

from . import children
SIZE = 4096
RECEIVES = 16


class RemoteBuffer:
    def __init__(self, timeout=60):
        self.proc = children.spawn("rdmalab.remote")
        self.pid, self.timeout = self.proc.pid, timeout
        self.endpoint = self._ask(None)

    def _ask(self, message, timeout=None):
        if message is not None:
            self._tell(message)
        return self._hear(timeout)

    def _tell(self, message):
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def _hear(self, timeout=None):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout or self.timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RuntimeError(f"the target process did not answer: {self.proc.stderr.read()[-500:] if self.proc.stderr else ''}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the target process failed: {answer['error']}")
        return answer

    def connect(self, initiator_endpoint):
        """Connect the target's QP to ours and post its receives (for WRITE_WITH_IMM); then it blocks."""
        return self._ask({"op": "connect", "peer": initiator_endpoint})

    def read(self, length, offset=0):
        """The target looks at its own memory (this is when its CPU runs)."""
        return bytes.fromhex(self._ask({"op": "read", "length": length, "offset": offset})["hex"])

    def completions(self):
        """The target polls its CQ: the receive completions WRITE_WITH_IMM left there."""
        return self._ask({"op": "poll"})["completions"]

    def start_sending(self, count, gap_s, length=8):
        """The target SENDs `count` messages of `length` bytes to our QP, `gap_s` apart, while we wait
        for them (post receives first). sent_times() then gives when it posted each (time.monotonic)."""
        self._tell({"op": "send", "count": count, "gap": gap_s, "length": length})

    def sent_times(self):
        return self._hear(self.timeout)["posted"]

    def wait_for_mail(self, timeout=10.0):
        """The target spins on the 8-byte flag at offset 0 of its buffer, then reads the message after it."""
        return self._ask({"op": "mailbox", "timeout": timeout}, timeout + 5)

    def close(self):
        children.stop(self.proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _serve():
    import time
    import numpy as np
    from rdmalab import waiting
    from rdmalab import verbs as v
    from rdmalab.verbs import rc
    e = v.enums
    route = v.choose_route()
    ctx = v.device.Context(name=route.device)
    pd = v.pd.PD(ctx)
    access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
              | e.IBV_ACCESS_REMOTE_ATOMIC)
    mr = v.mr.MR(pd, SIZE, access)
    cq = v.cq.CQ(ctx, 64)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                                     cap=v.qp.QPCap(max_send_wr=4, max_recv_wr=RECEIVES)))
    mine = rc.endpoint(ctx, qp, mr)
    mem = v.as_array(mr)

    def answer(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    answer({**mine, "pid": os.getpid(), "size": SIZE})
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg.get("op")
        try:
            if op == "close":
                break
            if op == "connect":
                rc.connect(ctx, qp, mine, msg["peer"], access)
                for _ in range(RECEIVES):
                    qp.post_recv(v.wr.RecvWR(wr_id=1, num_sge=1, sg=[v.wr.SGE(mr.buf, 0, mr.lkey)]))
                answer({"ok": True})
            elif op == "read":
                answer({"hex": mem[msg["offset"]:msg["offset"] + msg["length"]].tobytes().hex()})
            elif op == "poll":
                n, wcs = cq.poll(RECEIVES)
                answer({"completions": [{"status": w.status, "opcode": w.opcode, "byte_len": w.byte_len,
                                         "imm_data": w.imm_data} for w in wcs]})
            elif op == "send":
                sge = v.wr.SGE(mr.buf + SIZE // 2, msg["length"], mr.lkey)
                posted = []
                for _ in range(msg["count"]):
                    time.sleep(msg["gap"])
                    posted.append(time.monotonic())
                    qp.post_send(v.wr.SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                                             send_flags=e.IBV_SEND_SIGNALED))
                    rc.wait_for_completion(cq)   # ours; a receive completion of an earlier lesson step counts too
                answer({"posted": posted})
            elif op == "mailbox":
                flag = mem[:8].view(np.uint64)
                try:
                    waiting.memory(lambda: flag[0] != 0, mr, msg["timeout"], "the mailbox's writer")
                except TimeoutError:
                    raise TimeoutError("no mail: the flag at offset 0 was never set") from None
                length = int(flag[0])
                text = mem[8:8 + min(length, SIZE - 8)].tobytes()
                flag[0] = 0
                answer({"flag": length, "message": text.hex()})
            else:
                answer({"error": f"unknown op {op!r}"})
        except Exception as error:
            answer({"error": f"{type(error).__name__}: {error}"})
    for obj in (qp, mr, cq, pd, ctx):
        obj.close()


if __name__ == "__main__":
    _serve()
