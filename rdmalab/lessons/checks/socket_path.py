"""The socket path lesson (socket-path): its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference


PINGPONGS, MESSAGE = 100, 64 * 1024


@exercise("socket-path.predict", "Predict the client's cost of 100 ping-pongs of 64 KiB over TCP",
          hints=["Count per message: the client write()s it once and read()s the echo at least once; "
                 "every byte crosses the user/kernel boundary on the way out and again on the way back."])
def _check_predict(answer):
    if not isinstance(answer, dict) or not {"writes", "reads_at_least", "bytes_copied"} <= set(answer):
        raise Wrong("answer with a dict: {'writes': ..., 'reads_at_least': ..., 'bytes_copied': ...}")
    if answer["writes"] != PINGPONGS:
        raise Wrong(f"writes: {answer['writes']} is not it.",
                    "The client writes each of its 100 messages once; the echo is the server's write, not the client's.")
    if answer["reads_at_least"] != PINGPONGS:
        raise Wrong(f"reads_at_least: {answer['reads_at_least']} is not it.",
                    "Each echo needs at least one read() (a 64 KiB message may arrive in pieces: more, never fewer).")
    if answer["bytes_copied"] != 2 * PINGPONGS * MESSAGE:
        raise Wrong(f"bytes_copied: {answer['bytes_copied']:,} is not it.",
                    "Sent bytes are copied into the kernel, and the echo is copied out of it again: count both ways.")


@reference("socket-path.predict")
def _predict():
    return {"writes": 100, "reads_at_least": 100, "bytes_copied": 2 * 100 * 64 * 1024}


# socket-path.receiver-costs: the learner's function takes one row of a bench run (a ping-pong's or a stream's) and
# returns the receiver's read() calls per message and the CPU copies of each byte on its way to the receiver. The
# check cannot know what a measured row should give without the formula, so it gives the function rows made up
# with a distinct number for every counter (ROWS: a ping-pong's, whose echo flows back, and a stream's, which only
# acks once at the end) and names each slip by the number it would give.
def _row(n, size, sender, receiver):
    keys = ("read_syscalls", "write_syscalls", "bytes_read", "bytes_written")
    return {"iterations": n, "size": size, "initiator": dict(zip(keys, sender)), "target": dict(zip(keys, receiver)),
            "bytes_copied_by_cpu": sum(sender[2:]) + sum(receiver[2:])}   # as rdmalab.bench counts it: both ways


ROWS = {   # what each side counted: read() calls, write() calls, bytes read, bytes written
    "ping-pong": _row(200, 4096, (260, 200, 819_200, 819_200), (340, 200, 819_200, 819_200)),
    "stream": _row(50, 1 << 20, (1, 50, 1, 52_428_800), (800, 1, 52_428_800, 1)),
}
COSTS_HINT = ("Per message: the receiver (row['target']) counted its read() calls; divide by row['iterations']. "
              "Per byte: a byte on its way is copied into the kernel by the sender's write() and out of it by the "
              "receiver's read(); divide those bytes by the bytes sent, iterations x size.")


def _slips(row):
    """{what the slip is: (reads, copies) it gives, None where it changes the other figure}."""
    n, size = row["iterations"], row["size"]
    s, r = row["initiator"], row["target"]
    sent = n * size
    return {
        "reads: those are the sender's counters (row['initiator']); the receiver is row['target']":
            [s["read_syscalls"] / n, s["write_syscalls"] / n, (s["read_syscalls"] + s["write_syscalls"]) / n],
        "reads: the receiver's write() calls are counted too; in a ping-pong they are the echo, its reply, "
        "not its receiving": [(r["read_syscalls"] + r["write_syscalls"]) / n],
        "reads: that is per byte; count per message (divide by row['iterations'])": [r["read_syscalls"] / sent],
        "reads: that is the whole run's count; count per message (divide by row['iterations'])": [r["read_syscalls"]],
        "copies: that is bytes per message; count copies per byte (divide by the bytes sent, iterations x size)":
            [(s["bytes_written"] + r["bytes_read"]) / n, r["bytes_read"] / n, s["bytes_written"] / n],
        "copies: the echo is counted; in a ping-pong the server's write() and the client's read() carry the reply "
        "back: count a message's copies on its way to the receiver":
            [(s["bytes_written"] + s["bytes_read"] + r["bytes_read"] + r["bytes_written"]) / sent],
        "copies: only one copy is counted; the sender's write() copies each byte into the kernel, the receiver's "
        "read() copies it out again": [r["bytes_read"] / sent, s["bytes_written"] / sent,
                                       (r["bytes_read"] + r["bytes_written"]) / sent],
        "copies: that is the whole run's bytes; divide by the bytes sent (iterations x size)":
            [s["bytes_written"] + r["bytes_read"]],
    }


def _close(a, b):
    return abs(a - b) <= 1e-3 * max(abs(b), 1e-12)


@exercise("socket-path.receiver-costs", "The TCP receiver's cost, from its counters",
          hints=["The receiver is row['target']; per message divides by row['iterations'], "
                 "per byte by the bytes sent."])
def _check_receiver_costs(costs):
    if not callable(costs):
        raise Wrong("answer with your function, as the cell does: lambda: my_receiver_costs.")
    right = _receiver_costs()
    for name, row in ROWS.items():
        got = costs({**row, "initiator": dict(row["initiator"]), "target": dict(row["target"])})
        if got is None:
            raise NotYet()
        try:
            reads, copies = (float(x) for x in got)
        except (TypeError, ValueError):
            raise Wrong(f"your function returned {got!r}: return two numbers, reads, copies.") from None
        want = right(row)
        for figure, value, wanted in (("reads", reads, want[0]), ("copies", copies, want[1])):
            if _close(value, wanted):
                continue
            for slip, values in _slips(row).items():
                if slip.startswith(figure) and any(_close(value, v) for v in values):
                    raise Wrong(f"for a {name} row, {figure} = {value:.4g}: {slip.split(': ', 1)[1]}.", COSTS_HINT)
            raise Wrong(f"for a {name} row of {row['iterations']} messages of {row['size']:,} B, {figure} = "
                        f"{value:.4g} is not it.", COSTS_HINT)


@reference("socket-path.receiver-costs")
def _receiver_costs():
    def my_receiver_costs(row):
        n, size = row["iterations"], row["size"]
        sender, receiver = row["initiator"], row["target"]
        reads = receiver["read_syscalls"] / n                                      # per message
        copies = (sender["bytes_written"] + receiver["bytes_read"]) / (n * size)   # into the kernel, and out again
        return reads, copies
    return my_receiver_costs
