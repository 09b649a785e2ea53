"""A second process whose registered memory you reach with one-sided RDMA (lessons 05 and 06).

    target = RemoteBuffer()                 # starts it; it registers 4 KiB and creates a QP
    rc.connect(ctx, qp, mine, target.endpoint)
    target.connect(mine)                    # it connects back, posts receives, then blocks in read()
    ... RDMA WRITE / READ / atomics into target.endpoint["addr"] with target.endpoint["rkey"] ...
    procstat.snapshot(target.pid)           # its CPU and syscalls, read from outside
    target.read(16)                         # only now does it run: it looks at its own memory
    target.close()

The child runs `python -m rdmalab.lessons.target`, speaking JSON lines on stdin/stdout.
"""
import contextlib
import os
import time

from rdmalab import sockets
from rdmalab.proc import waiting
from rdmalab.proc.children import Helper, answer, end_with_parent, serve
from rdmalab import verbs as v
from rdmalab.verbs import rc

SIZE = 4096
RECEIVES = 16
INBOX = SIZE - 64   # where a SEND's bytes land: the receives the target keeps posted point here


class RemoteBuffer:
    """`host`: start the target on that host (over ssh: children.spawn), as on a second machine; its pid
    is then the one it runs under there, and its TCP port listens on `host`'s address."""

    def __init__(self, timeout=60, host=None):
        self.host = host
        self.helper = Helper("the one-sided lessons' target process" + (f" on {host}" if host else ""), "rdmalab.lessons.target",
                             timeout=timeout, host=host)
        self.proc = self.helper.proc
        self.endpoint = self.helper.reply()   # it introduces itself: QP number, PSN, GID, rkey, address, pid
        self.pid = self.endpoint["pid"]

    def connect(self, initiator_endpoint):
        """Connect the target's QP to ours and post its receives (for WRITE_WITH_IMM); then it blocks."""
        return self.helper.ask(op="connect", peer=initiator_endpoint)

    def read(self, length, offset=0):
        """The target looks at its own memory (this is when its CPU runs)."""
        return bytes.fromhex(self.helper.ask(op="read", length=length, offset=offset)["hex"])

    def completions(self):
        """The target polls its CQ: the receive completions WRITE_WITH_IMM left there."""
        return self.helper.ask(op="poll")["completions"]

    def start_sending(self, count, gap_s, length=8):
        """The target SENDs `count` messages of `length` bytes to our QP, `gap_s` apart, while we wait
        for them (post receives first). sent_times() then gives when it posted each (time.monotonic)."""
        self.helper.send(op="send", count=count, gap=gap_s, length=length)

    def sent_times(self):
        return self.helper.reply()["posted"]

    def tcp_listen(self):
        """The target listens on a TCP port too (freeze.run), of 127.0.0.1 or of its host: returns the port."""
        return self.helper.ask(op="tcp_listen", address=self.host or "127.0.0.1")["port"]

    def tcp_accept(self):
        """The target accepts the connection made to that port."""
        return self.helper.ask(op="tcp_accept")

    def start_draining(self):
        """The target starts reading its socket until the sender closes it (send the rest, then close)."""
        self.helper.send(op="tcp_drain")

    def drained(self):
        """The bytes the target received on its socket."""
        return self.helper.reply(timeout=120)["received"]

    @contextlib.contextmanager
    def serving(self):
        """The target's program as a TCP server (on 127.0.0.1, or its host's address): it answers each 8-byte
        request (an offset) with the 8 bytes of its memory there, until the connection closes. Yields the
        connected socket (TCP_NODELAY); `served` then says how many requests it answered."""
        address = self.host or "127.0.0.1"
        self.helper.send(op="tcp_serve", address=address)
        sock = sockets.connect(address, self.helper.reply()["port"])
        try:
            yield sock
        finally:
            sock.close()
            self.served = self.helper.reply(timeout=30)["served"]

    def wait_for_mail(self, timeout=10.0):
        """The target waits for mail, however it is announced: a receive completion (a WRITE_WITH_IMM, whose
        immediate is the message's length, or a SEND of the 8-byte length) or the 8-byte flag at offset 0
        becoming non-zero. Then it reads the message at offset 8. Returns {"how", "flag", "message"}."""
        return self.helper.ask(reply_within=timeout + 5, op="mailbox", timeout=timeout)

    def close(self):
        self.helper.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main():
    """The target process: registers SIZE bytes, creates a QP, says where they are, then does only
    what it is asked; it ends with the notebook kernel that started it, however that ends."""
    end_with_parent()
    import numpy as np

    e = v.enums
    access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
              | e.IBV_ACCESS_REMOTE_ATOMIC)
    res = rc.Resources(mr_sizes=[SIZE], access=access, max_send_wr=4, max_recv_wr=RECEIVES, cq_depth=64)
    qp, cq, mr = res.qp, res.cq, res.mr
    mine = res.endpoint(mr=mr)
    mem = v.as_array(mr)

    def post_receive():
        qp.post_recv(v.wr.RecvWR(wr_id=1, num_sge=1, sg=[v.wr.SGE(mr.buf + INBOX, 64, mr.lkey)]))

    def connect(peer):
        res.connect(peer)
        for _ in range(RECEIVES):
            post_receive()
        return {"ok": True}

    def poll():
        n, wcs = cq.poll(RECEIVES)
        return {"completions": [{"status": w.status, "opcode": w.opcode, "byte_len": w.byte_len,
                                 "imm_data": w.imm_data} for w in wcs]}

    def send(count, gap, length):
        sge = v.wr.SGE(mr.buf + SIZE // 2, length, mr.lkey)
        posted = []
        for _ in range(count):
            time.sleep(gap)
            posted.append(time.monotonic())
            qp.post_send(v.wr.SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED))
            rc.wait_for_completion(cq)   # ours; a receive completion of an earlier lesson step counts too
        return {"posted": posted}

    def mailbox(timeout):
        flag, inbox = mem[:8].view(np.uint64), mem[INBOX:INBOX + 8].view(np.uint64)
        mail = {}

        def arrived():
            n, wcs = cq.poll(1)
            if n and wcs[0].opcode in (e.IBV_WC_RECV, e.IBV_WC_RECV_RDMA_WITH_IMM):
                post_receive()   # (kept topped up)
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise RuntimeError(f"the mailbox's receive completed with status {wc.status}")
                with_imm = wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM
                mail.update(how="immediate" if with_imm else "send", flag=wc.imm_data if with_imm else int(inbox[0]))
            elif flag[0]:
                mail.update(how="flag", flag=int(flag[0]))
            return bool(mail)
        try:
            waiting.until(arrived, timeout, "the mailbox's writer")
        except TimeoutError:
            raise TimeoutError("no mail: no receive completion came, and the flag at offset 0 was never set") from None
        text = mem[8:8 + min(mail["flag"], SIZE - 8)].tobytes()
        flag[0] = 0
        return {**mail, "message": text.hex()}

    tcp = {}

    def tcp_listen(address="127.0.0.1"):
        tcp["server"], port = sockets.listen(address)
        return {"port": port}

    def tcp_accept():
        tcp["conn"] = sockets.accept(tcp.pop("server"))
        return {"ok": True}

    def tcp_serve(address="127.0.0.1"):
        server, port = sockets.listen(address)
        answer({"port": port})            # (answered early: the initiator connects, then sends requests)
        conn, request, served = sockets.accept(server), memoryview(bytearray(8)), 0
        server.close()
        with conn:
            while True:
                try:
                    sockets.recv_exactly(conn, request)
                except ConnectionError:
                    return {"served": served}
                offset = min(int.from_bytes(request, "little"), SIZE - 8)
                sockets.send_all(conn, mem[offset:offset + 8].tobytes())
                served += 1

    def tcp_drain():
        conn, buf, received = tcp.pop("conn"), bytearray(1 << 20), 0
        with conn:
            while True:
                n = conn.recv_into(buf)
                if not n:
                    return {"received": received}
                received += n

    try:
        answer({**mine, "pid": os.getpid(), "size": SIZE})
        serve({"connect": connect, "poll": poll, "send": send, "mailbox": mailbox,
               "tcp_listen": tcp_listen, "tcp_accept": tcp_accept, "tcp_drain": tcp_drain, "tcp_serve": tcp_serve,
               "read": lambda length, offset: {"hex": mem[offset:offset + length].tobytes().hex()}})
    finally:
        res.close()


if __name__ == "__main__":
    main()
