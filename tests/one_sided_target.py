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

e = v.enums


def usage():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": ru.ru_utime + ru.ru_stime}


def main():
    size = int(sys.argv[1])
    ctx = v.device.Context(name=v.device.get_device_list()[0].name.decode())
    gid_index = v.routable_gid_index(ctx)
    pd = v.pd.PD(ctx)
    mr = v.mr.MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    cq = v.cq.CQ(ctx, 16)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(4, 4)))
    print(json.dumps({"qp_num": qp.qp_num, "psn": 0, "gid": str(ctx.query_gid(1, gid_index)),
                      "rkey": mr.rkey, "addr": mr.buf}), flush=True)
    peer = json.loads(sys.stdin.readline())
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
    a.pkey_index, a.qp_access_flags = 0, e.IBV_ACCESS_REMOTE_WRITE
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTR, port_num=1, path_mtu=e.IBV_MTU_1024)
    a.ah_attr = v.addr.AHAttr(port_num=1, is_global=1, gr=v.addr.GlobalRoute(
        dgid=v.addr.GID(peer["gid"]), sgid_index=gid_index, hop_limit=64))
    a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = peer["qp_num"], peer["psn"], 1, 12
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
              | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    print(json.dumps({"ready": True, **usage()}), flush=True)
    sys.stdin.readline()  # asleep in the kernel until the peer says "check"
    after = usage()
    print(json.dumps({**after, "sha256": hashlib.sha256(mr.read(size, 0)).hexdigest()}), flush=True)
    for obj in (qp, cq, mr, pd, ctx):
        obj.close()


if __name__ == "__main__":
    main()
