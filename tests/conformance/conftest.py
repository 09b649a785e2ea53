"""The conformance suite: pyverbs behaviour, written only against the pyverbs API.

It runs on whichever provider rdmalab.verbs picked (RDMALAB_PROVIDER): on `soft` here, and on a
real Soft-RoCE device in the VM suite, where every test must give the same outcome.
"""
import hashlib
import json
import os
import time

import pytest

from rdmalab import verbs as v

e = v.enums
ALL_ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
              | e.IBV_ACCESS_REMOTE_ATOMIC)
PORT = 1

# Differential truth: with RDMALAB_TRACE=<file>, every observable outcome the tests look at (completions,
# errnos, QP states, the pairs' memory) is recorded per test and written to <file> as JSON.
# softroce/compare_traces.py then checks that soft0 and rxe0 gave the same outcomes, test by test.
TRACE = {}
_observations = []


@pytest.fixture(autouse=True)
def _trace(request):
    global _observations
    _observations = TRACE.setdefault(request.node.nodeid, [])
    yield


def observe(kind, value):
    _observations.append([kind, value])


def pytest_sessionfinish(session):
    if os.environ.get("RDMALAB_TRACE"):
        with open(os.environ["RDMALAB_TRACE"], "w") as out:
            json.dump({"provider": v.PROVIDER, "tests": TRACE}, out, indent=1)


@pytest.fixture(scope="session")
def ctx():
    name = v.device.get_device_list()[0].name.decode()
    context = v.device.Context(name=name)
    yield context
    context.close()


@pytest.fixture(scope="session")
def gid_index(ctx):
    return v.routable_gid_index(ctx, PORT)


@pytest.fixture
def pd(ctx):
    with v.pd.PD(ctx) as p:
        yield p


def to_init(qp, access=ALL_ACCESS):
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=PORT)
    a.pkey_index = 0
    a.qp_access_flags = access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)


def rtr_attr(ctx, gid_index, dest_qp_num, rq_psn=0, min_rnr_timer=1, max_dest_rd_atomic=1):
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTR, port_num=PORT, path_mtu=e.IBV_MTU_1024)
    gid = ctx.query_gid(PORT, gid_index)
    a.ah_attr = v.addr.AHAttr(port_num=PORT, is_global=1,
                              gr=v.addr.GlobalRoute(dgid=gid, sgid_index=gid_index, hop_limit=64))
    a.dest_qp_num, a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer = dest_qp_num, rq_psn, max_dest_rd_atomic, min_rnr_timer
    return a


RTR_MASK = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
            | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
RTS_MASK = (e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
            | e.IBV_QP_MAX_QP_RD_ATOMIC)


def to_rtr(ctx, gid_index, qp, dest_qp_num, rq_psn=0, max_dest_rd_atomic=1):
    qp.modify(rtr_attr(ctx, gid_index, dest_qp_num, rq_psn, max_dest_rd_atomic=max_dest_rd_atomic), RTR_MASK)


# retry_cnt 7 is "retry for ever" on rxe (tests/conformance/test_errors.py, test_retry_cnt_7_retries_without_end)
# and on soft0. A test that waits out RNR NAKs takes it: rxe does not restart its ACK timer on an RNR NAK
# (docs/emulated-nic.md, "The ACK timer during RNR NAKs"), so with retry_cnt 1 a stall of the guest's
# CPU while the SEND waits can end it with RETRY_EXC_ERR; with 7 only rnr_retry can end it.
RETRY_FOREVER = 7


def to_rts(qp, sq_psn=0, rnr_retry=7, timeout=8, retry_cnt=1):
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = sq_psn, timeout, retry_cnt, rnr_retry, 1
    qp.modify(a, RTS_MASK)


class Pair:
    """Two RC QPs in one PD, each with its own CQ, connected to each other (loopback)."""

    def __init__(self, ctx, gid_index, pd, access_b=ALL_ACCESS, rnr_retry=7, sq_sig_all=1, cap=None,
                 connect=True, channel=None, max_dest_rd_atomic_b=1, retry_cnt=1):
        self.ctx, self.pd = ctx, pd
        self.cq_a, self.cq_b = v.cq.CQ(ctx, 64, None, channel, 0), v.cq.CQ(ctx, 64, None, channel, 0)
        cap = cap or v.qp.QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=2, max_recv_sge=2)

        def make(cq):
            return v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap,
                                               sq_sig_all=sq_sig_all))
        self.a, self.b = make(self.cq_a), make(self.cq_b)
        self.src = v.mr.MR(pd, 4096, ALL_ACCESS)
        self.dst = v.mr.MR(pd, 4096, ALL_ACCESS)
        if connect:
            to_init(self.a)
            to_init(self.b, access_b)
            to_rtr(ctx, gid_index, self.a, self.b.qp_num)
            to_rtr(ctx, gid_index, self.b, self.a.qp_num, max_dest_rd_atomic=max_dest_rd_atomic_b)
            to_rts(self.a, rnr_retry=rnr_retry, retry_cnt=retry_cnt)
            to_rts(self.b, rnr_retry=rnr_retry, retry_cnt=retry_cnt)

    def close(self):
        for obj in (self.a, self.b, self.src, self.dst, self.cq_a, self.cq_b):
            obj.close()


@pytest.fixture
def make_pair(ctx, gid_index, pd):
    made = []

    def factory(**kwargs):
        made.append(Pair(ctx, gid_index, pd, **kwargs))
        return made[-1]
    yield factory
    for p in made:
        observe("memory sha256 (src, dst)", [hashlib.sha256(mr.read(mr.length, 0)).hexdigest()[:16]
                                             for mr in (p.src, p.dst)])
        p.close()


def send_wr(mr, length, opcode, wr_id=1, flags=None, imm=0, offset=0, lkey=None):
    flags = e.IBV_SEND_SIGNALED if flags is None else flags
    sge = v.wr.SGE(mr.buf + offset, length, mr.lkey if lkey is None else lkey)
    return v.wr.SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge], send_flags=flags, imm_data=imm)


def recv_wr(mr, length, wr_id, offset=0, lkey=None):
    sge = v.wr.SGE(mr.buf + offset, length, mr.lkey if lkey is None else lkey)
    return v.wr.RecvWR(wr_id=wr_id, num_sge=1, sg=[sge])


def poll(cq, count=1, timeout=3.0):
    """Poll until `count` completions or `timeout` seconds; returns them as dicts."""
    found, deadline = [], time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        n, wcs = cq.poll(count - len(found))
        found += wcs
    found = [dict(wr_id=w.wr_id, status=w.status, opcode=w.opcode, byte_len=w.byte_len, imm_data=w.imm_data,
                  wc_flags=w.wc_flags, qp_num=w.qp_num) for w in found]
    observe("completions", [{k: c[k] for k in c if k != "qp_num"} for c in found])  # QP numbers differ by device
    return found


def states(qp):
    """(qp.qp_state before querying, the state query() reports)."""
    cached = qp.qp_state
    attr, _ = qp.query(e.IBV_QP_STATE)
    observe("qp_state (cached, queried)", [cached, attr.qp_state])
    return cached, attr.qp_state


def rdma_error(fn):
    """Run fn; return the PyverbsRDMAError's errno it raised (None if it raised nothing)."""
    try:
        fn()
        code = None
    except v.pyverbs_error.PyverbsRDMAError as error:
        code = error.error_code
    observe("errno", code)
    return code
