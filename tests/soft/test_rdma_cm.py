"""soft0's rdma_cm (rdmalab.verbs.soft.cmid): addresses, the CM exchange and its events, the QPs it
moves, external QPs, UD and multicast, and what is left when a peer dies or everything is closed.

The two sides of a connection are two CM ids of this process, each on its own event channel: the CM
messages still travel over the listener's Unix socket, as between processes, and each side's events
come only when that side waits for them. One test puts the passive side in a process that is killed.
"""
import errno
import ipaddress
import multiprocessing
import os
import random
import threading

import pytest

from rdmalab.verbs.soft import cmid as cm, datagram, shm
from rdmalab.verbs.soft.cm import ip_of, listener_path, no_route
from rdmalab.verbs.soft.addr import AH
from rdmalab.verbs.soft.cq import CQ
from rdmalab.verbs.soft.device import Context
from rdmalab.verbs.soft.pd import PD
from rdmalab.verbs.soft.constants import (IBV_QP_TIMEOUT, IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                      IBV_QPT_RC, IBV_QPT_UD, IBV_SEND_SIGNALED,
                                      IBV_WC_RECV, IBV_WC_SEND, IBV_WC_SUCCESS)
from rdmalab.verbs.soft.librdmacm_enums import RAI_PASSIVE, rdma_cm_event_type as EV, rdma_port_space
from rdmalab.verbs.soft.pyverbs_error import PyverbsRDMAError
from rdmalab.verbs.soft.qp import QP, QPAttr, QPCap, QPInitAttr

TCP, UDP = rdma_port_space.RDMA_PS_TCP, rdma_port_space.RDMA_PS_UDP


@pytest.fixture
def port():
    return str(random.randint(20000, 30000))


def listeners():
    return {n for n in os.listdir(shm.directory()) if n.startswith(f"rdmalab-cm-{os.geteuid()}-")}


@pytest.fixture(autouse=True)
def nothing_left():
    """Every test closes what it made: then no segment of this process and no listener socket remains."""
    before, sockets = set(shm.leftovers(os.getpid())), listeners()
    yield
    assert set(shm.leftovers(os.getpid())) <= before
    assert listeners() <= sockets


def event(channel, expected=None):
    ev = cm.CMEvent(channel)
    if expected is not None:
        assert ev.event_str() == expected.name, ev.event_str()
    return ev


class Pair:
    """A listening id and an active id that resolved its route to it, each on its own channel."""

    def __init__(self, port, port_space=TCP):
        self.port_space = port_space
        self.pch, self.ach = cm.CMEventChannel(), cm.CMEventChannel()
        self.listen = cm.CMID(self.pch, port_space=port_space)
        self.listen.bind_addr(cm.AddrInfo(src="127.0.0.1", src_service=port, port_space=port_space, flags=RAI_PASSIVE))
        self.listen.listen()
        self.active = cm.CMID(self.ach, port_space=port_space)
        self.active.resolve_addr(cm.AddrInfo(src="127.0.0.1", dst="127.0.0.1", dst_service=port,
                                             port_space=port_space))
        event(self.ach, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
        self.active.resolve_route()
        event(self.ach, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
        self.child = None

    def qp_attr(self):
        qp_type = IBV_QPT_RC if self.port_space == TCP else IBV_QPT_UD
        return QPInitAttr(qp_type=qp_type, cap=QPCap(max_send_wr=4, max_recv_wr=4))

    def request(self, data=b""):
        param = cm.ConnParam(data_len=len(data))
        param.set_private_data(data)
        self.active.connect(param)
        ev = event(self.pch, EV.RDMA_CM_EVENT_CONNECT_REQUEST)
        self.child = cm.CMID(creator=ev, listen_id=self.listen)
        return ev

    def close(self):
        for thing in (self.child, self.active, self.listen, self.pch, self.ach):
            if thing is not None:
                thing.close()


@pytest.fixture
def pair(port):
    made = []

    def make(port_space=TCP):
        made.append(Pair(port, port_space))
        return made[-1]
    yield make
    for p in made:
        p.close()


def connect_rc(p, data=b"hello", answer=b"welcome"):
    """Private data arrives zero-padded to what each message carries (a REQ 56 bytes, a REP 196)."""
    p.active.create_qp(p.qp_attr())
    assert p.request(data).private_data == data.ljust(56, b"\0")
    p.child.create_qp(p.qp_attr())
    param = cm.ConnParam(data_len=len(answer))
    param.set_private_data(answer)
    p.child.accept(param)
    assert event(p.ach, EV.RDMA_CM_EVENT_ESTABLISHED).private_data == answer.ljust(196, b"\0")
    event(p.pch, EV.RDMA_CM_EVENT_ESTABLISHED)


def test_rc_connection_moves_both_qps_to_rts_and_carries_traffic(pair):
    p = pair()
    connect_rc(p)
    for side, peer in ((p.active, p.child), (p.child, p.active)):
        attr, _ = side.query_qp(IBV_QP_TIMEOUT)
        assert attr.qp_state == IBV_QPS_RTS and attr.dest_qp_num == peer.qpn
        assert attr.timeout == cm.ACK_TIMEOUT
    rx, tx = p.child.reg_msgs(64), p.active.reg_msgs(64)
    tx.write(b"x" * 64, 64)
    p.child.post_recv(rx)
    p.active.post_send(tx)
    assert p.active.get_send_comp().status == IBV_WC_SUCCESS
    wc = p.child.get_recv_comp()
    assert wc.status == IBV_WC_SUCCESS and wc.byte_len == 64 and rx.read(64, 0) == b"x" * 64
    # RDMA WRITE into the passive side's memory, granted by the access rdma_cm gave its QP
    target = p.child.reg_write(64)
    tx.write(b"w" * 64, 64)
    p.active.post_write(tx, 64, target.buf, target.rkey, flags=IBV_SEND_SIGNALED)
    assert p.active.get_send_comp().status == IBV_WC_SUCCESS and target.read(64, 0) == b"w" * 64
    # disconnect: the QP goes to ERR, the peer gets DISCONNECTED
    p.child.disconnect()
    assert p.child.query_qp(0)[0].qp_state == IBV_QPS_ERR
    event(p.ach, EV.RDMA_CM_EVENT_DISCONNECTED)
    p.active.disconnect()
    for mr in (rx, tx, target):
        mr.close()


def test_a_qp_made_by_the_id_has_a_send_cq_and_a_receive_cq_of_its_own(pair):
    # librdmacm's ucma_create_cqs makes one CQ for each queue qp_init leaves without: get_recv_comp()
    # waits on the receive CQ only, so a SEND's completion that came first is not taken for the answer
    p = pair()
    connect_rc(p)
    answer, question, rx, tx = (side.reg_msgs(64) for side in (p.active, p.active, p.child, p.child))
    p.active.post_recv(answer)
    p.child.post_recv(rx)
    question.write(b"q" * 8, 8)
    p.active.post_send(question, length=8)
    assert p.child.get_recv_comp().byte_len == 8
    tx.write(b"a" * 16, 16)
    p.child.post_send(tx, length=16)
    assert p.child.get_send_comp().status == IBV_WC_SUCCESS
    got = p.active.get_recv_comp()   # before the active side takes its SEND's completion
    assert (got.opcode, got.byte_len) == (IBV_WC_RECV, 16) and answer.read(16, 0) == b"a" * 16
    assert p.active.get_send_comp().opcode == IBV_WC_SEND
    for mr in (answer, question, rx, tx):
        mr.close()


def test_ack_timeout_option_reaches_the_qp(pair):
    p = pair()
    p.active.set_option(0, cm.RDMA_OPTION_ID_ACK_TIMEOUT, 21, 1)
    connect_rc(p)
    assert p.active.query_qp(IBV_QP_TIMEOUT)[0].timeout == 21
    assert p.child.query_qp(IBV_QP_TIMEOUT)[0].timeout == cm.ACK_TIMEOUT


def test_the_qps_get_what_each_side_asked(pair):
    """Retries as the REQ asks, RNR retries as the receiving peer asks, READ/atomic depths as the IB CM keeps them
    (rxe0, tests/wild/cm_negotiated_attrs.py: the passive side its accept()'s, the active side the REP's, the
    peer's responder resources as its initiator depth: no minimum taken), and READ/atomic access only for a side
    that answers READs."""
    from rdmalab.verbs.soft.constants import IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE
    p = pair()
    p.active.create_qp(p.qp_attr())
    p.active.connect(cm.ConnParam(resources=0, depth=4, retry=3, rnr_retry=6))
    p.child = cm.CMID(creator=event(p.pch, EV.RDMA_CM_EVENT_CONNECT_REQUEST), listen_id=p.listen)
    p.child.create_qp(p.qp_attr())
    p.child.accept(cm.ConnParam(resources=2, depth=2, rnr_retry=2))
    event(p.ach, EV.RDMA_CM_EVENT_ESTABLISHED)
    event(p.pch, EV.RDMA_CM_EVENT_ESTABLISHED)
    active, passive = p.active.query_qp(0)[0], p.child.query_qp(0)[0]
    assert (active.retry_cnt, active.rnr_retry, passive.retry_cnt, passive.rnr_retry) == (3, 2, 3, 6)
    assert (active.max_rd_atomic, active.max_dest_rd_atomic) == (2, 2)
    assert (passive.max_rd_atomic, passive.max_dest_rd_atomic) == (2, 2)
    # (the active side answers READs too: the REP's initiator depth of 2 is its responder resources)
    assert active.qp_access_flags == passive.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
                                                                | IBV_ACCESS_REMOTE_ATOMIC)


def test_reject_carries_its_private_data(pair):
    p = pair()
    p.active.create_qp(p.qp_attr())
    p.request()
    p.child.reject(b"go away")
    ev = event(p.ach, EV.RDMA_CM_EVENT_REJECTED)
    assert ev.private_data == b"go away".ljust(148, b"\0") and ev._status == cm.REJ_CONSUMER


def test_too_much_private_data_is_einval(pair):
    p = pair()
    p.active.create_qp(p.qp_attr())
    param = cm.ConnParam(data_len=57)
    param.set_private_data(b"x" * 57)
    with pytest.raises(PyverbsRDMAError) as error:
        p.active.connect(param)
    assert error.value.error_code == errno.EINVAL and p.active._state == "route_resolved"


def dial(port):
    """An active CM id that resolved 127.0.0.1:port and called connect(): (its channel, the id)."""
    ch = cm.CMEventChannel()
    active = cm.CMID(ch)
    active.resolve_addr(cm.AddrInfo(src="127.0.0.1", dst="127.0.0.1", dst_service=port))
    event(ch, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    active.resolve_route()
    event(ch, EV.RDMA_CM_EVENT_ROUTE_RESOLVED)
    active.connect()
    return ch, active


def test_nobody_listening_is_a_rejection(port):
    ch, _ = dial(port)
    assert event(ch, EV.RDMA_CM_EVENT_REJECTED)._status == cm.REJ_NO_LISTENER
    ch.close()


def test_addresses_of_no_soft0_interface_do_not_resolve(port):
    ch = cm.CMEventChannel()
    cmid = cm.CMID(ch)
    with pytest.raises(PyverbsRDMAError) as error:
        cmid.bind_addr(cm.AddrInfo(src="10.1.2.3", src_service=port, flags=RAI_PASSIVE))
    assert error.value.error_code == errno.EADDRNOTAVAIL
    unrouted = no_route(ipaddress.ip_address("10.1.2.3"))   # (this host's routing table decides, as rxe0's)
    if unrouted:   # no route there: refused at once, as the kernel's route lookup refuses it
        with pytest.raises(PyverbsRDMAError) as error:
            cmid.resolve_addr(cm.AddrInfo(src="127.0.0.1", dst="10.1.2.3", dst_service=port))
        assert error.value.error_code == unrouted == errno.ENETUNREACH
    else:          # a route, but not to soft0's netdev: the address does not resolve
        cmid.resolve_addr(cm.AddrInfo(src="127.0.0.1", dst="10.1.2.3", dst_service=port))
        assert event(ch, EV.RDMA_CM_EVENT_ADDR_ERROR)._status == -errno.EHOSTUNREACH
    with pytest.raises(PyverbsRDMAError) as error:   # a synchronous id says so at once
        cm.CMID(creator=cm.AddrInfo(src="127.0.0.1", dst="10.1.2.3", dst_service=port))
    assert error.value.error_code == (unrouted or errno.EHOSTUNREACH)
    ch.close()


def test_a_port_is_taken_until_its_id_closes_and_a_dead_listeners_socket_is_reused(port):
    ai = cm.AddrInfo(src="127.0.0.1", src_service=port, flags=RAI_PASSIVE)
    first, second = cm.CMID(cm.CMEventChannel()), cm.CMID(cm.CMEventChannel())
    first.bind_addr(ai)
    with pytest.raises(PyverbsRDMAError) as error:
        second.bind_addr(ai)
    assert error.value.error_code == errno.EADDRINUSE
    first._listener.close()   # as if its process died: the socket file stays, nobody answers
    assert shm.stale_socket(first._listener_path)
    second.bind_addr(ai)
    second.listen()
    first._listener = None
    for cmid in (first, second):
        cmid.event_channel.close()


def test_external_qp_is_moved_by_the_program_with_init_qp_attr(pair):
    p = pair()
    pd = p.active.pd
    cq = CQ(p.active.context, 8)
    ext = QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4)), QPAttr())
    with pytest.raises(PyverbsRDMAError) as error:   # RTR needs the peer's QP number and PSN
        p.active.init_qp_attr(IBV_QPS_RTR)
    assert error.value.error_code == errno.EINVAL
    p.active.connect(cm.ConnParam(qp_num=ext.qp_num))
    p.child = cm.CMID(creator=event(p.pch, EV.RDMA_CM_EVENT_CONNECT_REQUEST), listen_id=p.listen)
    p.child.create_qp(p.qp_attr())
    p.child.accept()
    event(p.ach, EV.RDMA_CM_EVENT_CONNECT_RESPONSE)
    for state in (IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS):
        attr, mask = p.active.init_qp_attr(state)
        ext.modify(attr, mask)
    p.active.establish()
    event(p.pch, EV.RDMA_CM_EVENT_ESTABLISHED)
    attr, _ = ext.query(0)
    assert attr.qp_state == IBV_QPS_RTS and attr.dest_qp_num == p.child.qpn
    assert p.child.query_qp(0)[0].dest_qp_num == ext.qp_num
    ext.close()
    cq.close()


def test_ud_connection_tells_the_active_side_where_to_send(pair):
    p = pair(UDP)
    p.active.create_qp(p.qp_attr())
    p.request()
    p.child.create_qp(p.qp_attr())
    p.child.accept()
    ev = event(p.ach, EV.RDMA_CM_EVENT_ESTABLISHED)
    ud = cm.UDParam(ev)
    assert ud.qp_num == p.child.qpn and ud.qkey == cm.RDMA_UDP_QKEY
    rx, tx = p.child.reg_msgs(40 + 32), p.active.reg_msgs(32)
    tx.write(b"u" * 32, 32)
    p.child.post_recv(rx)
    ah = AH(p.active.pd, attr=ud.ah_attr)
    p.active.post_ud_send(tx, ah, rqpn=ud.qp_num)
    p.active.get_send_comp()
    n, (wc,) = p.child._qp._recv_cq.poll()   # (soft0's sender delivered it before its send completed)
    assert n == 1 and wc.byte_len == 40 + 32 and wc.src_qp == p.active.qpn and rx.read(32, 40) == b"u" * 32
    for x in (ah, rx, tx):
        x.close()


def joined(group, channel):
    cmid = cm.CMID(channel, port_space=UDP)
    cmid.bind_addr(cm.AddrInfo(src="127.0.0.1", dst="127.0.0.1", port_space=UDP))
    cmid.resolve_addr(cm.AddrInfo(src="127.0.0.1", dst=group))
    event(channel, EV.RDMA_CM_EVENT_ADDR_RESOLVED)
    cmid.create_qp(QPInitAttr(qp_type=IBV_QPT_UD, cap=QPCap(4, 4)))
    cmid.join_multicast(cm.AddrInfo(src=group))
    return cmid, cm.UDParam(event(channel, EV.RDMA_CM_EVENT_MULTICAST_JOIN))


def test_multicast_reaches_every_member_until_it_leaves():
    assert Context(name="soft0").query_device().max_mcast_grp > 0
    group = f"230.{random.randint(0, 255)}.{random.randint(0, 255)}.7"
    ch = cm.CMEventChannel()
    sender, ud = joined(group, ch)
    members = [joined(group, ch)[0] for _ in range(2)]
    assert ud.qp_num == datagram.MULTICAST_QPN and ud.qkey == cm.RDMA_UDP_QKEY
    assert ud.ah_attr.dgid == str(cm.multicast_gid(ip_of(group)))
    assert sorted(datagram.members(ud.ah_attr.dgid)) == sorted(c.qpn for c in [sender] + members)
    tx = sender.reg_msgs(16)
    rx = [m.reg_msgs(40 + 16) for m in members]
    ah = AH(sender.pd, attr=ud.ah_attr)

    def send(fill):
        for m, buf in zip(members, rx):
            buf.write(b"\0" * 56, 56)
            m.post_recv(buf)
        tx.write(fill * 16, 16)
        sender.post_ud_send(tx, ah, rqpn=datagram.MULTICAST_QPN)
        sender.get_send_comp()
    # (soft0's sender delivers before its send completes: the receives are complete, or never will be)
    send(b"m")
    for m, buf in zip(members, rx):
        n, wcs = m._qp._recv_cq.poll()
        assert n == 1 and wcs[0].src_qp == sender.qpn and buf.read(16, 40) == b"m" * 16
    members[0].leave_multicast(cm.AddrInfo(src=group))
    with pytest.raises(PyverbsRDMAError) as error:
        members[0].leave_multicast(cm.AddrInfo(src=group))
    assert error.value.error_code == errno.EADDRNOTAVAIL
    send(b"n")
    n, wcs = members[1]._qp._recv_cq.poll()
    assert n == 1 and wcs[0].status == IBV_WC_SUCCESS and rx[1].read(16, 40) == b"n" * 16
    n, _ = members[0]._qp._recv_cq.poll()
    assert n == 0 and rx[0].read(16, 40) == b"\0" * 16   # the member that left got nothing
    for x in [ah, tx] + rx + members + [sender, ch]:
        x.close()
    assert datagram.members(ud.ah_attr.dgid) == []


def test_synchronous_ids_wait_for_each_step(port):
    """rdma_create_ep's ids: get_request() waits for a request, accept() for the RTU, connect() for the REP."""
    init = QPInitAttr(qp_type=IBV_QPT_RC, cap=QPCap(4, 4))
    listen = cm.CMID(creator=cm.AddrInfo(src="127.0.0.1", src_service=port, flags=RAI_PASSIVE), qp_init_attr=init)
    listen.listen()
    got = {}

    def passive():
        child = got["child"] = listen.get_request()
        child.accept()
    thread = threading.Thread(target=passive)
    thread.start()
    active = cm.CMID(creator=cm.AddrInfo(src="127.0.0.1", dst="127.0.0.1", dst_service=port), qp_init_attr=init)
    active.connect()
    thread.join(60)
    assert not thread.is_alive()
    child = got["child"]
    assert active.query_qp(0)[0].qp_state == IBV_QPS_RTS and child.query_qp(0)[0].qp_state == IBV_QPS_RTS
    for cmid in (child, active, listen):
        cmid.close()


def test_a_server_as_librdmacm_runs_it(port):
    """The shape of rdma-core's own CMID example: QPInitAttr without a qp_type (pyverbs' default is UD), an
    RC QP anyway (librdmacm takes the type from the AddrInfo's port space), PD(cmid), and an accepted id
    that keeps its PD, QP and MRs after the listener that made it is closed."""
    listen = cm.CMID(creator=cm.AddrInfo(src="127.0.0.1", src_service=port, flags=RAI_PASSIVE),
                     qp_init_attr=QPInitAttr(cap=QPCap(4, 4)))
    listen.listen()
    got = {}

    def serve_one_client_then_stop_listening():
        child = got["child"] = listen.get_request()
        got["recv"] = child.reg_msgs(16)
        child.post_recv(got["recv"])
        child.accept()
        listen.close()
    thread = threading.Thread(target=serve_one_client_then_stop_listening, daemon=True)   # (a failure must not hang)
    thread.start()
    init = QPInitAttr(cap=QPCap(4, 4))
    active = cm.CMID(creator=cm.AddrInfo(src="127.0.0.1", dst="127.0.0.1", dst_service=port), qp_init_attr=init)
    assert init.qp_type == IBV_QPT_RC and active._qp.qp_type == IBV_QPT_RC
    assert PD(active) is active.pd
    active.connect()
    thread.join(60)
    assert not thread.is_alive()
    child, recv = got["child"], got["recv"]
    assert child._qp.qp_type == IBV_QPT_RC and not child.pd.closed and not recv.closed   # the listener is gone
    send = active.reg_msgs(16)
    send.write(b"after the close", 15)
    active.post_send(send, length=15)
    assert active.get_send_comp().status == IBV_WC_SUCCESS
    wc = child.get_recv_comp()
    assert wc.status == IBV_WC_SUCCESS and recv.read(15, 0) == b"after the close"
    for cmid in (child, active):
        cmid.close()
    assert recv.closed and send.closed   # an id's reg_msgs() MRs close with it


def _listen_then_die(port, ready):
    ch = cm.CMEventChannel()
    listen = cm.CMID(ch)
    listen.bind_addr(cm.AddrInfo(src="127.0.0.1", src_service=port, flags=RAI_PASSIVE))
    listen.listen()
    ready.set()
    cm.CMEvent(ch)   # the request: then die without answering
    os.kill(os.getpid(), 9)


def test_a_peer_that_dies_ends_the_wait(port):
    ready = multiprocessing.get_context("fork").Event()
    peer = multiprocessing.get_context("fork").Process(target=_listen_then_die, args=(port, ready))
    peer.start()
    try:
        assert ready.wait(60)
        ch, _ = dial(port)
        assert event(ch, EV.RDMA_CM_EVENT_UNREACHABLE)._status == -errno.ETIMEDOUT
        ch.close()
    finally:
        peer.join(60)
        shm.reap_when_gone([peer.pid])
    assert not os.path.exists(listener_path(TCP, int(port)))   # the dead listener's socket was reaped


def test_an_mr_registered_with_a_cm_id_takes_its_pd_and_the_access_rdma_reg_gives(pair):
    """pyverbs' MR(cmid, length, access) registers through rdma_reg_msgs, _write or _read by the access asked for
    (each adding local write), in the id's PD; any other access registers nothing (PyverbsRDMAError)."""
    from rdmalab.verbs.soft.constants import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE
    from rdmalab.verbs.soft.mr import MR
    p = pair()
    connect_rc(p)
    mr = MR(p.active, 64, IBV_ACCESS_REMOTE_WRITE)
    assert mr._pd is p.active._pd and mr._access == IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE and mr.rkey
    assert MR(p.active, 64, IBV_ACCESS_REMOTE_READ)._access == IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ
    with pytest.raises(PyverbsRDMAError, match="Failed to register a MR"):
        MR(p.active, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
    with pytest.raises(PyverbsRDMAError, match="Failed to register a MR"):
        MR(p.active._ctx, 64, IBV_ACCESS_LOCAL_WRITE)
