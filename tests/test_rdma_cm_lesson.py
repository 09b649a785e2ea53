"""Lesson 04's rdma_cm connection (lessons.CMPeer, lessons.qp_numbers), on soft0 and, in the Soft-RoCE
guest, on rxe0: the QP rdma_cm creates is in INIT, connect() brings it to RTS with the peer's QP number as
its destination and the PSNs crossed, a message goes through, and the peer process leaves nothing behind."""
import psutil
import pytest

from rdmalab import lessons
from rdmalab import verbs as v

e = v.enums


def connect(peer):
    cm, ce = v.cmid, v.cm_enums
    where = cm.AddrInfo(dst=peer.address, dst_service=str(peer.port), port_space=ce.RDMA_PS_TCP)
    me = cm.CMID(creator=where, qp_init_attr=v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_recv_wr=1)))
    return me


def test_rdma_cm_swaps_the_numbers_lesson_03_swaps_by_hand():
    with lessons.CMPeer() as peer:
        me = connect(peer)
        before = lessons.qp_numbers(me)
        reply = me.reg_msgs(64)
        me.post_recv(reply)
        me.connect()
        mine, theirs = lessons.qp_numbers(me), peer.report()
        msg = me.reg_msgs(64)
        msg.write(b"abc", 3)
        me.post_send(msg, length=3)
        assert me.get_send_comp().status == e.IBV_WC_SUCCESS
        wc = me.get_recv_comp()
        answered = reply.read(wc.byte_len, 0)
        me.disconnect()
        me.close()
        pid = peer.helper.pid
    assert before["state"] == "INIT" and before["dest QP"] == 0
    assert mine["state"] == theirs["state"] == "RTS"
    assert mine["dest QP"] == theirs["QP number"] and theirs["dest QP"] == mine["QP number"]
    assert mine["rq_psn"] == theirs["sq_psn"] and theirs["rq_psn"] == mine["sq_psn"]
    assert wc.status == e.IBV_WC_SUCCESS and answered == b"ABC"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_connection_to_a_port_nobody_listens_on_is_refused_clearly():
    with lessons.CMPeer() as peer:
        peer.port = peer.port + 1 if peer.port < 29999 else peer.port - 1   # (the peer listens on one port only)
        me = connect(peer)
        with pytest.raises(v.pyverbs_error.PyverbsRDMAError):
            me.connect()
        me.close()
