"""The socket path lesson (socket-path): its exercises, each a check (raising Wrong with a hint) and a
reference solution."""
from rdmalab.lessons.exercises import Wrong, exercise, reference


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
