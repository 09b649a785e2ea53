"""One-sided RDMA across processes: the target's memory changes while the target runs no code."""
import hashlib
import json
import os
import resource
import subprocess
import sys

from rdmalab import verbs as v
from rdmalab.verbs import rc

e = v.enums
HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "helpers", "one_sided_target.py")
SIZE = 1 << 20


def test_rdma_write_lands_in_a_sleeping_process_without_its_cpu(tmp_path):
    target = subprocess.Popen([sys.executable, TARGET, str(SIZE)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              # OpenBLAS worker threads spin for ~35 ms of CPU after numpy's import,
                              # in any process: one thread keeps the target truly idle.
                              env={**os.environ, "PYTHONPATH": os.path.dirname(HERE), "OPENBLAS_NUM_THREADS": "1"})
    try:
        remote = json.loads(target.stdout.readline())
        ctx = v.device.Context(name=v.device.get_device_list()[0].name.decode())
        pd = v.pd.PD(ctx)
        src = v.mr.MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        cq = v.cq.CQ(ctx, 16)
        qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
        mine = rc.endpoint(ctx, qp)
        target.stdin.write(json.dumps(mine) + "\n")
        target.stdin.flush()
        rc.connect(ctx, qp, mine, remote, access=0)
        before = json.loads(target.stdout.readline())
        assert before["ready"]

        mine = resource.getrusage(resource.RUSAGE_SELF)
        payload = bytes(range(256)) * (SIZE // 256)
        for round_ in range(50):  # 50 MiB into the sleeping process, 1 MiB at a time
            src.write(payload[round_:] + payload[:round_], SIZE)
            w = v.wr.SendWR(wr_id=round_, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                            sg=[v.wr.SGE(src.buf, SIZE, src.lkey)], send_flags=e.IBV_SEND_SIGNALED)
            w.set_wr_rdma(remote["rkey"], remote["addr"])
            qp.post_send(w)
            assert rc.wait_for_completion(cq).status == e.IBV_WC_SUCCESS
        done = resource.getrusage(resource.RUSAGE_SELF)
        initiator_cpu = (done.ru_utime + done.ru_stime) - (mine.ru_utime + mine.ru_stime)

        target.stdin.write("check\n")
        target.stdin.flush()
        after = json.loads(target.stdout.readline())
        last = payload[49:] + payload[:49]
        assert after["sha256"] == hashlib.sha256(last).hexdigest()  # the last write landed, whole
        target_cpu = after["cpu"] - before["cpu"]
        # The target's CPU stays (all but) flat while the initiator did the copying: relative, not timed.
        assert target_cpu <= max(0.005, initiator_cpu / 20), (target_cpu, initiator_cpu)
        for obj in (qp, cq, src, pd, ctx):
            obj.close()
    finally:
        target.stdin.close()
        target.wait(timeout=30)


def test_a_chain_of_wrs_rings_the_doorbell_once_where_the_doorbell_is_a_syscall():
    """What the posting lesson (07) prints: Soft-RoCE's doorbell is a write() per post_send call (providers/rxe), so 16
    WRITEs cost 16 one by one and 1 as a chain; soft0 has no doorbell (0 and 0), nor has mlx5 (an MMIO store)."""
    from rdmalab import lessons
    a = rc.Resources(sq_sig_all=0, max_send_wr=64)
    b = rc.Resources(ctx=a.ctx, pd=a.pd)
    try:
        a.connect(b.endpoint(mr=b.mr))
        b.connect(a.endpoint(mr=a.mr))
        counts = [lessons.post_writes(a.qp, a.cq, a.mr, b.endpoint(mr=b.mr), 16, chained=c) for c in (False, True)]
        expected = {"soft0": [0, 0]}.get(a.route.device, [16, 1] if a.route.device.startswith("rxe") else None)
        if expected is None:
            assert counts[1] <= counts[0]   # a hardware NIC: no syscall either way, or fewer for the chain
        else:
            assert counts == expected
    finally:
        b.close()
        a.close()


def test_a_write_to_a_killed_peer_goes_unanswered():
    # A host destroys a killed process's QPs: what is sent to them after that is never acknowledged,
    # so the WRITE ends in RETRY_EXC_ERR once its retries are spent, and the QP in ERR flushes the next.
    # (soft0's shared-memory link keeps the dead process's memory mapped: it must not go on taking WRITEs.)
    import signal
    target = subprocess.Popen([sys.executable, TARGET, "4096"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": os.path.dirname(HERE), "OPENBLAS_NUM_THREADS": "1"})
    res = rc.Resources(mr_sizes=[4096], access=e.IBV_ACCESS_LOCAL_WRITE)
    try:
        remote = json.loads(target.stdout.readline())
        mine = res.endpoint(mr=res.mr)
        target.stdin.write(json.dumps(mine) + "\n")
        target.stdin.flush()
        res.connect(remote, access=0, retry_cnt=2)   # 3 tries of 67 ms each, then RETRY_EXC_ERR
        assert json.loads(target.stdout.readline())["ready"]

        def write(wr_id):
            w = v.wr.SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                            sg=[v.wr.SGE(res.mr.buf, 64, res.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
            w.set_wr_rdma(remote["rkey"], remote["addr"])
            res.qp.post_send(w)
            wc = rc.wait_for_completion(res.cq, timeout=30)
            return wc.wr_id, wc.status
        assert write(1) == (1, e.IBV_WC_SUCCESS)
        target.send_signal(signal.SIGKILL)
        target.wait(timeout=30)
        assert write(2) == (2, e.IBV_WC_RETRY_EXC_ERR)
        assert write(3) == (3, e.IBV_WC_WR_FLUSH_ERR)
    finally:
        res.close()
        target.kill()
        target.wait(timeout=30)
