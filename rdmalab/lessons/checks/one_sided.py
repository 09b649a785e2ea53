"""The one-sided operations lesson (one-sided): its exercises, each a check (raising Wrong with a hint) and a
reference solution.

one-sided.wr-fields: the learner chooses a WR's fields for a move between their buffer and the target's: the SGE
(their address plus the local offset, the length, their lkey) and the remote address (the target's plus the
remote offset) with the target's rkey. The lesson's post() builds every WR from them. The check asks for a few
moves and names each slip by what it is (an lkey where the rkey goes or the other way round, an offset forgotten,
an offset given as an address, the two addresses swapped, a wrong length); then one WRITE built from the
learner's fields must land its pattern where they said. The values are compared, never a device's behaviour on a
wrong key, so it checks alike on soft0 and on Soft-RoCE (and leaves the lesson's QP in RTS).

one-sided.freeze: the learner writes the experiment: stop the target process (SIGSTOP), post a WRITE, a READ and
a FETCH_AND_ADD to its memory and poll each completion, push a non-blocking TCP socket to the same process until
the kernel would block, counting what it took, and continue the target (SIGCONT). The check runs the function on
the lesson's target through rdmalab.lessons.freeze, which notes the target's state at every post and send, every
completion polled and every local read, and always continues the target. It names, in the order a learner would
fix them: a blocking socket (its send() hangs: freeze stops it after HANG_S), posts while the target runs (never
stopped, or continued too early), a missing operation, completions never polled, results read before their
completion, failed completions, what the function says it found against what happened (the READ's bytes, the
counter's old value, the bytes the kernel took), a push stopped before the socket would block, and a target left
stopped.
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab import verbs as v
from rdmalab.verbs import rc

FIELDS_HINT = ('your bytes: (local.buf + local_offset, length, local.lkey); the target\'s: '
               'target.endpoint["addr"] + remote_offset, with target.endpoint["rkey"].')
MOVES = ((1024, 64, 0), (3072, 8, 128), (8, 100, 64), (0, 4096, 0))   # (remote_offset, length, local_offset)


@exercise("one-sided.wr-fields", "A WR's fields: your bytes by address and lkey, the target's by address and rkey",
          hints=[FIELDS_HINT])
def _check_wr_fields(fn, local, target, qp, cq):
    import os
    if not callable(fn):
        raise Wrong("answer with your function, as the cell does: lambda: wr_fields.")
    for remote_offset, length, local_offset in MOVES:
        try:
            got = fn(local, target, remote_offset, length, local_offset)
        except NotImplementedError:
            raise NotYet() from None
        except Exception as error:
            raise Wrong(f"your function raised {type(error).__name__}: {error}", FIELDS_HINT) from None
        if got is None:
            raise NotYet("wr_fields returns None: it is still the skeleton.")
        _judge_fields(got, local, target, remote_offset, length, local_offset)
    e = v.enums   # the fields are right: one WRITE built from them lands where they say
    pattern = os.urandom(64)
    local.write(pattern, len(pattern))
    f = fn(local, target, 1024, len(pattern), 0)
    w = v.wr.SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[v.wr.SGE(*f["sge"])], send_flags=e.IBV_SEND_SIGNALED)
    w.set_wr_rdma(f["rkey"], f["remote_addr"])
    qp.post_send(w)
    status = rc.wait_for_completion(cq).status
    if status != e.IBV_WC_SUCCESS or target.read(len(pattern), 1024) != pattern:
        raise Wrong(f"a WRITE built from your fields completed with status {status}, and the target's bytes "
                    "1024..1087 are not what it carried.", FIELDS_HINT)


def _judge_fields(got, local, target, remote_offset, length, local_offset):
    """Wrong, naming the slip, unless `got` holds the fields of a move of `length` bytes from the learner's
    `local_offset` to the target's `remote_offset`."""
    addr, rkey, lkey = target.endpoint["addr"], target.endpoint["rkey"], local.lkey
    move = f"(for {length} bytes from your offset {local_offset} to the target's offset {remote_offset})"
    if not isinstance(got, dict) or not {"sge", "remote_addr", "rkey"} <= set(got):
        raise Wrong(f'return a dict with "sge", "remote_addr" and "rkey", as the skeleton says (you returned '
                    f"{got!r:.80}).")
    sge = got["sge"]
    if isinstance(sge, (str, bytes)) or not isinstance(sge, (tuple, list)) or len(sge) != 3:
        raise Wrong(f"sge is {sge!r:.60}: make it a tuple (address, length, lkey), what v.wr.SGE takes.", FIELDS_HINT)
    s_addr, s_len, s_key = (_int(x) for x in sge)
    r_addr, r_key = _int(got["remote_addr"]), _int(got["rkey"])
    if r_key != rkey:
        if r_key == lkey:
            raise Wrong("rkey is your lkey: the target's NIC checks the rkey against its own MR, so it must be the "
                        'key the target gave out, target.endpoint["rkey"]; your lkey means nothing there.', FIELDS_HINT)
        raise Wrong(f"rkey is {got['rkey']!r}, not the key the target gave out for its memory "
                    '(target.endpoint["rkey"]).', FIELDS_HINT)
    if s_key != lkey:
        if s_key == rkey:
            raise Wrong("the SGE's key is the target's rkey: an SGE names your own bytes, which your NIC checks "
                        "against your MR's lkey (local.lkey).", FIELDS_HINT)
        raise Wrong(f"the SGE's key is {sge[2]!r}, not your MR's lkey (local.lkey).", FIELDS_HINT)
    if r_addr != addr + remote_offset:
        if r_addr == addr:
            raise Wrong(f"remote_addr is where the target's buffer begins: the remote offset ({remote_offset}) is "
                        f"forgotten {move}.", 'target.endpoint["addr"] + remote_offset')
        if r_addr == remote_offset:
            raise Wrong(f"remote_addr is the offset alone ({remote_offset}): the target's NIC takes an address in "
                        f"the target's memory {move}.", 'target.endpoint["addr"] + remote_offset')
        if local.buf <= r_addr < local.buf + local.length:
            raise Wrong(f"remote_addr is in your own buffer (local.buf + ...): the target's memory is elsewhere, "
                        f"where target.endpoint says {move}.", 'target.endpoint["addr"] + remote_offset')
        raise Wrong(f"remote_addr is {got['remote_addr']!r}; the target's byte {remote_offset} is at "
                    f"{addr + remote_offset:#x} {move}.", 'target.endpoint["addr"] + remote_offset')
    if s_addr != local.buf + local_offset:
        if s_addr == local.buf:
            raise Wrong(f"the SGE's address is where your buffer begins: the local offset ({local_offset}) is "
                        f"forgotten {move}.", "local.buf + local_offset")
        if addr <= s_addr < addr + target.endpoint["size"]:
            raise Wrong(f"the SGE's address is in the target's buffer: an SGE names your own bytes {move}.",
                        "local.buf + local_offset")
        raise Wrong(f"the SGE's address is {sge[0]!r}; your byte {local_offset} is at "
                    f"{local.buf + local_offset:#x} {move}.", "local.buf + local_offset")
    if s_len != length:
        if s_len in (remote_offset + length, local_offset + length):
            raise Wrong(f"the SGE's length is {s_len}, an offset plus the length: it is the bytes moved, {length} "
                        f"{move}.", FIELDS_HINT)
        if s_len == local.length:
            raise Wrong(f"the SGE's length is your whole buffer's, {s_len}: a WR moves only the bytes asked for "
                        f"{move}.", FIELDS_HINT)
        raise Wrong(f"the SGE's length is {sge[1]!r}; the move is {length} bytes {move}.", FIELDS_HINT)


@reference("one-sided.wr-fields")
def _wr_fields():
    return wr_fields


def wr_fields(local, target, remote_offset, length, local_offset=0):
    return {"sge": (local.buf + local_offset, length, local.lkey),   # your bytes: your address, your lkey
            "remote_addr": target.endpoint["addr"] + remote_offset,   # the target's: its address...
            "rkey": target.endpoint["rkey"]}                          # ...and the key its NIC checks


HINT = ("Stop the target first (os.kill(pid, signal.SIGSTOP)); post each WR and poll its completion "
        "(rc.wait_for_completion(cq)) before you read what it brought; then sock.setblocking(False) and send() "
        "until it raises BlockingIOError, adding up what each send() returned; continue the target last (SIGCONT).")
ORDER_HINT = ("os.kill(pid, signal.SIGSTOP) before the first post, and os.kill(pid, signal.SIGCONT) only after the "
              "last send: the point is what reaches a process that cannot run.")
KEYS = ("statuses", "read_back", "old_counter", "tcp_bytes")


@exercise("one-sided.freeze", "Stop the target, reach its memory by RDMA and its socket by TCP, continue it",
          hints=[HINT])
def _check_freeze(fn, post, cq, local, target):
    if not callable(fn):
        raise Wrong("answer with your function, as the cell does: lambda: stop_and_reach.")
    from rdmalab.lessons import freeze
    _judge(freeze.run(fn, post, cq, local, target))


def _judge(result):
    """Wrong (or NotYet) with what this run showed, in the order a learner would fix it."""
    from rdmalab.errors import status_name
    from rdmalab.lessons import freeze
    e = v.enums
    d, rec, error, answer = result.data, result.record, result.error, result.answer
    names = {int(e.IBV_WR_RDMA_WRITE): "WRITE", int(e.IBV_WR_RDMA_READ): "READ",
             int(e.IBV_WR_ATOMIC_FETCH_AND_ADD): "FETCH_AND_ADD"}
    name = lambda post: names.get(post["opcode"], freeze._name(post["opcode"]))   # noqa: E731
    if isinstance(error, NotImplementedError):
        raise NotYet()
    if rec.sends and rec.sends[-1]["outcome"] == "blocked":
        raise Wrong(f"{error}. A stopped process never reads its socket, so a blocking send() waits for ever once "
                    "the kernel's buffers are full (the lesson gave up on it).",
                    "sock.setblocking(False) first; then send() raises BlockingIOError where it would block.")
    if error is not None:
        raise Wrong(f"your function raised {type(error).__name__}: {error}", HINT)
    if not rec.posts and not rec.sends and answer is None:
        raise NotYet("nothing posted, nothing sent: your function is still the skeleton.")
    for i, post in enumerate(rec.posts):
        if post["target"] != "stopped":
            early = any(p["target"] == "stopped" for p in rec.posts[:i])
            raise Wrong(f"the target was {post['target']}, not stopped, when you posted the {name(post)}"
                        + (": you continued it before this post." if early else
                           f" (the lesson waited {freeze.STOP_SETTLE_S} s for a SIGSTOP to take hold)."), ORDER_HINT)
    posted = [name(p) for p in rec.posts]
    for needed in ("WRITE", "READ", "FETCH_AND_ADD"):
        if needed not in posted:
            raise Wrong(f"no {needed} was posted (you posted: {', '.join(posted) or 'nothing'}).", HINT)
    if len(rec.polled) < len(rec.posts):
        raise Wrong(f"you posted {len(rec.posts)} work requests and polled {len(rec.polled)} completions: a WR is "
                    "done, and its result yours to read, only when its completion is polled; until then you know "
                    "nothing of it (on a NIC, post_send returns before anything is sent).",
                    "poll after each post: rc.wait_for_completion(cq) returns the completion; check its status.")
    for read in rec.reads:
        for i, post in enumerate(rec.posts):
            start, end = post["local_offset"], post["local_offset"] + post["length"]
            if name(post) != "WRITE" and read["offset"] < end and read["offset"] + read["length"] > start \
                    and read["polled_before"] <= i:
                raise Wrong(f"you read local bytes {read['offset']}..{read['offset'] + read['length'] - 1} before "
                            f"polling the {name(post)}'s completion: until it is polled nothing says its bytes "
                            "have come (a NIC writes them by DMA after post_send has returned).",
                            "poll the completion first, then read what the WR brought.")
    for post, polled in zip(rec.posts, rec.polled):
        if polled["status"] != 0:
            raise Wrong(f"the {name(post)} completed with status {polled['status']} ({status_name(polled['status'])}).",
                        HINT)
    if not isinstance(answer, dict) or not set(KEYS) <= set(answer):
        raise Wrong(f"return a dict with {', '.join(KEYS)}, as the skeleton says (you returned {answer!r:.80}).")
    if list(answer["statuses"]) != [c["status"] for c in rec.polled]:
        raise Wrong(f"your statuses {list(answer['statuses'])} are not the ones you polled "
                    f"({[c['status'] for c in rec.polled]}): return each completion's wc.status.")
    if answer["read_back"] != d["pattern"]:
        early = posted.index("READ") < posted.index("WRITE")
        raise Wrong("read_back is not the pattern you wrote: " + (
            "the READ was posted before the WRITE, so it brought back what was there before." if early else
            f"the READ brings the target's bytes 1024..1087 into your local 64..127 (you returned "
            f"{bytes(answer['read_back'])[:16]!r}...)."), "local.read(64, 64) once the READ's completion is polled.")
    adds = posted.count("FETCH_AND_ADD")
    if not d["counter_before"] <= _int(answer["old_counter"]) < d["counter_before"] + adds:
        raise Wrong(f"old_counter is {answer['old_counter']!r}; the counter held {d['counter_before']} before your "
                    "FETCH_AND_ADD, which writes that old value into your local bytes 128..135.",
                    'int.from_bytes(local.read(8, 128), "little") once its completion is polled.')
    if not rec.sends:
        raise Wrong("nothing was sent on the socket: push it until the kernel would block.", HINT)
    running = [s for s in rec.sends if s["target"] != "stopped"]
    if running:
        raise Wrong(f"the target was {running[0]['target']} when you pushed the socket: the experiment is what the "
                    "kernel takes for a process that cannot run.", ORDER_HINT)
    if not d["tcp_stalled"]:
        raise Wrong(f"you stopped sending after {answer['tcp_bytes']} bytes while the socket still took more: push "
                    "until send() raises BlockingIOError (the kernel's buffers are full).", HINT)
    if _int(answer["tcp_bytes"]) != d["tcp_bytes_before_stall"]:
        raise Wrong(f"you counted {answer['tcp_bytes']} bytes; the kernel took {d['tcp_bytes_before_stall']} (the "
                    "target received them once continued): add up what each send() returned, which may be less "
                    "than you gave it.", HINT)
    if d["left_stopped"]:
        raise Wrong("the target was still stopped when your function returned (the lesson continued it): continue "
                    "it yourself, os.kill(pid, signal.SIGCONT), once the socket would block.", ORDER_HINT)
    if not d["target_found_pattern"] or d["counter_after"] != d["counter_before"] + adds:
        raise Wrong(f"continued, the target did not find what you posted (pattern found: {d['target_found_pattern']}, "
                    f"counter {d['counter_before']} -> {d['counter_after']}).", HINT)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None if value is None else -1


@reference("one-sided.freeze")
def _freeze():
    return stop_and_reach


def stop_and_reach(pid, post, cq, local, sock):
    import os
    import signal
    e = v.enums
    os.kill(pid, signal.SIGSTOP)                              # from here on the target runs no instruction
    statuses = []
    for opcode, length, remote_offset, local_offset in ((e.IBV_WR_RDMA_WRITE, 64, 1024, 0),   # the pattern in
                                                        (e.IBV_WR_RDMA_READ, 64, 1024, 64),   # and back out
                                                        (e.IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 3072, 128)):
        post(opcode, length, remote_offset, local_offset)
        statuses.append(rc.wait_for_completion(cq).status)   # polled: only now is its result ours to read
    sock.setblocking(False)
    pushed = 0
    try:
        while True:
            pushed += sock.send(bytes(65536))                 # what the kernel took into its buffers
    except BlockingIOError:                                   # they are full: a blocking send() would wait here
        pass
    os.kill(pid, signal.SIGCONT)
    return {"statuses": statuses, "read_back": local.read(64, 64),
            "old_counter": int.from_bytes(local.read(8, 128), "little"), "tcp_bytes": pushed}
