"""The checked challenges of lessons 03 (queue-pairs.queues) and 04 (two-sided.cm-client, two-sided.flow-control):
each accepts its reference, calls its skeleton "not yet", and rejects each plausible mistake with a message that
names it. (queue-pairs.to-rts is tested in test_exercises.py.) On soft0 and, in the Soft-RoCE guest, on rxe0."""
from rdmalab import verbs as v
from rdmalab.lessons import exercises
from rdmalab.lessons.checks import queue_pairs, two_sided

e = v.enums


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


# ---------------------------------------------------------------- queue-pairs.queues

def queues(ctx, pd, qp_type=None, send=8, recv=8, cqe=16, sge=1, to_init=False):
    """The reference's three lines with one thing changed."""
    cq = v.cq.CQ(ctx, cqe)
    cap = v.qp.QPCap(max_send_wr=send, max_recv_wr=recv, max_send_sge=sge, max_recv_sge=sge)
    init = v.qp.QPInitAttr(scq=cq, rcq=cq, cap=cap) if qp_type is None else \
        v.qp.QPInitAttr(qp_type=qp_type, scq=cq, rcq=cq, cap=cap)
    qp = v.qp.QP(pd, init)
    if to_init:
        a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        a.pkey_index, a.qp_access_flags = 0, e.IBV_ACCESS_LOCAL_WRITE
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    return cq, qp


def judge_queues(ctx, pd, made):
    try:
        return feedback("queue-pairs.queues", made, ctx, pd)
    finally:
        for obj in reversed(made if isinstance(made, tuple) else ()):
            obj.close()


def test_queues_the_reference_passes(ctx, pd):
    assert judge_queues(ctx, pd, queue_pairs._make_queues(ctx, pd)).passed


def test_queues_the_right_sizes_by_hand_pass(ctx, pd):
    assert judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_RC, send=8, recv=8, cqe=16)).passed


def test_queues_the_skeleton_is_not_yet(ctx, pd):
    assert feedback("queue-pairs.queues", None, ctx, pd).status == "not yet"


def test_queues_qp_type_left_out_is_named_ud(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd))   # QPInitAttr's default type: UD
    assert f.status == "wrong" and "UD (unreliable datagram" in f.message and "IBV_QPT_RC" in f.hint


def test_queues_a_uc_qp_is_named(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_UC))
    assert f.status == "wrong" and "UC (unreliable connected)" in f.message


def test_queues_a_send_queue_too_small_is_named(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_RC, send=4))   # 4 -> 7 granted: still short of 8
    assert f.status == "wrong" and "send queue holds 7" in f.message and "max_send_wr=8" in f.hint


def test_queues_a_receive_queue_too_small_is_named(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_RC, recv=2))
    assert f.status == "wrong" and "receive queue holds 3" in f.message and "max_recv_wr=8" in f.hint


def test_queues_a_cq_for_one_queue_only_is_named(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_RC, cqe=8))    # 8 -> 15: not the 16 both queues bring
    assert f.status == "wrong" and "the CQ holds 15 completions, fewer than the 16" in f.message
    assert "both queues" in f.hint


def test_queues_no_sge_is_named(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_RC, sge=0))
    assert f.status == "wrong" and "SGEs" in f.message


def test_queues_a_qp_moved_on_is_named(ctx, pd):
    f = judge_queues(ctx, pd, queues(ctx, pd, e.IBV_QPT_RC, to_init=True))
    assert f.status == "wrong" and "in INIT" in f.message and "RESET" in f.message


def test_queues_the_qp_alone_is_named(ctx, pd):
    cq, qp = queue_pairs._make_queues(ctx, pd)
    try:
        f = feedback("queue-pairs.queues", qp, ctx, pd)
        assert f.status == "wrong" and "return cq, qp" in f.message
        f = feedback("queue-pairs.queues", (qp, cq), ctx, pd)
        assert f.status == "wrong" and "the CQ first" in f.message
    finally:
        qp.close()
        cq.close()


# ---------------------------------------------------------------- two-sided.cm-client

def client(order=("post_recv", "connect", "post_send", "get_send_comp", "get_recv_comp", "read", "disconnect"),
           length="text", read="byte_len"):
    """An ask() that makes the reference's calls in `order`; `length`: what post_send gets ("text": len(text),
    None: no length=); `read`: how much of the answer it reads ("byte_len", or a number)."""
    ce = v.cm_enums

    def ask(cm, address, port, text):
        where = cm.AddrInfo(dst=address, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
        me = cm.CMID(creator=where, qp_init_attr=v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_recv_wr=1)))
        reply, msg = me.reg_msgs(64), me.reg_msgs(64)
        msg.write(text, len(text))
        answer, wc = None, None
        for step in order:
            if step == "post_recv":
                me.post_recv(reply)
            elif step == "connect":
                me.connect()
            elif step == "post_send":
                me.post_send(msg, length=len(text)) if length == "text" else me.post_send(msg)
            elif step == "get_send_comp":
                me.get_send_comp()
            elif step == "get_recv_comp":
                wc = me.get_recv_comp()
            elif step == "read":
                answer = reply.read(wc.byte_len if read == "byte_len" else read, 0)
            elif step == "disconnect":
                me.disconnect()
        me.close()
        return answer
    return ask


def judge_client(ask):
    return feedback("two-sided.cm-client", ask)


def test_cm_client_the_reference_passes_and_rdma_cm_swapped_the_numbers():
    assert judge_client(two_sided.ask).passed
    run = two_sided.cm_exchange(two_sided.ask)
    mine, theirs = run["mine"], run["theirs"]
    assert run["before"]["state"] == "INIT" and mine["state"] == theirs["state"] == "RTS"
    assert mine["dest QP"] == theirs["QP number"] and mine["rq_psn"] == theirs["sq_psn"]
    assert run["answer"] == b"HELLO, RDMA_CM" and run["error"] is None


def test_cm_client_the_skeleton_is_not_yet():
    def skeleton(cm, address, port, text):
        raise NotImplementedError

    def given_lines_only(cm, address, port, text):   # the lesson's skeleton: it makes the CMID and closes it
        ce = v.cm_enums
        where = cm.AddrInfo(dst=address, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
        me = cm.CMID(creator=where, qp_init_attr=v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_recv_wr=1)))
        reply, msg = me.reg_msgs(64), me.reg_msgs(64)
        msg.write(text, len(text))
        me.close()
        return None

    assert judge_client(skeleton).status == "not yet"
    f = judge_client(given_lines_only)
    assert f.status == "not yet" and "still the skeleton" in f.message


def test_cm_client_a_receive_posted_after_connect_is_named():
    f = judge_client(client(order=("connect", "post_recv", "post_send", "get_send_comp", "get_recv_comp", "read",
                                   "disconnect")))
    assert f.status == "wrong" and "posted the receive after connect()" in f.message and "RNR" in f.message
    assert "before me.connect()" in f.hint


def test_cm_client_a_receive_posted_after_the_send_is_named():
    f = judge_client(client(order=("connect", "post_send", "post_recv", "get_send_comp", "get_recv_comp", "read",
                                   "disconnect")))
    assert f.status == "wrong" and "posted the receive after your SEND" in f.message


def test_cm_client_no_receive_is_refused_at_once_not_waited_for():
    f = judge_client(client(order=("connect", "post_send", "get_send_comp", "get_recv_comp", "read", "disconnect")))
    assert f.status == "wrong" and "no receive is posted" in f.message and "never end" in f.message


def test_cm_client_waiting_for_the_answer_before_sending_is_refused_at_once():
    f = judge_client(client(order=("post_recv", "connect", "get_recv_comp", "post_send", "get_send_comp", "read",
                                   "disconnect")))
    assert f.status == "wrong" and "before SENDing" in f.message


def test_cm_client_a_send_before_connect_is_named():
    f = judge_client(client(order=("post_recv", "post_send", "connect", "get_send_comp", "get_recv_comp", "read",
                                   "disconnect")))
    assert f.status == "wrong" and "raised" in f.message and "only once connect() has returned" in f.message


def test_cm_client_the_whole_buffer_sent_is_named():
    f = judge_client(client(length=None))
    assert f.status == "wrong" and "you SENT 64 bytes, not the 14" in f.message and "length=len(text)" in f.hint


def test_cm_client_the_whole_buffer_read_is_named():
    f = judge_client(client(read=64))
    assert f.status == "wrong" and "you returned 64 bytes; the answer is 14" in f.message and "wc.byte_len" in f.hint


def test_cm_client_no_send_completion_is_named():
    f = judge_client(client(order=("post_recv", "connect", "post_send", "get_recv_comp", "read", "disconnect")))
    assert f.status == "wrong" and "never took the SEND's completion" in f.message


def test_cm_client_reading_without_the_receive_completion_is_named():
    def no_wait(cm, address, port, text):
        ce = v.cm_enums
        where = cm.AddrInfo(dst=address, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
        me = cm.CMID(creator=where, qp_init_attr=v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=v.qp.QPCap(max_recv_wr=1)))
        reply, msg = me.reg_msgs(64), me.reg_msgs(64)
        msg.write(text, len(text))
        me.post_recv(reply)
        me.connect()
        me.post_send(msg, length=len(text))
        me.get_send_comp()
        answer = reply.read(len(text), 0)
        me.disconnect()
        me.close()
        return answer

    f = judge_client(no_wait)
    assert f.status == "wrong" and "never took the answer's completion" in f.message


def test_cm_client_disconnecting_before_the_answer_or_without_sending_ends_and_is_named():
    f = judge_client(client(order=("connect", "post_send", "get_send_comp", "disconnect")))   # no receive, no wait
    assert f.status == "wrong" and "no post_recv() was called" in f.message
    f = judge_client(client(order=("post_recv", "connect", "disconnect")))
    assert f.status == "wrong" and "without having SENT the text" in f.message


def test_cm_client_no_disconnect_is_named():
    f = judge_client(client(order=("post_recv", "connect", "post_send", "get_send_comp", "get_recv_comp", "read")))
    assert f.status == "wrong" and "did not disconnect()" in f.message


# ---------------------------------------------------------------- two-sided.flow-control

def receiver(ahead=8, per_burst=True, size=64, shared=False, wait=True, send_first=False, bursts=4):
    """A receive_all that posts `ahead` receives (of `size` bytes; all at offset 0 if `shared`) before each burst
    (or only once, if not per_burst), sends first if `send_first`, and waits for each completion if `wait`."""
    from rdmalab.verbs import rc

    def post(qp, mr, i):
        offset = 0 if shared else 64 * i
        qp.post_recv(v.wr.RecvWR(wr_id=i, num_sge=1, sg=[v.wr.SGE(mr.buf + offset, size, mr.lkey)]))

    def receive_all(qp, cq, mr, peer_sends):
        got = []
        for burst in range(bursts):
            if send_first:
                peer_sends(8)
            if per_burst or burst == 0:
                for i in range(ahead):
                    post(qp, mr, i)
            if not send_first:
                peer_sends(8)
            for i in range(8):
                if wait:
                    wc = rc.wait_for_completion(cq)
                    got.append(mr.read(wc.byte_len, 0 if shared else 64 * wc.wr_id))
                else:
                    got.append(mr.read(64, 64 * i))
        return got
    return receive_all


def judge_flow(ctx, pd, fn):
    return feedback("two-sided.flow-control", fn, ctx, pd)


def test_flow_the_reference_passes(ctx, pd):
    assert judge_flow(ctx, pd, two_sided.receive_all).passed
    assert two_sided.receive_burst_run(two_sided.receive_all, ctx, pd) == {"messages": 32, "bursts": 4}


def test_flow_reposting_each_receive_as_it_completes_passes(ctx, pd):
    from rdmalab.verbs import rc

    def keep_posted(qp, cq, mr, peer_sends):
        def post(i):
            qp.post_recv(v.wr.RecvWR(wr_id=i, num_sge=1, sg=[v.wr.SGE(mr.buf + 64 * i, 64, mr.lkey)]))
        for i in range(8):
            post(i)
        got = []
        for _ in range(4):
            peer_sends(8)
            for _ in range(8):
                wc = rc.wait_for_completion(cq)
                got.append(mr.read(wc.byte_len, 64 * wc.wr_id))
                post(wc.wr_id)
        return got

    assert judge_flow(ctx, pd, keep_posted).passed


def test_flow_the_skeleton_is_not_yet(ctx, pd):
    def skeleton(qp, cq, mr, peer_sends):
        got = []
        return None

    def raises(qp, cq, mr, peer_sends):
        raise NotImplementedError

    assert judge_flow(ctx, pd, skeleton).status == "not yet"
    assert judge_flow(ctx, pd, raises).status == "not yet"


def test_flow_receives_posted_after_the_send_are_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(send_first=True))
    assert f.status == "wrong" and "message 0 of the peer's 32" in f.message
    assert "RNR_RETRY_EXC_ERR" in f.message and "before peer_sends(), never after" in f.message


def test_flow_too_few_receives_are_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(ahead=4))
    assert f.status == "wrong" and "message 4" in f.message
    assert "Only 4 receives were posted for a burst of 8" in f.message


def test_flow_receives_not_reposted_are_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(per_burst=False))
    assert f.status == "wrong" and "message 8" in f.message and "8 receives had been posted in all" in f.message
    assert "used up by the message it takes" in f.message


def test_flow_a_receive_too_small_is_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(size=8))   # as the RNR cell's 8-byte SGE, copied
    assert f.status == "wrong" and "message 0" in f.message
    assert "smaller than the 64-byte message" in f.message and "64, mr.lkey" in f.hint
    if v.PROVIDER == "soft":   # as rxe: REM_OP_ERR for the peer, LOC_QP_OP_ERR for the receive
        assert "REM_OP_ERR" in f.message and "LOC_QP_OP_ERR" in f.message


def test_flow_receives_sharing_one_buffer_are_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(shared=True))
    assert f.status == "wrong" and "message 0 came back as message 7's bytes" in f.message


def test_flow_completions_never_polled_are_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(wait=False))
    assert f.status == "wrong" and "receive completions were never taken" in f.message   # (soft0: 8, its queue full)


def test_flow_too_few_bursts_are_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(bursts=3))
    assert f.status == "wrong" and "the peer sent 24 of its 32 messages" in f.message


def test_flow_every_receive_posted_at_once_is_named(ctx, pd):
    f = judge_flow(ctx, pd, receiver(ahead=32, per_burst=False))   # the receive queue holds 15
    assert f.status == "wrong" and "not all 32 at once" in f.message


def test_flow_waiting_for_more_than_was_sent_is_named(ctx, pd):
    from rdmalab.verbs import rc

    def waits_twice(qp, cq, mr, peer_sends):
        got = []
        for i in range(8):
            qp.post_recv(v.wr.RecvWR(wr_id=i, num_sge=1, sg=[v.wr.SGE(mr.buf + 64 * i, 64, mr.lkey)]))
        peer_sends(8)
        for _ in range(9):
            got.append(rc.wait_for_completion(cq, timeout=0.5))
        return got

    f = judge_flow(ctx, pd, waits_twice)
    assert f.status == "wrong" and "a completion that never came" in f.message

