"""The target's CPU lesson (target-cpu): its exercises, each a check (raising Wrong with a hint) and a reference
solution.

target-cpu.read-loop: the learner's loop that times an RDMA READ, `time_reads(qp, cq, make_read, n)`: the WR
built once (make_read(), the lesson's), then n times posted and its completion polled, the clock read around
the whole loop; microseconds per READ. The check runs it on the lesson's QP through stand-ins that count what
it does: each post_send (only the WR make_read built goes out, one READ at a time), each poll of `cq` (the first
poll after a post finds nothing, as it would on a NIC while the READ is on its round trip: a loop that polls
once and goes on shows on every device), each call of make_read, and each read of a clock by the learner's code.
It names, in the order a learner would fix them: a WR built inside the loop, a loop that posts without polling
(it times post_send alone), one that polls once and goes on, a completion taken from another CQ than `cq`, a
clock read per READ instead of around the loop, time.time's wall clock, and a figure in the wrong unit. The
figure is judged against the reference loop, run through the same stand-ins just before and after the
learner's, never against a threshold of its own: seconds, milliseconds, nanoseconds, or the whole loop's time
come out thousands of times off, whatever the machine.

target-cpu.announce: the learner announces a message with WRITE_WITH_IMM, `announce(post, cq, local, message)`:
the message at offset 8 of the target's mailbox (bytes 0..7 a flag, left 0), the immediate its length, the
WRITE's completion polled. The check runs it with a message of its own and asks the target's program to read its
mailbox (target.wait_for_mail), which takes a receive completion (WRITE_WITH_IMM: the immediate is the length)
or a flag that became non-zero; it names a plain WRITE (the reader never hears), a flag relied on, the immediate
not set or not the length, a WRITE too short or in the wrong place, and a completion left unpolled.
"""
import math
import numbers
import sys
import time

from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab import verbs as v
from rdmalab.verbs import rc

N = 100           # READs the check asks for (the lesson's loops run 200 or 2000)
RUN_S = 20.0      # the learner's loop is stopped after this long
PROBE_S = 1.0     # how long the check waits for a READ's completion that the learner's loop left behind
BAND = 4.0        # the learner's figure may be this far from the reference's, either way (a loaded machine)
ROUNDS = 3        # reference, learner, reference: at most this many times, until the figure falls in BAND
CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time",
          "process_time_ns", "thread_time", "thread_time_ns")
LOOP_HINT = ("Build the WR once, before the clock starts; read time.perf_counter() just before the loop and just "
             "after it; in the loop, post the WR, then poll cq until a poll returns its completion.")
# (learner's figure / reference's, what it is): units and totals a learner may return instead of us per READ
UNITS = ((1e-6, "seconds per READ: multiply by 1e6 for microseconds"),
         (1e-3, "milliseconds per READ: multiply by 1e3 for microseconds"),
         (1e3, "nanoseconds per READ: divide by 1e3 for microseconds"),
         (N, "microseconds for the whole loop: divide by n for one READ"),
         (N * 1e-6, "seconds for the whole loop: divide by n, and multiply by 1e6 for microseconds"),
         (N * 1e-3, "milliseconds for the whole loop: divide by n, and multiply by 1e3 for microseconds"),
         (N * 1e3, "nanoseconds for the whole loop: divide by n, and by 1e3 for microseconds"))


class _Loop:
    """What the learner's loop did, through stand-ins for qp, cq and make_read."""

    def __init__(self, qp, cq, make_read):
        self.real_qp, self.real_cq, self.real_make = qp, cq, make_read
        self.made, self.posts, self.polls, self.completions = [], 0, 0, 0
        self.pending = False         # a READ posted whose completion has not come back through `cq`
        self.fresh = False           # no poll since the last post
        self.polls_since_post = 0
        self.qp, self.cq = _QP(self), _CQ(self)

    def make_read(self):
        wr = self.real_make()
        self.made.append(wr)     # (kept: a WR built per READ is a new object each time)
        return wr

    def post(self, wr, *more):
        if not any(wr is made for made in self.made):
            raise Wrong("your loop posted a WR that make_read() did not build: post the one it returns (built "
                        "once, before the loop).", LOOP_HINT)
        if self.pending:
            self.left_behind()
        self.posts += 1
        self.pending, self.fresh, self.polls_since_post = True, True, 0
        self.real_qp.post_send(wr, *more)

    def poll(self, num_entries=1):
        self.polls += 1
        self.polls_since_post += 1
        if self.fresh:           # the READ is still on its round trip, as on a NIC
            self.fresh = False
            return 0, []
        n, wcs = self.real_cq.poll(num_entries)
        for wc in wcs:
            self.completions += 1
            self.pending = False
            if wc.status != v.enums.IBV_WC_SUCCESS:
                from rdmalab.errors import status_name
                raise Wrong(f"a READ completed with status {wc.status} ({status_name(wc.status)}).", LOOP_HINT)
        return n, wcs

    def left_behind(self):
        """A READ's completion did not come back through `cq` before the next post (or the return): Wrong, saying
        whether it is still in the CQ (never polled, or polled once) or was taken through another CQ object."""
        found = _probe(self.real_cq)
        self.pending = False
        if not found:
            raise Wrong("a READ's completion was taken from the CQ, but not through cq, the CQ your function was "
                        "given: your loop polls another object (a global?). Poll the cq passed in.", LOOP_HINT)
        if not self.polls:
            raise Wrong("your loop posts without polling: it times post_send alone, which returns before the READ "
                        "is done (on a NIC, before its request has left). Poll cq after each post until the "
                        "completion comes.", LOOP_HINT)
        if self.polls_since_post:
            times = "once" if self.polls_since_post == 1 else f"{self.polls_since_post} times"
            raise Wrong(f"your loop polled cq {times} after a post, found nothing and went "
                        "on: an empty poll means the READ is not done yet. Poll until the completion comes "
                        "(while not cq.poll()[0]: pass).", LOOP_HINT)
        raise Wrong("a READ was posted before the last one's completion was polled: post, then poll cq until its "
                    "completion comes, then post the next.", LOOP_HINT)


class _QP:
    def __init__(self, loop):
        self._loop = loop

    def post_send(self, wr, *more):
        self._loop.post(wr, *more)

    def __getattr__(self, name):
        return getattr(self._loop.real_qp, name)


class _CQ:
    def __init__(self, loop):
        self._loop = loop

    def poll(self, num_entries=1):
        return self._loop.poll(num_entries)

    def __getattr__(self, name):
        return getattr(self._loop.real_cq, name)


def _probe(cq, timeout=PROBE_S):
    """Whether a completion comes on the real `cq` within `timeout` (taking it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n, _ = cq.poll(1)
        if n:
            return True
    return False


class _Clocks:
    """The time module's clocks (and any the learner's function holds by name, `from time import perf_counter`,
    as a global or from an enclosing function) counted while in use, for calls made by code whose globals are
    the learner's."""

    def __init__(self, fn):
        self.fn, self.fn_globals = fn, getattr(fn, "__globals__", {})
        self.reads = dict.fromkeys(CLOCKS, 0)

    def __enter__(self):
        originals = {name: getattr(time, name) for name in CLOCKS if hasattr(time, name)}
        is_clock = lambda value: any(value is clock for clock in originals.values())   # noqa: E731
        self.saved = [(time, name, clock) for name, clock in originals.items()]
        self.saved += [(self.fn_globals, key, value) for key, value in list(self.fn_globals.items()) if is_clock(value)]
        for cell in getattr(self.fn, "__closure__", None) or ():
            try:
                if is_clock(cell.cell_contents):
                    self.saved.append((cell, "cell_contents", cell.cell_contents))
            except ValueError:   # (an empty cell)
                pass
        for where, key, clock in self.saved:
            name = next(n for n, c in originals.items() if c is clock)
            counted = self._counted(name, clock)
            if isinstance(where, dict):
                where[key] = counted
            else:
                setattr(where, key, counted)
        return self

    def _counted(self, name, clock):
        def read():
            if sys._getframe(1).f_globals is self.fn_globals:
                self.reads[name] += 1
            return clock()
        return read

    def __exit__(self, *exc):
        for where, key, clock in self.saved:
            if isinstance(where, dict):
                where[key] = clock
            else:
                setattr(where, key, clock)


def _run(fn, qp, cq, make_read, clocks=None):
    """fn(qp, cq, make_read, N) through the stand-ins, stopped after RUN_S: (its figure, the _Loop). The READs it
    left behind are polled, so the lesson's CQ is empty after."""
    from rdmalab.lessons.freeze import _deadline
    loop = _Loop(qp, cq, make_read)
    try:
        with _deadline(RUN_S):
            if clocks is None:
                figure = fn(loop.qp, loop.cq, loop.make_read, N)
            else:
                with clocks:
                    figure = fn(loop.qp, loop.cq, loop.make_read, N)
            if loop.pending:
                loop.left_behind()
    finally:
        if loop.pending:
            _probe(cq, 5.0)
    return figure, loop


@exercise("target-cpu.read-loop", "Time one RDMA READ: the WR built once, posted and polled n times, one clock "
          "around the loop", hints=[LOOP_HINT])
def _check_read_loop(fn, qp, cq, make_read):
    if not callable(fn):
        raise Wrong("answer with your function, as the cell does: lambda: time_reads.")
    clocks = _Clocks(fn)
    try:
        figure, loop = _run(fn, qp, cq, make_read, clocks)
    except (Wrong, NotYet):
        raise
    except NotImplementedError:
        raise NotYet() from None
    except TimeoutError as error:
        raise Wrong(f"{error}: does your loop wait for a completion that never comes through cq?", LOOP_HINT) from None
    except Exception as error:
        raise Wrong(f"your function raised {type(error).__name__}: {error}", LOOP_HINT) from None
    if figure is None and not loop.posts:
        raise NotYet("nothing posted, nothing returned: your function is still the skeleton.")
    if len(loop.made) > 1:
        raise Wrong(f"make_read() was called {len(loop.made)} times for {N} READs: your loop builds a SendWR for "
                    "every READ, so it times Python building it too. Build it once, before the clock starts.",
                    LOOP_HINT)
    if loop.posts != N:
        raise Wrong(f"your loop posted {loop.posts} READs for n = {N}: post n of them, and divide by n.", LOOP_HINT)
    reads = clocks.reads
    fine = sum(reads[name] for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns"))
    if reads["time"] or reads["time_ns"]:
        raise Wrong("your loop reads time.time(): the wall clock, which NTP may step while you measure and which "
                    "ticks coarsely on some systems. Time intervals with time.perf_counter().", LOOP_HINT)
    if any(reads[name] for name in ("process_time", "process_time_ns", "thread_time", "thread_time_ns")):
        raise Wrong("your loop reads the CPU time of this process (process_time): a READ's round trip is time "
                    "waited, not only computed. Time it with time.perf_counter().", LOOP_HINT)
    if fine >= N:
        raise Wrong(f"your loop read the clock {fine} times for {N} READs: a clock per READ. Read it once before "
                    "the loop and once after, and divide: each read costs time of its own, inside what you measure, "
                    "and a single READ is close to the clock's resolution.", LOOP_HINT)
    if isinstance(figure, bool) or not isinstance(figure, numbers.Real) or not math.isfinite(figure) or figure <= 0:
        raise Wrong(f"your function returned {figure!r:.60}: return microseconds per READ, a positive number.",
                    LOOP_HINT)
    ratios = []
    for _ in range(ROUNDS):
        before = _run(time_reads, qp, cq, make_read)[0]
        mine = figure if not ratios else _run(fn, qp, cq, make_read)[0]
        after = _run(time_reads, qp, cq, make_read)[0]
        if min(before, after) / BAND <= mine <= max(before, after) * BAND:
            return
        reference_us = math.sqrt(before * after)
        ratios.append((mine / reference_us, mine, reference_us))
    ratio, mine, reference_us = sorted(ratios)[len(ratios) // 2]
    factor, what = min(UNITS, key=lambda unit: abs(math.log(ratio / unit[0])))
    if abs(math.log(ratio / factor)) < math.log(BAND):
        raise Wrong(f"your figure, {mine:.3g}, is about {factor:g} x what the same loop gave when timed just before "
                    f"and after yours ({reference_us:.3g} us per READ): it looks like {what}.", LOOP_HINT)
    raise Wrong(f"your figure, {mine:.3g}, is {ratio:.3g} x what the same loop gave when timed just before and after "
                f"yours ({reference_us:.3g} us per READ): return microseconds per READ.", LOOP_HINT)


@reference("target-cpu.read-loop")
def _read_loop():
    return time_reads


def time_reads(qp, cq, make_read, n):
    wr = make_read()                                  # built once: the loop times the READ, not Python building it
    start = time.perf_counter()                       # one clock around the whole loop
    for _ in range(n):
        qp.post_send(wr)
        while not cq.poll()[0]:                       # done only when its completion comes
            pass
    return (time.perf_counter() - start) / n * 1e6    # microseconds per READ



# ---- target-cpu.announce ----

LESSON_MESSAGE = b"gradients for layer 7 are ready"   # what the lesson announces after the check
FLAG, MAILBOX = 8, 128   # the mailbox: 8 bytes of flag at offset 0, the message from offset 8; the check clears 128
ANNOUNCE_HINT = ("Stage the flag (8 zero bytes) and the message after it in your buffer; one WRITE_WITH_IMM of both to "
                 "the target's offset 0, its immediate the number of bytes the reader must read; then poll its "
                 "completion (rc.wait_for_completion).")


class _Post:
    """post(), noting each WR; a WR that would fail at the target (outside its buffer, or a SEND or READ, which
    a mailbox does not take) is refused before it is posted, so the lesson's QP stays in RTS."""

    def __init__(self, post, local, target):
        self.post, self.local, self.size, self.posted = post, local, target.endpoint["size"], []

    def __call__(self, opcode, length, remote_offset=0, local_offset=0, imm=0, **more):
        e = v.enums
        names = {int(e.IBV_WR_RDMA_WRITE): "WRITE", int(e.IBV_WR_RDMA_WRITE_WITH_IMM): "WRITE_WITH_IMM"}
        if int(opcode) in (int(e.IBV_WR_SEND), int(e.IBV_WR_SEND_WITH_IMM)):
            raise Wrong("a SEND's bytes go to the reader's posted receive buffer, not to its mailbox (and it needs "
                        "the reader to have posted one big enough): a WRITE_WITH_IMM places them where you say and "
                        "announces them.", ANNOUNCE_HINT)
        if int(opcode) not in names:
            raise Wrong(f"post a WRITE_WITH_IMM (e.IBV_WR_RDMA_WRITE_WITH_IMM), not opcode {int(opcode)}.",
                        ANNOUNCE_HINT)
        if not (length > 0 and 0 <= remote_offset and remote_offset + length <= self.size and 0 <= local_offset
                and local_offset + length <= self.local.length):
            raise Wrong(f"{length} bytes from your offset {local_offset} to the target's offset {remote_offset} do "
                        f"not fit the target's {self.size} bytes and your {self.local.length}.", ANNOUNCE_HINT)
        self.posted.append({"what": names[int(opcode)], "length": length, "remote_offset": remote_offset,
                            "local_offset": local_offset, "imm": imm})
        return self.post(opcode, length, remote_offset, local_offset, imm=imm, **more)


class _Counted:
    """The CQ, counting the completions polled through it."""

    def __init__(self, cq):
        self._cq, self.statuses = cq, []

    def poll(self, num_entries=1):
        n, wcs = self._cq.poll(num_entries)
        self.statuses += [wc.status for wc in wcs]
        return n, wcs

    def __getattr__(self, name):
        return getattr(self._cq, name)


@exercise("target-cpu.announce", "Announce a WRITE: WRITE_WITH_IMM, its immediate the message's length",
          hints=[ANNOUNCE_HINT])
def _check_announce(fn, post, cq, local, target):
    import random
    from rdmalab.errors import status_name
    from rdmalab.lessons.freeze import _deadline
    e = v.enums
    if not callable(fn):
        raise Wrong("answer with your function, as the cell does: lambda: announce.")
    message = LESSON_MESSAGE
    while len(message) == len(LESSON_MESSAGE):   # (a length of its own: an immediate written as the lesson's fails)
        message = f"checked: bucket {random.randrange(10, 10 ** random.randrange(3, 12))} is ready".encode()
    local.write(bytes(MAILBOX), MAILBOX)                      # the target's mailbox cleared, its old mail dropped
    post(e.IBV_WR_RDMA_WRITE, MAILBOX)
    rc.wait_for_completion(cq)
    target.completions()
    watched, counted = _Post(post, local, target), _Counted(cq)
    try:
        with _deadline(RUN_S):
            fn(watched, counted, local, message)
    except (Wrong, NotYet):
        raise
    except NotImplementedError:
        raise NotYet() from None
    except Exception as error:
        raise Wrong(f"your function raised {type(error).__name__}: {error}", ANNOUNCE_HINT) from None
    finally:
        for _ in range(len(watched.posted) - len(counted.statuses)):   # what it left unpolled
            _probe(cq, 5.0)
    flag = int.from_bytes(target.read(FLAG), "little")
    try:
        mail = target.wait_for_mail(timeout=2.0)
    except Exception:   # (TimeoutError: no completion came, and the flag stayed 0)
        mail = None
    target.completions()   # (a second announcement's completion, left for no one)
    posted = watched.posted
    if not posted:
        raise NotYet("nothing posted: your function is still the skeleton.")
    if len(counted.statuses) < len(posted):
        raise Wrong("you did not poll the WRITE's completion: until it is polled you do not know it is done, and it "
                    "stays in your CQ, where the lesson's next poll would take it for its own.",
                    "rc.wait_for_completion(cq) after the post.")
    failed = [s for s in counted.statuses if s != e.IBV_WC_SUCCESS]
    if failed:
        raise Wrong(f"your WRITE completed with status {failed[0]} ({status_name(failed[0])}).", ANNOUNCE_HINT)
    with_imm = [p for p in posted if p["what"] == "WRITE_WITH_IMM"]
    if not with_imm:
        if mail and mail["how"] == "flag":
            raise Wrong("you announced with the flag: the reader saw it, here. But RC orders WRITEs' execution, not "
                        "where their bytes are placed: with relaxed ordering or in GPU memory the flag can be seen "
                        "before the message. Post a WRITE_WITH_IMM instead, and leave the flag 0.", ANNOUNCE_HINT)
        raise Wrong("a plain WRITE leaves nothing at the target but its bytes: the reader, waiting for a receive "
                    "completion or its flag, never heard of your message (it waited 2 s). Post a WRITE_WITH_IMM.",
                    ANNOUNCE_HINT)
    if len(posted) > 1:
        raise Wrong(f"you posted {len(posted)} WRs: one WRITE_WITH_IMM carries the message and its announcement.",
                    ANNOUNCE_HINT)
    w = with_imm[0]
    if not w["imm"]:
        raise Wrong("the immediate is 0 (imm not set): the reader reads as many bytes as the immediate says, so it "
                    "read an empty message. Carry the message's length: imm=len(message).", ANNOUNCE_HINT)
    if w["imm"] != len(message):
        said = ("the WRITE's length, flag included" if w["imm"] == w["length"] else
                "a length of your own (the check's message is not the lesson's)" if w["imm"] > 0 else "not a length")
        raise Wrong(f"the immediate is {w['imm']}, {said}: the reader reads that many bytes from offset 8, and the "
                    f"message has {len(message)}. imm=len(message).", ANNOUNCE_HINT)
    found = bytes.fromhex(mail["message"]) if mail else None
    if found != message:
        start, end = w["remote_offset"], w["remote_offset"] + w["length"]
        if end < FLAG + len(message) and start <= FLAG:
            raise Wrong(f"your WRITE ends at the target's byte {end}: the message runs from 8 to {FLAG + len(message)}"
                        f", so the reader found {found!r}. Its length is 8 + len(message): the flag and the message.",
                        ANNOUNCE_HINT)
        raise Wrong(f"the reader found {found!r}: the message must reach the target's offset 8, after the 8-byte "
                    "flag: stage bytes(8) + message, and WRITE all of it from your offset 0 to the target's 0.",
                    ANNOUNCE_HINT)
    if flag:
        raise Wrong(f"you set the flag too ({flag}): a reader that polls it may see it before the message's bytes "
                    "(relaxed ordering, GPU memory). Leave it 0: the immediate's completion is the announcement.",
                    ANNOUNCE_HINT)


@reference("target-cpu.announce")
def _announce():
    return announce


def announce(post, cq, local, message):
    e = v.enums
    local.write(bytes(8) + message, 8 + len(message))        # the flag (left 0: nobody relies on it), the message
    post(e.IBV_WR_RDMA_WRITE_WITH_IMM, 8 + len(message), imm=len(message))   # the immediate: the message's length
    return rc.wait_for_completion(cq).status                  # polled: the WRITE is done
