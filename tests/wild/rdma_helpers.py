"""Helpers that helper_user.py imports from beside it (`from rdma_helpers import ...`).

Shape: the way pyverbs projects split their setup into a module of their own next to the scripts
(Marovlo/easyPyverbs: easyContext.py / easyQP.py imported by easyPyverbs_server.py and
easyPyverbs_client.py; rdma-core's own tests/base.py + tests/utils.py imported by each test). Not a
program: it prints nothing and has no main. pyverbs <= 58 spelling (`from pyverbs.enums import *`,
as easyQP.py does).
"""
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.enums import *  # noqa: F401,F403 (the IBV_* names, as easyQP.py takes them)
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ  # noqa: F405


def open_first_device(port_num=1):
    """(context, gid_index): the first device and its first IPv4-mapped GID on port_num."""
    ctx = Context(name=get_device_list()[0].name.decode())
    for idx in range(ctx.query_port(port_num).gid_tbl_len):
        if ctx.query_gid(port_num, idx).gid.startswith('0000:0000:0000:0000:0000:ffff:'):
            return ctx, idx
    return ctx, 0


class Endpoint:
    """A PD, a CQ and an RC QP in INIT, as easyQP's baseQP keeps them."""

    def __init__(self, ctx, depth=16):
        self.ctx = ctx
        self.pd = PD(ctx)
        self.cq = CQ(ctx, depth)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=True)  # noqa: F405
        attr = QPAttr()
        attr.qp_access_flags = ACCESS
        self.qp = QP(self.pd, init, attr)


def make_qp(ctx):
    return Endpoint(ctx)


def connect_qps(ep, remote_qpn, remote_gid, gid_index, port_num=1):
    """Move ep.qp to RTS towards remote_qpn at remote_gid."""
    qa = QPAttr()
    qa.ah_attr = AHAttr(gr=GlobalRoute(dgid=remote_gid, sgid_index=gid_index), is_global=1, port_num=port_num)
    qa.dest_qp_num = remote_qpn
    qa.path_mtu = IBV_MTU_1024  # noqa: F405
    qa.max_rd_atomic = 1
    qa.max_dest_rd_atomic = 1
    qa.min_rnr_timer = 12
    qa.timeout = 14
    qa.retry_cnt = 7
    qa.rnr_retry = 7
    qa.qp_access_flags = ACCESS
    ep.qp.to_rts(qa)


def wait_completion(cq, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n, wcs = cq.poll()
        if n:
            if wcs[0].status != IBV_WC_SUCCESS:  # noqa: F405
                raise RuntimeError(f'completion status {wcs[0].status}')
            return wcs[0]
    raise RuntimeError(f'no completion within {timeout} s')
