"""The second checked challenge of lessons 00, 01, 02 and 07 (welcome.read-back, socket-path.receiver-costs,
memory-registration.your-buffer, posting.one-doorbell): each check accepts its reference, calls the skeleton
"not yet", and rejects each plausible mistake with feedback that names it."""
import mmap

import numpy as np
import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.lessons import exercises
from rdmalab.verbs import rc

e = v.enums


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


def assert_named(f, message, hint=""):
    assert f.status == "wrong" and message in f.message and hint in f.hint, (f.status, f.message, f.hint)


# ---------------------------------------------------------------- welcome.read-back

def read_back(opcode=e.IBV_WR_RDMA_READ, rkey=None, offset=64, mr=None, local_offset=0, wait=True, post=True):
    """A learner's READ, right or with one slip: `rkey` a function of (back_mr, remote), `mr` where the SGE points."""
    def my_read_back(qp, cq, back_mr, length, remote):
        into = mr or back_mr
        sge = v.wr.SGE(into.buf + local_offset, length, into.lkey)
        request = v.wr.SendWR(wr_id=3, opcode=opcode, num_sge=1, sg=[sge])
        request.set_wr_rdma(remote["rkey"] if rkey is None else rkey(back_mr, remote), remote["addr"] + offset)
        if post:
            qp.post_send(request)
        if wait:
            rc.wait_for_completion(cq)
        return back_mr.read(length, 0)
    return my_read_back


def test_welcome_read_back_reference_passes_and_the_skeleton_is_not_yet(ctx, pd):
    ex = exercises.REGISTRY["welcome.read-back"]
    assert feedback("welcome.read-back", ex.reference(), ctx, pd).passed
    assert feedback("welcome.read-back", read_back(), ctx, pd).passed

    def my_read_back(qp, cq, back_mr, length, remote):
        return None
    f = feedback("welcome.read-back", my_read_back, ctx, pd)
    assert f.status == "not yet" and "nothing was posted yet" in f.message
    shown = exercises.solution_source("welcome.read-back")
    assert shown.startswith("def my_read_back(qp, cq, back_mr, length, remote):")


def test_welcome_read_back_names_each_plausible_mistake(ctx, pd):
    with v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE) as elsewhere:
        wrong = [
            (read_back(rkey=lambda back_mr, remote: back_mr.lkey), "refused it: status 10", "remote['rkey']"),
            (read_back(offset=0), "the bytes at the start of the peer's buffer", "remote['addr'] + 64"),
            (read_back(mr=elsewhere), "back_mr is unchanged", "back_mr.lkey"),
            (read_back(local_offset=64), "landed at byte 64 of back_mr", "set_wr_rdma"),
            (read_back(opcode=e.IBV_WR_RDMA_WRITE), "completed as an RDMA WRITE", "IBV_WR_RDMA_READ"),
            (read_back(wait=False), "did not wait for the READ's completion", "rc.wait_for_completion(cq)"),
            (read_back(post=False, wait=False), "nothing was posted", "post_send"),
        ]
        for answer, message, hint in wrong:
            assert_named(feedback("welcome.read-back", answer, ctx, pd), message, hint)

    def swapped_keys(qp, cq, back_mr, length, remote):   # the peer's rkey in the SGE: the local NIC refuses
        sge = v.wr.SGE(back_mr.buf, length, remote["rkey"])
        request = v.wr.SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[sge])
        request.set_wr_rdma(remote["rkey"], remote["addr"] + 64)
        qp.post_send(request)
        rc.wait_for_completion(cq)
        return back_mr.read(length, 0)

    def returns_the_request(qp, cq, back_mr, length, remote):
        read_back()(qp, cq, back_mr, length, remote)
        return "done"

    assert_named(feedback("welcome.read-back", swapped_keys, ctx, pd), "your own NIC refused the SGE", "back_mr.lkey")
    assert_named(feedback("welcome.read-back", returns_the_request, ctx, pd), "returned 'done'", "back_mr.read")
    assert_named(feedback("welcome.read-back", "my_read_back", ctx, pd), "answer with your function")


def test_welcome_read_back_feedback_after_a_wrong_answer_lets_the_lesson_go_on(ctx, pd, capsys):
    got = exercises.attempt("welcome.read-back", lambda: read_back(offset=0), check_args=(ctx, pd))
    assert "the start of the peer's buffer" in capsys.readouterr().out
    with lessons.Pair(ctx, pd) as pair, v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE) as back_mr:
        pair.b_mr.write(b"x" * 64 + b"hello", 69)
        assert got(pair.a, pair.cq_a, back_mr, 5, pair.b_end) == b"hello"   # the reference, as the lesson goes on


# ---------------------------------------------------------------- socket-path.receiver-costs

def costs(reads, copies):
    def my_receiver_costs(row):
        n, size = row["iterations"], row["size"]
        sender, receiver = row["initiator"], row["target"]
        return reads(n, size, sender, receiver, row), copies(n, size, sender, receiver, row)
    return my_receiver_costs


RIGHT_READS = lambda n, size, s, r, row: r["read_syscalls"] / n                              # noqa: E731
RIGHT_COPIES = lambda n, size, s, r, row: (s["bytes_written"] + r["bytes_read"]) / (n * size)  # noqa: E731


def test_socket_path_receiver_costs_reference_and_skeleton():
    from rdmalab.lessons.checks import socket_path
    ex = exercises.REGISTRY["socket-path.receiver-costs"]
    assert feedback("socket-path.receiver-costs", ex.reference()).passed
    assert feedback("socket-path.receiver-costs", costs(RIGHT_READS, RIGHT_COPIES)).passed
    assert ex.reference()(socket_path.ROWS["stream"]) == (16.0, 2.0)

    def my_receiver_costs(row):
        sender, receiver = row["initiator"], row["target"]   # noqa: F841 (the lesson's skeleton gives this line)
        return None
    assert feedback("socket-path.receiver-costs", my_receiver_costs).status == "not yet"


def test_socket_path_receiver_costs_names_each_slip():
    wrong = [   # (reads, copies, what the feedback must say)
        (lambda n, size, s, r, row: s["read_syscalls"] / n, RIGHT_COPIES, "the sender's counters"),
        (lambda n, size, s, r, row: s["write_syscalls"] / n, RIGHT_COPIES, "the sender's counters"),
        (lambda n, size, s, r, row: (r["read_syscalls"] + r["write_syscalls"]) / n, RIGHT_COPIES,
         "the echo, its reply"),
        (lambda n, size, s, r, row: r["read_syscalls"] / (n * size), RIGHT_COPIES, "that is per byte"),
        (lambda n, size, s, r, row: r["read_syscalls"], RIGHT_COPIES, "the whole run's count"),
        (RIGHT_READS, lambda n, size, s, r, row: (s["bytes_written"] + r["bytes_read"]) / n, "bytes per message"),
        (RIGHT_READS, lambda n, size, s, r, row: row["bytes_copied_by_cpu"] / (n * size), "the echo is counted"),
        (RIGHT_READS, lambda n, size, s, r, row: r["bytes_read"] / (n * size), "only one copy is counted"),
        (RIGHT_READS, lambda n, size, s, r, row: (r["bytes_read"] + r["bytes_written"]) / (n * size),
         "only one copy is counted"),
        (RIGHT_READS, lambda n, size, s, r, row: s["bytes_written"] + r["bytes_read"], "the whole run's bytes"),
        (RIGHT_READS, lambda n, size, s, r, row: 2.5, "copies = 2.5 is not it"),
    ]
    for reads, copies, says in wrong:
        f = feedback("socket-path.receiver-costs", costs(reads, copies))
        assert f.status == "wrong" and says in f.message, (says, f.message)
    assert "return two numbers" in feedback("socket-path.receiver-costs", lambda row: 2.0).message
    assert "answer with your function" in feedback("socket-path.receiver-costs", (1.0, 2.0)).message


# ---------------------------------------------------------------- memory-registration.your-buffer

@pytest.fixture
def weights():
    w = np.frombuffer(mmap.mmap(-1, 4096), np.float32)
    w[:] = np.arange(1024)
    return w


def register(access, length=None, address=True):
    def my_share(pd, weights):
        size = weights.nbytes if length is None else length(weights)
        if address:
            return v.mr.MR(pd, size, access, address=weights.ctypes.data)
        return v.mr.MR(pd, size, access)
    return my_share


def share(pd, weights, ctx, my_share):
    """The exercise as the lesson runs it: the learner's MR, then the check (which deregisters a wrong one)."""
    mr = my_share(pd, weights)
    f = feedback("memory-registration.your-buffer", mr, pd, weights, ctx)
    if f.passed:
        mr.close()
    return f


def test_memory_registration_your_buffer_reference_and_skeleton(ctx, pd, weights):
    ex = exercises.REGISTRY["memory-registration.your-buffer"]
    assert share(pd, weights, ctx, ex.reference).passed
    assert share(pd, weights, ctx, register(e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE)).passed
    assert feedback("memory-registration.your-buffer", None, pd, weights, ctx).status == "not yet"
    assert np.array_equal(weights, np.arange(1024, dtype=np.float32)), "the probes leave the weights as they were"


def test_memory_registration_your_buffer_names_each_slip(ctx, pd, weights):
    read, write, atomic, local = (e.IBV_ACCESS_REMOTE_READ, e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_ATOMIC,
                                  e.IBV_ACCESS_LOCAL_WRITE)
    wrong = [
        (register(read, address=False), "a new buffer pyverbs allocated", "address=weights.ctypes.data"),
        (register(read, length=len), "len() counts elements", "weights.nbytes"),
        (register(read, length=lambda w: 1024 + 512), "covers 1536 of the weights' 4096 bytes", "weights.nbytes"),
        (register(local), "a peer's RDMA READ of it completed with status 10", "IBV_ACCESS_REMOTE_READ"),
        (register(local | write), "a peer's RDMA READ", "IBV_ACCESS_REMOTE_READ"),
        (register(local | read | write), "could RDMA WRITE into your weights", "IBV_ACCESS_REMOTE_WRITE out"),
        (register(local | read | atomic), "could run atomics on your weights", "IBV_ACCESS_REMOTE_ATOMIC out"),
    ]
    for my_share, message, hint in wrong:
        assert_named(share(pd, weights, ctx, my_share), message, hint)
        # a wrong MR is deregistered, so the same pages register again (the lesson then runs the reference)
        exercises.REGISTRY["memory-registration.your-buffer"].reference(pd, weights).close()
    assert np.array_equal(weights, np.arange(1024, dtype=np.float32)), "the probes leave the weights as they were"
    assert_named(feedback("memory-registration.your-buffer", 4096, pd, weights, ctx), "return the MR")


def test_memory_registration_your_buffer_without_local_write_is_refused_at_registration(ctx, pd, weights, capsys):
    mr = exercises.attempt("memory-registration.your-buffer", register(e.IBV_ACCESS_REMOTE_WRITE), pd, weights,
                           check_args=(ctx,))
    assert "your code raised PyverbsRDMAError" in capsys.readouterr().out
    assert mr.buf == weights.ctypes.data   # the reference's, and the lesson goes on
    mr.close()


# ---------------------------------------------------------------- posting.one-doorbell

def chain(link=True, signal=(-1,), post=(0,), reverse=False):
    """A learner's chain: linked forward (or back to front), the WRs in `signal` flagged, post_send called
    on each WR in `post`."""
    def my_chain(qp, wrs):
        if link:
            pairs = zip(wrs[1:], wrs) if reverse else zip(wrs, wrs[1:])
            for w, following in pairs:
                w.next_wr = following
        for i in signal:
            wrs[i].send_flags = e.IBV_SEND_SIGNALED
        for i in post:
            qp.post_send(wrs[i])
    return my_chain


def test_posting_one_doorbell_reference_and_skeleton(ctx, pd):
    from rdmalab.lessons.checks import posting
    ex = exercises.REGISTRY["posting.one-doorbell"]
    assert feedback("posting.one-doorbell", ex.reference(), ctx, pd).passed
    assert feedback("posting.one-doorbell", chain(), ctx, pd).passed

    def my_chain(qp, wrs):
        raise NotImplementedError
    assert feedback("posting.one-doorbell", my_chain, ctx, pd).status == "not yet"
    with lessons.Pair(ctx, pd, max_send_wr=64, sq_sig_all=0) as pair:   # the lesson's count, on its own pair
        assert posting.doorbells(ex.reference(), pair) <= 1
        assert pair.cq_a.poll(1)[0] == 0, "one completion, and it was polled"


def test_posting_one_doorbell_names_each_slip(ctx, pd):
    wrong = [
        (chain(link=False, post=range(16)), "you called post_send 16 times"),
        (chain(link=False, signal=range(16), post=range(16)), "you called post_send 16 times"),
        (chain(post=()), "nothing was posted"),
        (chain(post=(-1,)), "you posted wrs[15]"),
        (chain(reverse=True, signal=(-1,), post=(-1,)), "you posted wrs[15]"),
        (chain(signal=()), "no WR was signaled"),
        (chain(signal=range(16)), "all 16 WRs are signaled"),
        (chain(signal=(0,)), "you signaled wrs[0], not the last one"),
        (chain(signal=(7, 15)), "you signaled wrs[7, 15]"),
        (chain(link=False), "only WRITE(s) [0] landed"),
        (chain(reverse=True), "only WRITE(s) [0] landed"),
        ("my_chain", "answer with a function"),
    ]
    for answer, says in wrong:
        f = feedback("posting.one-doorbell", answer, ctx, pd)
        assert f.status == "wrong" and says in f.message, (says, f.message)

    def signals_after_posting(qp, wrs):
        for w, following in zip(wrs, wrs[1:]):
            w.next_wr = following
        qp.post_send(wrs[0])
        wrs[-1].send_flags = e.IBV_SEND_SIGNALED   # too late: the WRs were handed over unsignaled
    f = feedback("posting.one-doorbell", signals_after_posting, ctx, pd)
    assert "no WR was signaled when you posted" in f.message

    def skips_some(qp, wrs):
        for w, following in zip(wrs[::2], wrs[2::2]):
            w.next_wr = following
        wrs[14].next_wr = wrs[15]
        wrs[-1].send_flags = e.IBV_SEND_SIGNALED
        qp.post_send(wrs[0])
    f = feedback("posting.one-doorbell", skips_some, ctx, pd)
    assert "WRITE(s) [1, 3, 5, 7, 9, 11, 13] never landed" in f.message
