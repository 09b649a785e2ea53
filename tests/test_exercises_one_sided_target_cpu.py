"""The challenges of lessons 05 (one-sided) and 06 (target-cpu): each check accepts its reference, says "not yet" to
the skeleton, and names each plausible mistake; the lesson's QP is left in RTS and its CQ empty, so the lesson goes
on. (The freeze challenge's tests are in tests/test_exercises.py.)"""
import time

import pytest

from rdmalab import lessons
from rdmalab import verbs as v
from rdmalab.lessons import exercises, length
from rdmalab.lessons.checks import target_cpu
from rdmalab.verbs import rc

e = v.enums


@pytest.fixture(scope="module")
def lesson():
    """The two lessons' setting: a target process connected to our QP, post() as they define it, make_read()."""
    from rdmalab.lessons import freeze
    from rdmalab.lessons.target import RemoteBuffer
    with v.device.Context(name=v.choose_route().device) as ctx, v.pd.PD(ctx) as pd:
        cq = v.cq.CQ(ctx, 64)
        qp = v.qp.QP(pd, v.qp.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=v.qp.QPCap(64, 4), sq_sig_all=0))
        local = v.mr.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        target = RemoteBuffer()
        mine = rc.endpoint(ctx, qp, local)
        rc.connect(ctx, qp, mine, target.endpoint, e.IBV_ACCESS_LOCAL_WRITE)
        target.connect(mine)

        def make_read():
            wr = v.wr.SendWR(opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[v.wr.SGE(local.buf + 512, 8, local.lkey)],
                             send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_rdma(target.endpoint["rkey"], target.endpoint["addr"])
            return wr
        yield {"qp": qp, "cq": cq, "local": local, "target": target, "post": freeze.poster(qp, local, target),
               "make_read": make_read}
        target.close()
        for obj in (qp, local, cq):
            obj.close()


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


def still_usable(lesson):
    """The lesson's QP in RTS, its CQ empty, and the target's mailbox with nothing waiting."""
    assert lessons.state_of(lesson["qp"]) == "RTS"
    assert lesson["cq"].poll(1)[0] == 0
    assert lesson["target"].completions() == []


# ---- 05: one-sided.wr-fields ----

def fields(sge=lambda l, t, ro, n, lo: (l.buf + lo, n, l.lkey), addr=lambda l, t, ro, n, lo: t.endpoint["addr"] + ro,
           rkey=lambda l, t: t.endpoint["rkey"]):
    """The reference's fields with one of them computed otherwise."""
    def wr_fields(local, target, remote_offset, length, local_offset=0):
        return {"sge": sge(local, target, remote_offset, length, local_offset),
                "remote_addr": addr(local, target, remote_offset, length, local_offset), "rkey": rkey(local, target)}
    return wr_fields


def test_wr_fields_the_reference_passes_and_a_write_built_from_it_lands(lesson):
    args = (lesson["local"], lesson["target"], lesson["qp"], lesson["cq"])
    ex = exercises.REGISTRY["one-sided.wr-fields"]
    assert feedback("one-sided.wr-fields", ex.reference(), *args).passed
    assert feedback("one-sided.wr-fields", fields(), *args).passed
    assert exercises.solution_source("one-sided.wr-fields").startswith("def wr_fields(local, target, remote_offset,")
    assert length.lines_written("one-sided.wr-fields") == 3
    still_usable(lesson)


@pytest.mark.parametrize("wrong, says", [
    (fields(rkey=lambda l, t: l.lkey), "rkey is your lkey"),
    (fields(rkey=lambda l, t: l.rkey), "not the key the target gave out"),
    (fields(sge=lambda l, t, ro, n, lo: (l.buf + lo, n, t.endpoint["rkey"])), "the SGE's key is the target's rkey"),
    (fields(addr=lambda l, t, ro, n, lo: t.endpoint["addr"]), "the remote offset (1024) is forgotten"),
    (fields(addr=lambda l, t, ro, n, lo: ro), "remote_addr is the offset alone (1024)"),
    (fields(addr=lambda l, t, ro, n, lo: l.buf + ro), "remote_addr is in your own buffer"),
    (fields(sge=lambda l, t, ro, n, lo: (l.buf, n, l.lkey)), "the local offset (128) is forgotten"),
    (fields(sge=lambda l, t, ro, n, lo: (t.endpoint["addr"] + ro, n, l.lkey)), "the SGE's address is in the target's"),
    (fields(sge=lambda l, t, ro, n, lo: (l.buf + lo, ro + n, l.lkey)), "an offset plus the length"),
    (fields(sge=lambda l, t, ro, n, lo: (l.buf + lo, 4096, l.lkey)), "your whole buffer's, 4096"),
    (lambda local, target, remote_offset, length, local_offset=0: {"sge": local.buf, "remote_addr": 0, "rkey": 0},
     "make it a tuple (address, length, lkey)"),
    (lambda local, target, remote_offset, length, local_offset=0: (local.buf, length, local.lkey),
     'return a dict with "sge", "remote_addr" and "rkey"'),
])
def test_wr_fields_names_each_slip(lesson, wrong, says):
    f = feedback("one-sided.wr-fields", wrong, lesson["local"], lesson["target"], lesson["qp"], lesson["cq"])
    assert f.status == "wrong" and says in f.message, f.message


def test_wr_fields_skeleton_is_not_yet(lesson):
    args = (lesson["local"], lesson["target"], lesson["qp"], lesson["cq"])

    def returns_none(local, target, remote_offset, length, local_offset=0):
        return None

    def raises(local, target, remote_offset, length, local_offset=0):
        raise NotImplementedError
    assert feedback("one-sided.wr-fields", returns_none, *args).status == "not yet"
    assert feedback("one-sided.wr-fields", raises, *args).status == "not yet"
    still_usable(lesson)


# ---- 06: target-cpu.read-loop ----

def loop(build_inside=False, poll="until", clock="around", unit=1e6, per_read=True, posts=None):
    """A learner's time_reads with one decision changed: the WR built in the loop; polling "until" its
    completion, "once", "never" or on the lesson's own CQ ("other", a global); the clock read "around" the loop,
    "each" READ, or time.time ("wall"); the unit (1e6: microseconds); the whole loop's time; how many posts."""
    def time_reads(qp, cq, make_read, n):
        wr = None if build_inside else make_read()
        clock_fn = time.time if clock == "wall" else time.perf_counter
        start, spent = clock_fn(), 0.0
        for _ in range(n if posts is None else posts):
            if clock == "each":
                one = time.perf_counter()
            qp.post_send(make_read() if build_inside else wr)
            if poll == "until":
                while not cq.poll()[0]:
                    pass
            elif poll == "once":
                cq.poll()
            elif poll == "other":
                while not time_reads.real_cq.poll()[0]:
                    pass
            if clock == "each":
                spent += time.perf_counter() - one
        total = spent if clock == "each" else clock_fn() - start
        return total / (n if per_read else 1) * unit
    return time_reads


def read_loop(lesson, fn):
    fn.real_cq = lesson["cq"]
    return feedback("target-cpu.read-loop", fn, lesson["qp"], lesson["cq"], lesson["make_read"])


def test_read_loop_the_reference_passes_and_counts_seven_lines(lesson):
    ex = exercises.REGISTRY["target-cpu.read-loop"]
    assert read_loop(lesson, ex.reference()).passed
    assert read_loop(lesson, loop()).passed
    assert exercises.solution_source("target-cpu.read-loop").startswith("def time_reads(qp, cq, make_read, n):")
    assert length.lines_written("target-cpu.read-loop") == 7
    still_usable(lesson)


def test_read_loop_a_clock_imported_by_name_or_rc_wait_for_completion_pass_too(lesson):
    from time import perf_counter

    def time_reads(qp, cq, make_read, n):
        wr = make_read()
        start = perf_counter()
        for _ in range(n):
            qp.post_send(wr)
            rc.wait_for_completion(cq)
        return (perf_counter() - start) / n * 1e6
    assert read_loop(lesson, time_reads).passed
    still_usable(lesson)


def test_read_loop_skeleton_is_not_yet(lesson):
    def time_reads(qp, cq, make_read, n):
        raise NotImplementedError

    def returns_none(qp, cq, make_read, n):
        return None
    assert read_loop(lesson, time_reads).status == "not yet"
    assert read_loop(lesson, returns_none).status == "not yet"


@pytest.mark.parametrize("wrong, says", [
    (loop(build_inside=True), "make_read() was called 100 times"),
    (loop(poll="never"), "your loop posts without polling: it times post_send alone"),
    (loop(poll="once"), "found nothing and went on"),
    (loop(poll="other"), "not through cq, the CQ your function was given"),
    (loop(clock="each"), "for 100 READs: a clock per READ"),
    (loop(clock="wall"), "time.time()"),
    (loop(unit=1), "seconds per READ"),
    (loop(unit=1e3), "milliseconds per READ"),
    (loop(unit=1e9), "nanoseconds per READ"),
    (loop(per_read=False), "microseconds for the whole loop"),
    (loop(posts=10), "posted 10 READs for n = 100"),
])
def test_read_loop_names_each_mistake(lesson, wrong, says):
    f = read_loop(lesson, wrong)
    assert f.status == "wrong" and says in f.message, f.message
    still_usable(lesson)


def test_read_loop_a_clock_per_read_is_caught_when_imported_by_name_too(lesson):
    from time import perf_counter

    def time_reads(qp, cq, make_read, n):
        wr, total = make_read(), 0.0
        for _ in range(n):
            start = perf_counter()
            qp.post_send(wr)
            while not cq.poll()[0]:
                pass
            total += perf_counter() - start
        return total / n * 1e6
    f = read_loop(lesson, time_reads)
    assert f.status == "wrong" and "a clock per READ" in f.message, f.message


def test_read_loop_a_figure_is_judged_against_the_reference_timed_beside_it(monkeypatch, lesson):
    """Not by a threshold: the same wrong figure passes when the reference loop is as slow as it."""
    slow = loop(unit=1e9)   # nanoseconds
    assert read_loop(lesson, slow).status == "wrong"
    real = target_cpu.time_reads
    monkeypatch.setattr(target_cpu, "time_reads", lambda *args: real(*args) * 1e3)
    assert read_loop(lesson, slow).passed


# ---- 06: target-cpu.announce ----

def announcer(opcode="WRITE_WITH_IMM", flag=0, imm="length", length=lambda m: 8 + len(m), at=8, poll=True):
    """A learner's announce with one decision changed: the opcode, the flag's value, the immediate ("length",
    "write", a number), the WRITE's length, where the message sits in the local buffer, whether it polls."""
    def announce(post, cq, local, message):
        data = flag.to_bytes(8, "little") + message if at == 8 else message + bytes(8)
        local.write(data, len(data))
        immediate = {"length": len(message), "write": length(message)}.get(imm, imm)
        post(getattr(e, f"IBV_WR_{opcode}" if opcode == "SEND" else f"IBV_WR_RDMA_{opcode}"), length(message),
             imm=immediate)
        if poll:
            return rc.wait_for_completion(cq).status
    return announce


def announced(lesson, fn):
    return feedback("target-cpu.announce", fn, lesson["post"], lesson["cq"], lesson["local"], lesson["target"])


def test_announce_the_reference_passes_and_the_reader_hears(lesson):
    ex = exercises.REGISTRY["target-cpu.announce"]
    assert announced(lesson, ex.reference()).passed
    assert announced(lesson, announcer()).passed
    assert exercises.solution_source("target-cpu.announce").startswith("def announce(post, cq, local, message):")
    assert length.lines_written("target-cpu.announce", {"e = v.enums"}) == 3
    still_usable(lesson)
    message = b"gradients for layer 7 are ready"   # as the lesson goes on: its reader hears
    ex.reference()(lesson["post"], lesson["cq"], lesson["local"], message)
    mail = lesson["target"].wait_for_mail()
    assert mail["how"] == "immediate" and bytes.fromhex(mail["message"]) == message


def test_announce_skeleton_is_not_yet(lesson):
    def announce(post, cq, local, message):
        raise NotImplementedError

    def nothing(post, cq, local, message):
        return None
    assert announced(lesson, announce).status == "not yet"
    assert announced(lesson, nothing).status == "not yet"


@pytest.mark.parametrize("wrong, says", [
    (announcer(opcode="WRITE"), "a plain WRITE leaves nothing at the target but its bytes: the reader"),
    (announcer(opcode="WRITE", flag=1 << 40), "you announced with the flag"),
    (announcer(imm=0), "the immediate is 0 (imm not set)"),
    (announcer(imm="write"), "the WRITE's length, flag included"),
    (announcer(imm=31), "a length of your own"),
    (announcer(length=len), "your WRITE ends at the target's byte"),
    (announcer(at=0), "the message must reach the target's offset 8"),
    (announcer(flag=1), "you set the flag too"),
    (announcer(poll=False), "you did not poll the WRITE's completion"),
    (announcer(opcode="SEND"), "a SEND's bytes go to the reader's posted receive buffer"),
])
def test_announce_names_each_mistake(lesson, wrong, says):
    f = announced(lesson, wrong)
    assert f.status == "wrong" and says in f.message, f.message
    still_usable(lesson)
