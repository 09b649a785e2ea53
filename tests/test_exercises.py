"""Every exercise's check accepts its reference solution and rejects the typical wrong answers, saying why
(lessons.explain's sentence, where a completion failed)."""
import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.lessons import exercises
from rdmalab.lessons.checks.queue_pairs import _to_rts

e = v.enums
SOFT = v.PROVIDER == "soft"   # (soft0 explains a failure from its own checks; a real device infers)


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


def test_no_answer_yet_is_not_yet_with_a_hint():
    f = feedback("socket-path.predict", None)
    assert f.status == "not yet" and "write()s it once" in f.hint
    assert "reference solution" in str(f)


def test_the_welcome_skeleton_gets_a_nudge_not_the_answer():
    f = feedback("welcome.write", None)
    assert f.status == "not yet" and "the WRITE posted above" in f.hint
    assert "rkey" not in f.hint and "64" not in f.hint and "lkey" not in f.hint


def test_every_solution_is_shown_as_code_a_learner_could_write():
    import ast
    for name in exercises.REGISTRY:
        shown = exercises.solution_source(name)
        assert "@reference" not in shown and not shown.startswith("def _"), (name, shown[:80])
        assert isinstance(ast.parse(shown).body[0], ast.FunctionDef), name


def test_a_solution_is_shown_under_the_learners_own_function_name(capsys):
    def my_prediction():
        return None

    exercises.attempt("socket-path.predict", my_prediction)
    assert exercises.solution_source("socket-path.predict").startswith("def my_prediction():")
    assert exercises.solution_source("on-the-wire.packets").startswith("def my_packets(length, mtu):")


def test_a_prediction_is_shown_beside_the_measurement_and_never_fails(capsys):
    assert exercises.compare("sleeps per message", 3, 1.0, "why") == {"predicted": 3, "measured": 1.0}
    assert exercises.compare("sleeps per message", None, 1) == {"predicted": None, "measured": 1}
    shown = capsys.readouterr().out
    assert "you predicted 3, measured 1" in shown and "why" in shown and "you wrote no prediction" in shown
    exercises.compare("registering the largest buffer, in copies of it", None, 16.2, "why " * 40)
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 96   # a laptop's notebook: no wrap


def run_welcome(ctx, pd, write):
    """The welcome lesson's exercise as the lesson runs it: `write` posts on a fresh Pair, the check judges."""
    with lessons.Pair(ctx, pd) as pair:
        note = b"my first WRITE"
        pair.a_mr.write(note, len(note))
        args = (pair.a, pair.a_mr, len(note), pair.b_end)
        return feedback("welcome.write", write(*args), *args, pair)


def test_welcome_reference_write_lands_at_byte_64_and_the_peer_cq_stays_empty(ctx, pd):
    assert run_welcome(ctx, pd, exercises.REGISTRY["welcome.write"].reference).passed


def post_write(qp, sge, rkey, address, opcode=e.IBV_WR_RDMA_WRITE):
    request = v.wr.SendWR(wr_id=2, opcode=opcode, num_sge=1, sg=[sge])
    request.set_wr_rdma(rkey, address)
    qp.post_send(request)
    return request


def test_welcome_typical_wrong_writes_are_named(ctx, pd):
    def mine(mr, n):
        return v.wr.SGE(mr.buf, n, mr.lkey)

    wrong = {   # what a learner might post, and what the feedback must say
        "the lkey where the rkey belongs": (lambda qp, mr, n, remote: post_write(
            qp, mine(mr, n), mr.lkey, remote["addr"] + 64), "status 10", "remote['rkey']"),
        "the sender's own address": (lambda qp, mr, n, remote: post_write(
            qp, mine(mr, n), remote["rkey"], mr.buf + 64), "status 10", "remote['addr'] + 64"),
        "no offset": (lambda qp, mr, n, remote: post_write(
            qp, mine(mr, n), remote["rkey"], remote["addr"]), "not your message", "remote['addr'] + 64"),
        "a READ": (lambda qp, mr, n, remote: post_write(
            qp, mine(mr, n), remote["rkey"], remote["addr"] + 64, e.IBV_WR_RDMA_READ), "not an RDMA WRITE",
            "IBV_WR_RDMA_WRITE"),
        "built but not posted": (lambda qp, mr, n, remote: v.wr.SendWR(
            wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[mine(mr, n)]), "no completion", "post_send"),
    }
    for what, (write, message, hint) in wrong.items():
        f = run_welcome(ctx, pd, write)
        assert f.status == "wrong" and message in f.message and hint in f.hint, (what, f.message, f.hint)


def test_socket_path_prediction():
    assert feedback("socket-path.predict", exercises.REGISTRY["socket-path.predict"].reference()).passed
    right = {"writes": 100, "reads_at_least": 100, "bytes_copied": 13_107_200}
    for wrong, says in [({**right, "writes": 200}, "the echo is the server's write"),
                        ({**right, "reads_at_least": 1}, "at least one read() (a 64 KiB message may arrive in pieces"),
                        ({**right, "bytes_copied": 6_553_600}, "count both ways"),
                        (42, "answer with a dict")]:
        f = feedback("socket-path.predict", wrong)
        assert f.status == "wrong" and says in f.hint + f.message


def test_memory_registration_write_not_read(ctx, pd):
    ex = exercises.REGISTRY["memory-registration.write-not-read"]
    assert feedback("memory-registration.write-not-read", ex.reference(ctx, pd), ctx, pd).passed
    local_only = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    f = feedback("memory-registration.write-not-read", local_only, ctx, pd)
    assert f.status == "wrong" and "status 10" in f.message and "REMOTE_WRITE" in f.hint
    # and why, as lessons.explain says it: checked by soft0's NIC, or inferred on a real device
    assert ("the target's MR gives peers no access" in f.message) if SOFT else ("the target refused" in f.message)
    everything = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
    f = feedback("memory-registration.write-not-read", everything, ctx, pd)
    assert f.status == "wrong" and "could RDMA READ" in f.message
    atomic = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC)
    f = feedback("memory-registration.write-not-read", atomic, ctx, pd)   # a peer reads it 8 bytes at a time:
    # FETCH_AND_ADD of 0
    assert f.status == "wrong" and "b'weights!'" in f.message and "REMOTE_ATOMIC" in f.hint
    assert atomic.read(8, 0) == bytes(8)   # the check leaves the learner's buffer as it found it
    small = v.mr.MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    assert "register at least 4096" in feedback("memory-registration.write-not-read", small, ctx, pd).message


def test_memory_registration_code_that_raises_gets_feedback_and_the_lesson_goes_on(ctx, pd, capsys):
    def remote_write_alone(ctx, pd):   # the kernel refuses REMOTE_WRITE without LOCAL_WRITE: errno 22
        return v.mr.MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)

    mr = exercises.attempt("memory-registration.write-not-read", remote_write_alone, ctx, pd)
    shown = capsys.readouterr().out
    assert "[wrong]" in shown and "raised PyverbsRDMAError" in shown and "errno 22" in shown
    assert mr.rkey != 0   # the reference solution's MR, so later cells work


def run_03(ctx, pd, bring_up, then_reference=False):
    lab = lessons.QPLab(ctx, pd)
    try:
        bring_up(lab.qp, lab.local, lab.remote, lab.route)
        f = feedback("queue-pairs.to-rts", lab.qp, lab.qp, lab.local, lab.remote, lab.route, lab)
        if then_reference:   # what attempt() does after a wrong answer: the lesson goes on with the reference
            _to_rts(lab.qp, lab.local, lab.remote, lab.route)
            f.after = lab.send_and_receive(b"after", timeout=5).status
        return f
    finally:
        lab.close()


def test_queue_pairs_reference_brings_the_qp_to_rts_and_a_send_arrives(ctx, pd):
    assert run_03(ctx, pd, _to_rts).passed


def test_queue_pairs_endpoints_carry_the_lid_and_the_address_vector_follows_the_link_layer(ctx, pd):
    from rdmalab.verbs import rc
    lab = lessons.QPLab(ctx, pd)
    try:
        assert {"qp_num", "psn", "gid", "lid", "rkey", "addr"} <= set(lab.local) and "lid" in lab.remote
        ib = type(lab.route)(lab.route.device, lab.route.port, 0, lab.route.gid, lab.route.path_mtu,
                             e.IBV_LINK_LAYER_INFINIBAND)
        by_lid = rc.address_vector(ib, {**lab.remote, "lid": 7})
        by_gid = rc.address_vector(lab.route, lab.remote)
        assert (by_lid.is_global, by_lid.dlid) == (0, 7)
        assert by_gid.is_global == (lab.route.link_layer != e.IBV_LINK_LAYER_INFINIBAND)
    finally:
        lab.close()


def test_queue_pairs_stopping_at_rtr_is_named(ctx, pd):
    def only_to_rtr(qp, local, remote, route):
        _to_rts(qp, local, remote, route)
        qp.modify(v.qp.QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        rc_to_rtr(qp, local, remote, route)

    f = run_03(ctx, pd, only_to_rtr)
    assert f.status == "wrong" and "in RTR" in f.message and "one more modify, to RTS" in f.hint


ALL_REMOTE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def rc_to_rtr(qp, local, remote, route, access=e.IBV_ACCESS_LOCAL_WRITE, rq_psn=None, max_dest_rd_atomic=1):
    a = v.qp.QPAttr(qp_state=e.IBV_QPS_INIT, port_num=route.port)
    a.pkey_index, a.qp_access_flags = 0, access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    r = v.qp.QPAttr(qp_state=e.IBV_QPS_RTR, port_num=route.port, path_mtu=route.path_mtu)
    from rdmalab.verbs import rc
    r.ah_attr = rc.address_vector(route, remote)
    r.dest_qp_num, r.rq_psn = remote["qp_num"], remote["psn"] if rq_psn is None else rq_psn
    r.max_dest_rd_atomic, r.min_rnr_timer = max_dest_rd_atomic, 12
    qp.modify(r, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
              | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)


def to_rts_with(**wrong):
    """The reference's three steps with one attribute wrong (rc_to_rtr's keywords)."""
    def bring_up(qp, local, remote, route):
        rc_to_rtr(qp, local, remote, route, **{"access": ALL_REMOTE, **wrong})
        a = v.qp.QPAttr(qp_state=e.IBV_QPS_RTS)
        a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = local["psn"], 14, 7, 7, 1
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                  | e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
    return bring_up


def test_queue_pairs_the_right_attributes_pass_by_hand_too(ctx, pd):
    assert run_03(ctx, pd, to_rts_with()).passed


def test_queue_pairs_a_wrong_psn_means_nobody_answers(ctx, pd):
    def wrong_psn(qp, local, remote, route):
        _to_rts(qp, {**local, "psn": (local["psn"] + 1) % (1 << 24)}, remote, route)

    f = run_03(ctx, pd, wrong_psn)
    assert f.status == "wrong" and "sq_psn is local['psn']" in f.hint
    assert "status 12" in f.message or "never completed" in f.message   # rxe may retry for longer than the check waits


def test_queue_pairs_the_wrong_peer_is_named(ctx, pd):
    def wrong_peer(qp, local, remote, route):
        _to_rts(qp, local, {**remote, "qp_num": remote["qp_num"] ^ 1}, route)

    f = run_03(ctx, pd, wrong_peer)
    assert f.status == "wrong" and "not to the peer's" in f.message


def test_queue_pairs_a_wrong_rq_psn_fails_the_peers_send(ctx, pd):
    f = run_03(ctx, pd, lambda qp, local, remote, route: to_rts_with(rq_psn=(remote["psn"] + 1000) % (1 << 24))(
        qp, local, remote, route), then_reference=True)
    assert f.status == "wrong" and "a SEND from the peer" in f.message and "rq_psn must be remote['psn']" in f.hint
    assert f.after == e.IBV_WC_SUCCESS   # the check reconnected the peer: the lesson goes on
    if SOFT:
        assert "did not take the packets: their PSN is not the one it expects" in f.message


def test_queue_pairs_access_flags_without_remote_write_fail_the_peers_write(ctx, pd):
    f = run_03(ctx, pd, to_rts_with(access=e.IBV_ACCESS_LOCAL_WRITE), then_reference=True)
    assert f.status == "wrong" and "an RDMA WRITE from the peer" in f.message and "REMOTE_WRITE" in f.hint
    assert f.after == e.IBV_WC_SUCCESS
    if SOFT:   # explained from your QP's own state
        assert "qp_access_flags are LOCAL_WRITE: an RDMA WRITE needs REMOTE_WRITE there too" in f.message


def test_queue_pairs_no_remote_read_fails_the_peers_read(ctx, pd):
    f = run_03(ctx, pd, to_rts_with(access=e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE))
    assert f.status == "wrong" and "an RDMA READ" in f.message and "REMOTE_READ" in f.hint


def test_queue_pairs_max_dest_rd_atomic_0_is_refused(ctx, pd):
    f = run_03(ctx, pd, to_rts_with(max_dest_rd_atomic=0), then_reference=True)
    assert f.status == "wrong" and "max_dest_rd_atomic" in f.message + f.hint   # the failed READ
    assert f.after == e.IBV_WC_SUCCESS
    if SOFT:
        assert "the target QP has max_dest_rd_atomic 0" in f.message


@pytest.fixture
def frozen_target(ctx, pd):
    """Lesson 05's setting: a target process connected to our QP, and post() as the lesson defines it."""
    from rdmalab.lessons.target import RemoteBuffer
    from rdmalab.verbs import rc
    cq = v.cq.CQ(ctx, 16)
    qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(8, 2), sq_sig_all=0))
    local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    target = RemoteBuffer()
    mine = rc.endpoint(ctx, qp, local)
    rc.connect(ctx, qp, mine, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
    target.connect(mine)

    from rdmalab.lessons import freeze
    post = freeze.poster(qp, local, target)
    yield (post, cq, local, target), qp
    target.close()
    for obj in (qp, local, cq):
        obj.close()


def frozen(steps):
    """A learner's experiment, step by step: "stop", "continue", "write", "read", "add" (each posted), "poll",
    "read_local" (the READ's and the atomic's bytes), "push" (non-blocking until it would block), "push_blocking",
    "push_once", "push_counting_chunks"; it returns what the reference returns, from what it did."""
    import os
    import signal
    from rdmalab.verbs import rc
    ops = {"write": (e.IBV_WR_RDMA_WRITE, 64, 1024, 0), "read": (e.IBV_WR_RDMA_READ, 64, 1024, 64),
           "add": (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 3072, 128)}

    def experiment(pid, post, cq, local, sock):
        found = {"statuses": [], "tcp_bytes": 0, "read_back": None, "old_counter": None}
        for step in steps:
            if step in ("stop", "continue"):
                os.kill(pid, signal.SIGSTOP if step == "stop" else signal.SIGCONT)
            elif step in ops:
                post(*ops[step])
            elif step == "poll":
                found["statuses"].append(rc.wait_for_completion(cq).status)
            elif step == "claim":
                found["statuses"] = [0, 0, 0]
            elif step == "read_local":
                found["read_back"] = local.read(64, 64)
                found["old_counter"] = int.from_bytes(local.read(8, 128), "little")
            elif step.startswith("push"):
                chunk = bytes(10 ** 6 if step == "push_counting_chunks" else 65536)
                if step != "push_blocking":
                    sock.setblocking(False)
                try:
                    while True:
                        took = sock.send(chunk)
                        found["tcp_bytes"] += len(chunk) if step == "push_counting_chunks" else took
                        if step == "push_once":
                            break
                except BlockingIOError:
                    pass
        return found
    return experiment


RIGHT = ["stop", "write", "poll", "read", "poll", "add", "poll", "read_local", "push", "continue"]


def test_one_sided_freeze_the_reference_passes_and_leaves_the_target_running(frozen_target):
    from rdmalab.proc import procstat
    args, qp = frozen_target
    ex = exercises.REGISTRY["one-sided.freeze"]
    assert feedback("one-sided.freeze", ex.reference(), *args).passed
    assert feedback("one-sided.freeze", frozen(RIGHT), *args).passed
    assert procstat.stat_fields(args[3].pid)[0] != "T" and lessons.state_of(qp) == "RTS"


def test_one_sided_freeze_names_each_plausible_mistake(frozen_target):
    """Each wrong experiment is named for what it got wrong, and leaves the target running and the QP usable
    (the check continues the target whatever the function did, and polls what it left unpolled)."""
    from rdmalab.proc import procstat
    args, qp = frozen_target

    def without(*left_out, then=RIGHT):
        return [s for s in then if s not in left_out]

    def skeleton(pid, post, cq, local, sock):
        raise NotImplementedError
    assert feedback("one-sided.freeze", skeleton, *args).status == "not yet"
    cases = [
        (without("stop"), "not stopped, when you posted the WRITE"),                       # never stopped
        (["stop", "continue"] + without("stop", "continue") + ["continue"], "not stopped, when you posted"),
        (["stop", "write", "poll", "continue"] + RIGHT[3:], "you continued it before this post"),
        (["stop", "write", "read", "add", "claim", "read_local", "push", "continue"], "polled 0 completions"),
        (["stop", "write", "poll", "read", "read_local", "poll", "add", "poll", "push", "continue"],
         "before polling the READ's completion"),
        (["stop", "read", "poll", "write", "poll", "add", "poll", "read_local", "push", "continue"],
         "posted before the WRITE"),
        (RIGHT[:5] + RIGHT[7:], "no FETCH_AND_ADD was posted"),
        (RIGHT[:-2] + ["push_blocking", "continue"], "blocked for"),                         # hangs, but not here
        (RIGHT[:-2] + ["push_once", "continue"], "you stopped sending after"),
        (RIGHT[:-2] + ["push_counting_chunks", "continue"], "the kernel took"),
        (["stop", "continue"] + RIGHT[1:-1] + ["continue"], "not stopped"),
        (without("continue"), "still stopped when your function returned"),
    ]
    for steps, says in cases:
        f = feedback("one-sided.freeze", frozen(steps), *args)
        assert f.status == "wrong" and says in f.message, (steps, f.message)
        assert procstat.stat_fields(args[3].pid)[0] != "T", steps      # never a stopped process left behind
    assert lessons.state_of(qp) == "RTS" and qp is not None
    assert feedback("one-sided.freeze", frozen(RIGHT), *args).passed   # and the lesson goes on


# The ring AllReduce lesson's exercises (allreduce): the step schedule, and the learner's ring as a notebook defines
# it (its module is __main__, so the check runs it as the ranks would: without the notebook's names, imports
# inside). The naive AllReduce's are in tests/test_exercises_naive_allreduce.py.

def ring(send=lambda r, s, p: (r - s) % p, add=lambda r, s, p: (r - s - 1) % p, slot=lambda s: s,
         read_first=False, forward=False, all_gather=True, wait_first=False, flush=True, itemsize=None,
         view=None, extra_wait=False, gather=lambda r, s, p: (r + 1 - s) % p, leftwards=False, read_at=None,
         wait_for="left", skip_wait=None):
    """The reference ring with one decision changed: which chunk goes in step s, which one what arrives is added
    to, which stage slot step s uses, whether a rank reads the slot before its wait(), whether it forwards what
    it received, whether there is an all-gather at all, whether it waits before its first put, whether it
    flushes before returning, a hard-coded element size or dtype for the stage, one wait too many; where it
    reads step s's slot (read_at(s, slot bytes, bytes of the chunk it adds)); which neighbour it waits for; a
    wait it leaves out (skip_wait=(rank, call): its last, in that call)."""
    def my_ring(comm, x):
        import numpy as np
        p, r = comm.size, comm.rank
        call = getattr(comm, "calls", 0)
        comm.calls = call + 1
        right, left = (r + 1) % p, (r - 1) % p
        if leftwards:   # the same steps, round the other way
            right, left = left, right
        waits_for = left if wait_for == "left" else right
        bounds = np.linspace(0, x.size, p + 1).astype(int)
        item = itemsize or x.itemsize
        size = int(max(np.diff(bounds))) * item
        stage = comm.t.buffer("stage")
        if wait_first:
            comm.t.wait(waits_for)
        for s in range(p - 1):
            c, at = send(r, s, p), slot(s) * size
            if forward and s > 0:   # what arrived in step s - 1, as it arrived
                src = stage[slot(s - 1) * size:slot(s - 1) * size + (bounds[c + 1] - bounds[c]) * x.itemsize]
            else:
                src = x[bounds[c]:bounds[c + 1]]
            comm.t.put(right, src, "stage", at)
            if not read_first:
                comm.t.wait(waits_for)
            c = add(r, s, p)
            n = (bounds[c + 1] - bounds[c]) * x.itemsize
            at = read_at(s, size, n) if read_at else at
            got = stage[at:at + n].view(view or x.dtype)
            x[bounds[c]:bounds[c + 1]] += got[:bounds[c + 1] - bounds[c]]
            if read_first:
                comm.t.wait(waits_for)
        for s in range(p - 1 if all_gather else 0):
            c = gather(r, s, p)
            comm.t.put(right, x[bounds[c]:bounds[c + 1]], "data", int(bounds[c]) * x.itemsize)
            if not (skip_wait == (r, call) and s == p - 2):
                comm.t.wait(waits_for)
        if extra_wait:
            comm.t.wait(waits_for)
        if flush:
            comm.t.flush()
    my_ring.__module__ = "__main__"
    return my_ring


def notebook(fn):
    fn.__module__ = "__main__"
    return fn


@notebook
def my_naive(comm, x):
    """The reference naive AllReduce, as a learner writes it (a wrong ring)."""
    p, r = comm.size, comm.rank
    if r == 0:
        stage = comm.t.buffer("stage")
        for peer in range(1, p):
            comm.t.wait(peer)
            slot = (peer - 1) * x.nbytes
            x += stage[slot:slot + x.nbytes].view(x.dtype)
        for peer in range(1, p):
            comm.t.put(peer, x, "data", 0)
    else:
        comm.t.put(0, x, "stage", (r - 1) * x.nbytes)
        comm.t.wait(0)
    comm.t.flush()


def by_hand(ring_fn=None):
    return feedback("allreduce.ring", ring_fn or ring())


def test_allreduce_ring_the_reference_passes_on_2_to_5_ranks_and_a_skeleton_is_not_yet():
    from rdmalab.lessons import checking
    from rdmalab.lessons.checks.allreduce import RingJudge
    ring_fn = exercises.REGISTRY["allreduce.ring"].reference()
    assert feedback("allreduce.ring", ring_fn).passed
    assert by_hand().passed   # ring() unchanged: the reference, as a learner writes it
    for ranks in (2, 3, 4, 5):
        for dtype, count in (("float32", 1003), ("int32", 5), ("float64", 1), ("int64", 7)):
            RingJudge("ring")(checking.run(ring_fn, ranks, count, dtype, seed=ranks, library=False))   # raises Wrong
    assert {p for p, _, _ in checking.CASES} == {2, 3, 4, 5}
    assert {"float64", "int64"} <= {dtype for _, dtype, _ in checking.CASES}

    @notebook
    def skeleton(comm, x):
        for s in range(comm.size - 1):
            ...
        comm.t.flush()

    @notebook
    def not_written(comm, x):
        raise NotImplementedError

    for answer in (skeleton, not_written):
        assert feedback("allreduce.ring", answer).status == "not yet"
    assert "no put yet" in feedback("allreduce.ring", skeleton).message
    assert "your ring alone" in feedback("allreduce.ring", (my_naive, ring_fn)).message   # the old exercise's answer


def test_allreduce_ring_rejects_each_plausible_wrong_ring_and_says_what_was_wrong():
    @notebook
    def uses_the_notebooks_numpy(comm, x):
        return np.linspace(0, x.size, comm.size + 1)   # noqa: F821 (the notebook's np: not on the ranks)

    for wrong, says, hint in [
            (ring(slot=lambda s: 0), "rank 0's put of reduce-scatter step 1 landed on bytes 0 to 12 of rank 1's stage "
             "before rank 1 had used what rank 0's put of reduce-scatter step 0 left there", "its own slot"),
            (ring(read_first=True), "poisoned elements: bytes used before their flag had landed", "after wait()"),
            (ring(send=lambda r, s, p: (r + s) % p), "in reduce-scatter step 1, rank 0 sent chunk 1; in step s a "
             "rank sends chunk (r - s) % p, here 2", ""),
            (ring(add=lambda r, s, p: (r - s) % p), "what arrives is added to the wrong one", ""),
            (ring(all_gather=False), "no all-gather", ""),
            (ring(forward=True), "rank 1 sent what it had received (bytes of its stage)", ""),
            (ring(wait_first=True), "deadlocked: every rank waited for another and none had put anything for it: "
             "rank 0 waited for rank 2; rank 1 waited for rank 0; rank 2 waited for rank 1. Rank 0 waited before its "
             "first put", "put first"),
            (my_naive, "the sums are right, but rank 0 put to ranks 1, 2: in a ring each rank writes to one "
             "neighbour only", ""),
            (uses_the_notebooks_numpy, "raised NameError", "import what it needs"),
            (ring(read_at=lambda s, slot, n: s * n), "from bytes nobody ever put: rank 2 read bytes of its stage "
             "that no put wrote, in any call (puts to it landed on bytes 0 to 8 and 12 to 20 only)", "s x (bytes of "
             "the largest chunk)"),
            (ring(wait_for="right"), "deadlocked: every rank waited for another and none had put anything for it: "
             "rank 0 waited for rank 1; rank 1 waited for rank 2; rank 2 waited for rank 0. Counted per pair: in the "
             "first call, rank 1 put to rank 0 never, and rank 0 waited for rank 1 once", "each wait() one put"),
    ]:
        f = by_hand(wrong)
        assert f.status == "wrong" and says in f.message and hint in f.hint, (says, f.message, f.hint)
        assert f.message.startswith("your ring (on 3 ranks, 7 float32 elements)"), f.message


def test_allreduce_ring_rejects_eight_more_plausible_wrong_rings_each_named():
    """Mistakes a checker that copied a put's source at once, ran only 4-byte elements on at most 4 ranks, never
    compared the ranks' bits, let the library's AllReduce in and counted waits by rank alone, took for right or
    named elsewhere (issue 47)."""
    @notebook
    def calls_the_librarys_ring(comm, x):
        from rdmalab.allreduce.algorithms import ring_allreduce
        ring_allreduce(comm, x)

    @notebook
    def calls_comm_allreduce(comm, x):
        comm.allreduce(x)

    @notebook
    def sums_in_its_own_order(comm, x):   # every rank gathers every x, then adds them starting from its own
        p, r = comm.size, comm.rank
        stage = comm.t.buffer("stage")
        for peer in range(p):
            if peer != r:
                comm.t.put(peer, x, "stage", (r - peer - 1) % p * x.nbytes)
        for peer in range(p):
            if peer != r:
                comm.t.wait(peer)
        total = x.copy()
        for k in range(1, p):
            total += stage[(k - 1) * x.nbytes:k * x.nbytes].view(x.dtype)
        comm.t.flush()
        x[:] = total
        comm.barrier()

    import numpy as np
    cases = [
        (ring(flush=False), "changed the bytes its put of all-gather step 0 sent (data bytes 8 to 16) after it "
         "returned", "flush()"),
        (calls_the_librarys_ring, "calls the library's AllReduce (ring_allreduce)", ""),
        (calls_comm_allreduce, "calls the library's AllReduce (allreduce)", ""),
        (ring(extra_wait=True), "deadlocked: every rank waited for another and none had put anything for it: rank 0 "
         "waited for rank 2; rank 1 waited for rank 0; rank 2 waited for rank 1. Counted per pair: in the first call, "
         "rank 2 put to rank 0 4 times, and rank 0 waited for rank 2 5 times", "Every rank had put before it waited"),
        (sums_in_its_own_order, "differs from rank 0's in the last bits", ""),
        (ring(itemsize=4), "5 ranks, 1003 float64 elements", ""),
        (ring(view=np.float32), "int32 elements", ""),
        (ring(leftwards=True), "your ring (on 3 ranks, 7 float32 elements)", ""),
        (ring(gather=lambda r, s, p: (r - s) % p), "in all-gather step 0, rank 0 sent chunk 0", ""),
        (ring(skip_wait=(1, 0)), "rank 1 returned while rank 0's put of all-gather step 1 was still on its way to it: "
         "nothing waited for its flag, so nothing said its bytes had landed (in the first call, rank 0 put to rank 1 "
         "4 times, and rank 1 waited for rank 0 3 times)", "one wait() on the rank it goes to"),
    ]
    for ring_fn, says, hint in cases:
        f = by_hand(ring_fn)
        assert f.status == "wrong" and says in f.message and hint in f.hint, (says, f.message, f.hint)


def test_allreduce_bytes_nobody_ever_put_are_named_so_not_as_used_before_their_flag():
    """Poison in a result is traced: bytes read before their flag stay poison when the bytes no put ever wrote
    are zeroed, bytes nobody ever put do not; each is named as what it is, whatever the seed."""
    from rdmalab.lessons import checking
    from rdmalab.lessons.checks.allreduce import RingJudge
    never, early = ring(read_at=lambda s, slot, n: s * n), ring(read_first=True)
    for seed in range(4):
        run = checking.run(never, 3, 7, "float32", seed, library=False)
        assert run.never_put[2, "stage"][8:12].all() and not run.never_put[2, "stage"][:8].any()
        with pytest.raises(exercises.Wrong, match="from bytes nobody ever put: rank 2 read") as said:
            RingJudge("ring")(run)
        assert "before their flag" not in str(said.value)
        with pytest.raises(exercises.Wrong, match="bytes used before their flag had landed") as said:
            RingJudge("ring")(checking.run(early, 3, 7, "float32", seed, library=False))
        assert "nobody ever put" not in str(said.value)


def test_allreduce_checking_counts_puts_and_waits_per_sender_target_and_call():
    from rdmalab.lessons import checking
    run = checking.run(ring(skip_wait=(1, 0)), 3, 7, "int32", 0)
    assert run.sent[0, 1, 0] == run.sent[0, 1, 1] == 4 and run.waited[0, 1, 0] == 3 and run.waited[0, 1, 1] == 4
    assert run.waited[1, 2, 0] == 4 and run.sent[1, 0, 0] == 0
    assert checking.counted(run, 0, 1, 0) == ("in the first call, rank 0 put to rank 1 4 times, and rank 1 waited "
                                              "for rank 0 3 times")
    run = checking.run(ring(), 2, 7, "int32", 0)
    assert dict(run.sent) == dict(run.waited) == {(0, 1, 0): 2, (1, 0, 0): 2, (0, 1, 1): 2, (1, 0, 1): 2}


def test_allreduce_checking_transport_names_a_shared_slot_whatever_the_seed():
    """The overwrite is found by what each rank had heard (vector clocks), not by the threads' timing."""
    from rdmalab.lessons import checking
    for seed in range(20):
        run = checking.run(ring(slot=lambda s: 0), 3, 7, "int32", seed)
        assert run.overwrite is not None and run.overwrite.put.index == 1, (seed, run.overwrite)
        assert checking.run(ring(), 3, 7, "int32", seed).overwrite is None


def test_allreduce_schedule_passes_any_schedule_that_sums_every_chunk_and_names_each_off_by_one():
    name = "allreduce.schedule"
    assert feedback(name, exercises.REGISTRY[name].reference()).passed
    shifted = lambda p, r, s: ((r - s + 1) % p, (r - s) % p, (r + 2 - s) % p)   # noqa: E731 (every chunk one on)
    assert feedback(name, shifted).passed   # a ring too

    def schedule(send="(r - s) % p", add="(r - s - 1) % p", gather="(r + 1 - s) % p"):
        return eval(f"lambda p, r, s: ({send}, {add}, {gather})")

    assert feedback(name, lambda p, r, s: (None, None, None)).status == "not yet"
    assert feedback(name, lambda p, r, s: None).status == "not yet"
    for wrong, says in [
            (schedule(send="(r + s) % p"), "rank 0's send in step 1 is chunk 1; the chunk it sends in reduce-scatter "
             "step s is (r - s) % p, here 2: it goes round the wrong way"),
            (schedule(send="(r - s - 1) % p"), "that is the chunk it adds to in step s"),
            (schedule(send="r"), "the same chunk every step"),
            (schedule(send="s"), "every rank sends the same chunk in a step"),
            (schedule(add="(r - s) % p"), "rank 0's add in step 0 is chunk 0; the chunk it adds what arrives to is "
             "(r - s - 1) % p, here 2: that is the chunk it sends in step s"),
            (schedule(add="(r + s + 1) % p"), "it goes round the wrong way"),
            (schedule(add="(r - 1) % p"), "the same chunk every step"),
            (schedule(gather="(r - s) % p"), "all-gather starts from chunk r, which is not finished on rank r"),
            (schedule(gather="(r + 1 + s) % p"), "rank 0's gather in step 1 is chunk 2; the chunk it sends in "
             "all-gather step s is (r + 1 - s) % p, here 0: it goes round the wrong way"),
            (schedule(gather="(r - s - 1) % p"), "chunk r - 1 is finished on rank r - 2"),
            (schedule(gather="(r + 1) % p"), "the same chunk every step"),
            (schedule(send="r - s"), "send is -1 for p=3, r=0, s=1: chunks are numbered 0 to 2, so wrap it with % p"),
            (lambda p, r, s: [(r - s) % p, (r - s - 1) % p], "return three chunk numbers"),
            (lambda p, r, s: ((r - s) / p, 0, 0), "a chunk is a whole number"),
            (7, "lambda: my_schedule"),
    ]:
        f = feedback(name, wrong)
        assert f.status == "wrong" and says in f.message, (says, f.message)


def test_scaling_out_fit_finds_the_costs_and_names_each_plausible_slip():
    """The learner's least-squares fit is given times made exactly from known costs; the reference finds
    them, and each plausible wrong fit is rejected with what was wrong."""
    import numpy as np
    from rdmalab.lessons.checks import scaling_out
    name = "scaling-out.fit"
    ref = exercises.REGISTRY[name].reference()
    assert feedback(name, ref).passed

    def slipped(*slips):
        return lambda ring, add, p, turns: scaling_out.fitted(ring, add, p, turns, slips)

    def swapped(ring, add, p, turns):   # the columns (bytes sent, messages, bytes reduced), read as alpha, beta
        rows = [[turns * 2 * (p - 1) / p * n, turns * 2 * (p - 1), turns * (p - 1) / p * n] for n in ring]
        rows += [[0, 0, n] for n in add]
        return np.linalg.lstsq(np.array(rows), np.array([*ring.values(), *add.values()]), rcond=None)[0]

    def skeleton(ring, add, p, turns):
        rows, seconds = [], []
        for n, t in ring.items():
            ...
        return None

    for wrong, says in [(slipped("factors"), "lack the (p-1)/p factors"),
                        (slipped("messages once"), "alpha is counted once"),
                        (slipped("messages p-1"), "counted p-1 times"),
                        (slipped("turns"), "the turns are not counted"),
                        (slipped("no add"), "numpy's add times are left out"),
                        (slipped("one size"), "one ring size only"),
                        (slipped("one small size"), "one ring size only"),
                        (slipped("factors", "messages once"), "factors: each rank sends"),
                        (swapped, "alpha and beta are in each other's place"),
                        (lambda r, a, p, t: (-ref(r, a, p, t)[0], *ref(r, a, p, t)[1:]), "alpha came out negative"),
                        (lambda r, a, p, t: tuple(2 * c for c in ref(r, a, p, t)), "not what the times were made"),
                        (lambda r, a, p, t: r[1], "raised KeyError"),
                        (lambda r, a, p, t: (1.0, 2.0), "three numbers, not 2"),
                        (3, "lambda: my_fit")]:
        f = feedback(name, wrong)
        assert f.status == "wrong" and says in f.message, (says, f.message)
    f = feedback(name, slipped("factors", "messages once"))
    assert "alpha is counted once" in f.message
    assert feedback(name, skeleton).status == "not yet"


def test_scaling_out_feeds_the_cluster_model_with_the_socket_path_lessons_copies(tmp_path, monkeypatch):
    from rdmalab.allreduce import model
    from rdmalab.lessons import evidence, scaling, series
    monkeypatch.setattr(evidence, "EVIDENCE_FILE", str(tmp_path / "evidence.json"))
    monkeypatch.setattr(evidence, "LEARNER_DIR", str(tmp_path))
    monkeypatch.setattr(model, "copy_rate", lambda: 8e9)
    assert "assumed" in str(scaling.inputs(scaling.your_numbers()))   # lesson 01 not run: the kernel's two copies
    evidence.record("socket-path", tcp_copies_per_byte=2.5)
    numbers = scaling.your_numbers()
    assert numbers["copies"] == 2.5
    assert f"counted in lesson {series.number('socket-path')}" in str(scaling.inputs(numbers))
    assert 1 / scaling.networks(numbers)["400 GbE TCP"].beta == pytest.approx(8e9 / 2.5)


def test_posting_small_queue(ctx, pd):
    """The reference posts 64 WRITEs through 16 slots with 8 completions; each typical slip is stopped
    where it happens, by the hardware's rule (soft0 and rxe would let some of them through)."""
    from rdmalab.lessons.checks import posting
    ex = exercises.REGISTRY["posting.small-queue"]
    assert feedback("posting.small-queue", ex.reference(), ctx, pd).passed
    assert posting.post_through_small_queue(ex.reference(), ctx, pd) == {
        "writes": 64, "completions": 8, "most_held": 16, "depth": 16}

    def never_signals_but_the_last(post, wait, count, depth):
        for i in range(count):
            post(i, i == count - 1)
        wait()

    def waits_twice_per_signal(post, wait, count, depth):
        for i in range(count):
            post(i, i % 8 == 7)
            if i % 8 == 7:
                wait()
                wait()

    def signals_every_write(post, wait, count, depth):
        for i in range(count):
            post(i, True)
            wait()

    def leaves_the_tail_unconfirmed(post, wait, count, depth):
        for i in range(count):
            post(i, i % 8 == 7 and i < 56)
            if i % 8 == 7 and i < 56:
                wait()

    def skips_one(post, wait, count, depth):
        post(1, True)

    def not_written(post, wait, count, depth):
        raise NotImplementedError

    for wrong, says in [(never_signals_but_the_last, "WRITE 16 overruns the send queue"),
                        (waits_twice_per_signal, "this wait would never end"),
                        (signals_every_write, "64 completions for 64 WRITEs"),
                        (leaves_the_tail_unconfirmed, "WRITEs 56 to 63 were never confirmed"),
                        (skips_one, "in order"),
                        ("8", "answer with a function")]:
        f = feedback("posting.small-queue", wrong, ctx, pd)
        assert f.status == "wrong" and says in f.message, (wrong, f.message)
    assert feedback("posting.small-queue", not_written, ctx, pd).status == "not yet"


def test_on_the_wire_packets_reference_matches_what_rxe_sent():
    from rdmalab.lessons import packets
    ex = exercises.REGISTRY["on-the-wire.packets"]
    assert feedback("on-the-wire.packets", ex.reference()).passed
    sent = [(c.packet.info.name.rsplit(" ", 1)[-1].lower(), len(c.packet.payload)) for c in packets.capture()[:10]]
    assert ex.reference()(10240, 1024) == sent


def test_on_the_wire_packets_typical_wrong_answers_are_named():
    def floor_division(length, mtu):      # forgets the partial last packet
        n = max(1, length // mtu)
        return [("only", length)] if n == 1 else [("first", mtu)] + [("middle", mtu)] * (n - 2) + [("last", mtu)]

    def no_packet_for_nothing(length, mtu):   # a zero-length WRITE still sends one packet
        if length == 0:
            return []
        return exercises.REGISTRY["on-the-wire.packets"].reference()(length, mtu)

    def all_middle(length, mtu):
        n = max(1, -(-length // mtu))
        return [("middle", min(mtu, length - i * mtu)) for i in range(n)]

    def last_full(length, mtu):
        n = max(1, -(-length // mtu))
        return [("only", length)] if n == 1 else [("first", mtu)] + [("middle", mtu)] * (n - 2) + [("last", mtu)]

    for wrong, says in ((floor_division, "10000 bytes at MTU 4096 takes 3 packets; you predicted 2"),
                        (no_packet_for_nothing, "0 bytes at MTU 1024 takes 1 packet; you predicted 0"),
                        (all_middle, "packet 1 of 10 is 'first', not 'middle'"),
                        (last_full, "packet 3 carries 1808 bytes, not 4096"),
                        (lambda length, mtu: length, "return a list of (kind, payload bytes) pairs")):
        f = feedback("on-the-wire.packets", wrong)
        assert f.status == "wrong" and says in f.message, (wrong, f.message)
        assert "ceil(n / mtu)" in f.hint

    def skeleton(length, mtu):
        raise NotImplementedError
    f = feedback("on-the-wire.packets", skeleton)
    # a check's own "not yet" reads as every other: "no answer yet", then what to write (not a tuple's repr)
    assert f.status == "not yet" and f.message == "no answer yet: write my_packets(length, mtu)", f.message


def test_when_it_breaks_diagnosis_rejects_each_plausible_wrong_cause_with_its_evidence():
    from rdmalab.lessons.checks.when_it_breaks import ANSWER, CAUSES, WHY_NOT
    assert feedback("when-it-breaks.diagnose", dict(ANSWER)).passed
    assert feedback("when-it-breaks.diagnose", None).status == "not yet"
    for (key, wrong), why in WHY_NOT.items():
        f = feedback("when-it-breaks.diagnose", {**ANSWER, key: wrong})
        assert f.status == "wrong" and f.message.startswith(f"{key} is not {wrong!r}") and why in f.message
    f = feedback("when-it-breaks.diagnose", {**ANSWER, "B": "cosmic rays"})
    assert f.status == "wrong" and all(cause in f.message for cause in CAUSES)
    assert feedback("when-it-breaks.diagnose", ["wrong address"]).status == "wrong"


def test_allreduce_poison_left_by_the_next_calls_put_is_named_as_that_put():
    """A second call's put that lands on bytes the first call has not added yet poisons the first call's sums
    when the pace allows: the feedback names the put, not the poison."""
    @notebook
    def gathers_without_a_barrier(comm, x):
        p, r = comm.size, comm.rank
        stage = comm.t.buffer("stage")
        for peer in range(p):
            if peer != r:
                comm.t.put(peer, x, "stage", (r - peer - 1) % p * x.nbytes)
        for peer in range(p):
            if peer != r:
                comm.t.wait(peer)
        for k in range(1, p):
            x += stage[(k - 1) * x.nbytes:k * x.nbytes].view(x.dtype)
        comm.t.flush()

    from rdmalab.lessons import checking
    for seed in range(6):
        run = checking.run(gathers_without_a_barrier, 3, 7, "float32", seed, library=False)
        with pytest.raises(exercises.Wrong) as said:
            checking.Judge("AllReduce")(run)
        assert "poison" not in str(said.value), str(said.value)
        assert str(said.value).startswith("Called a second time") or "in the last bits" in str(said.value)
