"""librdmacm's rdma_verbs.h for soft0's CM ids: the data path in one call each (register, post, wait for a
completion) on a CM id's own PD and QP, which a program may use instead of pyverbs' MR, SendWR and CQ.poll. CMID
(cmid.py) has these methods through RdmaVerbs, as librdmacm keeps them apart from rdma_cma.h's connection calls."""
import errno
import time

from .base import typed
from .cm import RDMA_UDP_QKEY, error
from .constants import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_SEND_SIGNALED,
                        IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND)
from .mr import MR
from .wr import SGE, RecvWR, SendWR


class RdmaVerbs:
    """What a CM id adds to the verbs (rdma_reg_msgs, rdma_post_send, rdma_get_send_comp, ...): it reads the id's
    `_pd`, `_qp` and `_mrs` (the MRs its reg_* made, closed with it)."""

    def _register(self, size, access):
        """An MR on the id's PD that closes with the id (pyverbs' CMID keeps the MRs its reg_* made)."""
        mr = MR(self._pd, size, access)
        self._mrs.append(mr)
        return mr

    def reg_msgs(self, size):
        return self._register(size, IBV_ACCESS_LOCAL_WRITE)

    def reg_read(self, size=0):
        return self._register(size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)

    def reg_write(self, size=0):
        return self._register(size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

    def _own_qp(self):
        if self._qp is None:
            raise error("The CM id has no QP (create_qp)", errno.EINVAL)
        return self._qp

    def post_recv(self, mr, length=None):
        typed(mr, MR, "mr", none=False)
        self._own_qp().post_recv(RecvWR(0, 1, [SGE(mr.buf, length or mr.length, mr.lkey)]))

    def post_send(self, mr, flags=IBV_SEND_SIGNALED, length=None):
        typed(mr, MR, "mr", none=False)
        self._own_qp().post_send(SendWR(0, IBV_WR_SEND, 1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)],
                                    send_flags=flags))

    def _post_rdma(self, opcode, mr, length, remote_addr, rkey, flags):
        wr = SendWR(0, opcode, 1, sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        wr.set_wr_rdma(rkey, remote_addr)
        self._own_qp().post_send(wr)

    def post_read(self, mr, length, remote_addr, rkey, flags=0):
        typed(mr, MR, "mr", none=False)
        self._post_rdma(IBV_WR_RDMA_READ, mr, length, remote_addr, rkey, flags)

    def post_write(self, mr, length, remote_addr, rkey, flags=0):
        typed(mr, MR, "mr", none=False)
        self._post_rdma(IBV_WR_RDMA_WRITE, mr, length, remote_addr, rkey, flags)

    def post_ud_send(self, mr, ah, rqpn=0, flags=IBV_SEND_SIGNALED, length=None):
        typed(mr, MR, "mr", none=False)
        wr = SendWR(0, IBV_WR_SEND, 1, sg=[SGE(mr.buf, length or mr.length, mr.lkey)], send_flags=flags)
        wr.set_wr_ud(ah, rqpn, RDMA_UDP_QKEY)
        self._own_qp().post_send(wr)

    def get_recv_comp(self):
        return self._completion(self._own_qp()._recv_cq)

    def get_send_comp(self):
        return self._completion(self._own_qp()._send_cq)

    @staticmethod
    def _completion(cq):
        """Wait for the CQ's next completion as rdma_get_*_comp does: poll; arm; poll again; sleep on the
        completion channel until the event."""
        while True:
            n, wcs = cq.poll()
            if n:
                return wcs[0]
            if cq.comp_channel is None:
                time.sleep(0.001)
                continue
            cq.req_notify()
            n, wcs = cq.poll()
            if n:
                return wcs[0]
            cq.comp_channel.get_cq_event(cq)
            cq.ack_events(1)
