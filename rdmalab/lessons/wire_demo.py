"""The program lesson 13 captures: two hosts of this machine with soft0 on its wire link (RoCEv2 over UDP),
an RC connection between them, and three operations: a WRITE, a READ, and a SEND that finds no receive.

    rdmalab capture -o my.pcap -- python -m rdmalab.lessons.wire_demo [--write N] [--read N] [--rnr]

It runs as two processes, as two machines would: this one, the initiator, on host 127.0.8.1, and the
target on 127.0.8.2, which it starts (`--target`); a learner other than root gets a pair of their own
(hosts(), so that a class on one server runs it at once, each learner on their own port 4791s). They swap endpoints over a pipe. Then the target
waits on that pipe: the bytes of the WRITE land in its memory, and the READ takes them from there,
without it running any code (its NIC does the work). Only the SEND needs the target's program: it
posts the receive late, once its NIC has answered the SEND "not ready" (an RNR NAK, counted in the
NIC's port counters), so the sender has to try again.
The initiator prints one JSON line: what completed, how long each operation took, and the target's address,
rkey and QP number (its endpoint), to find in the packets.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from rdmalab import verbs as v
from rdmalab.verbs import emulated, rc

def hosts(uid=None):
    """The initiator's and the target's addresses: 127.0.8.1 and .2 for root, 127.N.8.1 and .2 for another user
    (N from their uid): each learner's NICs hold UDP port 4791 on addresses of their own."""
    uid = os.getuid() if uid is None else uid
    net = 0 if uid == 0 else 1 + uid % 254
    return f"127.{net}.8.1", f"127.{net}.8.2"


INITIATOR, TARGET = hosts()
RECEIVE_LATE_S = 0.003   # how long the target waits, after its NIC's first RNR NAK, to post the SEND's receive
RNR_WAIT_S = 10.0        # (and how long at most it waits for that NAK)
PATH_MTU = 3             # IBV_MTU_1024: an Ethernet LAN's (MTU 1500). The hosts here sit on lo, whose MTU gives
                         # 4096 (rxe's rule), but at 1024 a 10 KiB WRITE is ten packets: more to see


def _side(size):
    e = v.enums
    access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    return rc.Resources(mr_sizes=(size,), access=access, sq_sig_all=0, max_send_wr=16, max_recv_wr=16)


def _wait(cq, what, timeout=30.0):
    from rdmalab.proc import waiting
    wc = waiting.poll(cq, 1, timeout, what)[0]
    if wc.status:
        raise RuntimeError(f"{what} completed with status {wc.status}")
    return wc


def _rnr_naks_sent():
    return (emulated.nic_counters() or {}).get("send_rnr_err", 0)


def target(size):
    """The target's program: set up, connect, then do nothing but what the initiator asks on the pipe."""
    with _side(size) as res:
        print(json.dumps(res.endpoint(mr=res.mr)), flush=True)
        res.connect(json.loads(sys.stdin.readline()), path_mtu=PATH_MTU)
        rnr_naks = _rnr_naks_sent()
        print(json.dumps({"connected": True}), flush=True)
        for line in sys.stdin:              # blocks: the WRITE and the READ happen meanwhile
            command = json.loads(line)
            if command["do"] == "receive":   # post a receive late, then wait for the SEND to land in it
                deadline = time.monotonic() + RNR_WAIT_S   # late: once our NIC has said "not ready" at least once
                while _rnr_naks_sent() == rnr_naks and time.monotonic() < deadline:
                    time.sleep(0.001)
                time.sleep(RECEIVE_LATE_S)
                sge = v.wr.SGE(res.mr.buf, command["length"], res.mr.lkey)
                res.qp.post_recv(v.wr.RecvWR(wr_id=7, num_sge=1, sg=[sge]))
                wc = _wait(res.cq, "the SEND")
                print(json.dumps({"received": wc.byte_len}), flush=True)
            elif command["do"] == "read":
                print(json.dumps({"hex": res.mr.read(command["length"], 0).hex()}), flush=True)


def initiator(write, read, rnr):
    e = v.enums
    size = max(write, read, 4096)
    env = {**os.environ, "RDMALAB_SOFT_HOST": TARGET}
    peer = subprocess.Popen([sys.executable, "-m", "rdmalab.lessons.wire_demo", "--target", "--size", str(size)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        with _side(size) as res:
            theirs = json.loads(peer.stdout.readline())
            mine = res.endpoint(mr=res.mr)
            peer.stdin.write(json.dumps(mine) + "\n")
            peer.stdin.flush()
            res.connect(theirs, path_mtu=PATH_MTU)
            peer.stdout.readline()   # the target is in RTS too
            out = {"hosts": [INITIATOR, TARGET],   # and where the target said its memory is: what a RETH names
                   "target": {key: theirs[key] for key in ("addr", "rkey", "qp_num")}}

            def post(opcode, length, remote=True):
                sge = v.wr.SGE(res.mr.buf, length, res.mr.lkey)
                wr = v.wr.SendWR(opcode=opcode, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED)
                if remote:
                    wr.set_wr_rdma(theirs["rkey"], theirs["addr"])
                start = time.perf_counter()
                res.qp.post_send(wr)
                return start

            if write:
                res.mr.write(bytes(range(256)) * (write // 256) + bytes(write % 256), write, 0)
                start = post(e.IBV_WR_RDMA_WRITE, write)
                _wait(res.cq, "the RDMA WRITE")
                out["write_us"] = (time.perf_counter() - start) * 1e6
                peer.stdin.write(json.dumps({"do": "read", "length": min(write, 64)}) + "\n")
                peer.stdin.flush()
                landed = bytes.fromhex(json.loads(peer.stdout.readline())["hex"])
                out["write_landed"] = landed == res.mr.read(len(landed), 0)
            if read:
                start = post(e.IBV_WR_RDMA_READ, read)
                _wait(res.cq, "the RDMA READ")
                out["read_us"] = (time.perf_counter() - start) * 1e6
            if rnr:
                start = post(e.IBV_WR_SEND, 64, remote=False)   # no receive is posted at the target yet
                peer.stdin.write(json.dumps({"do": "receive", "length": 64}) + "\n")
                peer.stdin.flush()
                _wait(res.cq, "the SEND")
                out["send_us"] = (time.perf_counter() - start) * 1e6
                out["received"] = json.loads(peer.stdout.readline())["received"]
            print(json.dumps(out), flush=True)
    finally:
        if peer.stdin:
            peer.stdin.close()
        try:
            peer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            peer.kill()
            peer.wait()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", type=int, default=10240, help="bytes to WRITE (0: none)")
    p.add_argument("--read", type=int, default=2500, help="bytes to READ back (0: none)")
    p.add_argument("--rnr", action="store_true", help="then a SEND that finds no receive at first")
    p.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, default=4096, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.target:
        return target(args.size)
    os.environ["RDMALAB_SOFT_HOST"] = INITIATOR   # (before soft0 starts: it is this process's host)
    return initiator(args.write, args.read, args.rnr)


if __name__ == "__main__":
    sys.exit(main())
