"""The glass-box view (lessons.nic_view): what it shows of a QP pair is what the pair holds, on soft0 from
its NIC's own state and on a real device from query_qp (it says what it cannot see); it redraws itself
while shown and stops, leaving no thread, once the QPs are closed."""
import threading
import time

import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.lessons.nic_view import NICView, queues

e = v.enums
SOFT = v.PROVIDER == "soft"




def send(pair, wr_id):
    pair.a.post_send(v.wr.SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                                 sg=[v.wr.SGE(pair.a_mr.buf, 8, pair.a_mr.lkey)]))


def test_the_view_shows_the_pair_connected_to_each_other(ctx_pd):
    with lessons.Pair(*ctx_pd) as pair:
        a, b = NICView(pair.a, pair.b).state()
        assert a["state"] == b["state"] == "RTS"
        assert (a["dest_qp_num"], b["dest_qp_num"]) == (pair.b.qp_num, pair.a.qp_num)
        assert a["sq_psn"] == b["rq_psn"] and b["sq_psn"] == a["rq_psn"]
        assert a["glass"] == SOFT
        text = str(NICView(pair.a, pair.b, names=["mine", "theirs"]))
        assert f"mine: QP {pair.a.qp_num:#x} in RTS, sends to QP {pair.b.qp_num:#x}" in text
        assert ("MR lkey" in text) if SOFT else ("a real NIC keeps its send and receive rings" in text)


@pytest.mark.skipif(not SOFT, reason="a real NIC's send and receive rings are in its own memory: query_qp "
                                     "does not show them (the view says so; the test above checks it)")
def test_on_soft0_the_rings_show_a_send_waiting_for_a_receive_then_the_completions(ctx_pd):
    with lessons.Pair(*ctx_pd, rnr_retry=7) as pair:
        view = NICView(pair.a, pair.b)
        send(pair, 1)
        send(pair, 2)
        a, b = view.state()
        assert a["send_waiting"] == [(1, "SEND", "waiting out an RNR NAK"), (2, "SEND", "queued behind the WR before it")]
        assert b["recv_posted"] == []
        send_slots, _ = queues(a)
        assert send_slots.count("waiting") == 2 and len(send_slots) == a["send_slots"]
        pair.b.post_recv(v.wr.RecvWR(wr_id=5, num_sge=1, sg=[v.wr.SGE(pair.b_mr.buf, 8, pair.b_mr.lkey)]))
        pair.b.post_recv(v.wr.RecvWR(wr_id=6, num_sge=1, sg=[v.wr.SGE(pair.b_mr.buf, 8, pair.b_mr.lkey)]))
        pair.b.post_recv(v.wr.RecvWR(wr_id=7, num_sge=1, sg=[v.wr.SGE(pair.b_mr.buf, 8, pair.b_mr.lkey)]))
        deadline = time.monotonic() + 10
        while view.state()[0]["send_waiting"] and time.monotonic() < deadline:
            pair.cq_a.poll(0)   # (polling the CQ lets the NIC retry once the RNR timer ran out)
            time.sleep(0.01)
        a, b = view.state()
        assert a["send_waiting"] == [] and a["send_cq"] == 2
        assert b["recv_posted"] == [7] and b["recv_completed"] == 2 and b["send_cq"] == 2
        _, receive_slots = queues(b)
        assert receive_slots[:4] == ["completed", "completed", "posted", "free"]
        assert {lkey for lkey, *_ in a["mrs"]} >= {pair.a_mr.lkey, pair.b_mr.lkey}


def test_a_shown_view_redraws_itself_and_stops_once_its_qps_are_closed(ctx_pd, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw: shown.append(bundle))
    before = {t.name for t in threading.enumerate()}
    with lessons.Pair(*ctx_pd) as pair:
        view = lessons.nic_view(pair.a, pair.b, interval=0.05)
        view._ipython_display_()
        first = view.widget.value
        assert "RTS" in first and f"QP {pair.a.qp_num:#x}" in first
        assert shown[0]["text/plain"].startswith(f"a: QP {pair.a.qp_num:#x} in RTS")   # without widgets: the text
        pair.a.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        deadline = time.monotonic() + 10
        while "ERR" not in view.widget.value and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "ERR" in view.widget.value   # redrawn by its own thread
    view.thread.join(10)
    assert not view.thread.is_alive() and "The view stopped" in view.widget.value
    assert {t.name for t in threading.enumerate()} - before == set()


def test_step_mode_walks_a_write_then_posts_it(ctx_pd):
    with lessons.Pair(*ctx_pd) as pair:
        w = v.wr.SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                        sg=[v.wr.SGE(pair.a_mr.buf, 8, pair.a_mr.lkey)])
        w.set_wr_rdma(pair.b_mr.rkey, pair.b_mr.buf)
        step = lessons.nic_view(pair.a, pair.b).step(w, pair.cq_a)
        names = [stage for stage, _, _ in step.stages]
        assert names == ["post_send", "requester checks", "packets", "responder", "answer", "completion"]
        assert all(passed is (True if SOFT else None) for *_, passed in step.stages)
        assert step.post().status == e.IBV_WC_SUCCESS
        assert ("as predicted" if SOFT else "nothing was predicted") in step.outcome()
