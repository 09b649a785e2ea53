"""The passive side of tests/test_one_sided.py: expose an MR, then sleep while a peer writes into it.

Protocol on stdin/stdout (one JSON line each way): it prints its connection details, reads the
peer's, connects, prints "ready" with its resource usage, blocks on stdin (runs no code), and on
"check" prints its usage again and what its memory now holds.
"""
import hashlib
import json
import resource
import sys

from rdmalab import verbs as v
from rdmalab.verbs import rc

e = v.enums


def usage():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": ru.ru_utime + ru.ru_stime}


def main():
    size = int(sys.argv[1])
    ctx = v.device.Context(name=v.device.get_device_list()[0].name.decode())
    pd = v.pd.PD(ctx)
    mr = v.mr.MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    cq = v.cq.CQ(ctx, 16)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
    mine = rc.endpoint(ctx, qp, mr)
    print(json.dumps(mine), flush=True)
    rc.connect(ctx, qp, mine, json.loads(sys.stdin.readline()))
    print(json.dumps({"ready": True, **usage()}), flush=True)
    sys.stdin.readline()  # asleep in the kernel until the peer says "check"
    after = usage()
    print(json.dumps({**after, "sha256": hashlib.sha256(mr.read(size, 0)).hexdigest()}), flush=True)
    for obj in (qp, cq, mr, pd, ctx):
        obj.close()


if __name__ == "__main__":
    main()
