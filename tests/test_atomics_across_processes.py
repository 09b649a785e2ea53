"""FETCH_AND_ADD from several processes at once on one word: no increment is lost."""
import json
import os
import struct
import subprocess
import sys
import textwrap

from rdmalab import verbs as v
from rdmalab.verbs import rc

e = v.enums
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADDS = 300

INITIATOR = textwrap.dedent("""
    import json, sys
    from rdmalab import verbs as v
    from rdmalab.verbs import rc
    e = v.enums
    ctx = v.device.Context(name=v.device.get_device_list()[0].name.decode())
    pd = v.pd.PD(ctx)
    old = v.mr.MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE)
    cq = v.cq.CQ(ctx, 16)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
    mine = rc.endpoint(ctx, qp)
    print(json.dumps(mine), flush=True)
    target = json.loads(sys.stdin.readline())
    rc.connect(ctx, qp, mine, target, access=0)
    sys.stdin.readline()  # start together
    for i in range(int(sys.argv[1])):
        wr = v.wr.SendWR(wr_id=i, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[v.wr.SGE(old.buf, 8, old.lkey)])
        wr.set_wr_atomic(target["rkey"], target["addr"], 1, 0)
        qp.post_send(wr)
        assert rc.wait_for_completion(cq).status == e.IBV_WC_SUCCESS
    print("done", flush=True)
""")


def test_concurrent_fetch_and_add_from_two_processes_loses_nothing():
    ctx = v.device.Context(name=v.device.get_device_list()[0].name.decode())
    pd = v.pd.PD(ctx)
    word = v.mr.MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC)
    cq = v.cq.CQ(ctx, 16)
    peers = [subprocess.Popen([sys.executable, "-c", INITIATOR, str(ADDS)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT})
             for _ in range(2)]
    qps = []
    try:
        for peer in peers:
            theirs = json.loads(peer.stdout.readline())
            qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
            mine = rc.endpoint(ctx, qp, word)
            rc.connect(ctx, qp, mine, theirs, access=e.IBV_ACCESS_REMOTE_ATOMIC)
            peer.stdin.write(json.dumps(mine) + "\n")
            peer.stdin.flush()
            qps.append(qp)
        for peer in peers:
            peer.stdin.write("go\n")
            peer.stdin.flush()
        assert [peer.stdout.readline().strip() for peer in peers] == ["done", "done"]
        assert struct.unpack("<Q", word.read(8, 0))[0] == 2 * ADDS
    finally:
        for peer in peers:
            peer.stdin.close()
            peer.wait(timeout=60)
        ctx.close()
