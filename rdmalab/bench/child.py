"""A side of a benchmark: `python -m rdmalab.bench.child initiator|target`, a helper process that
opens its side of the test, connects to its peer, and serves or runs each size it is asked for."""
import sys

from rdmalab.bench.sides import make_side
from rdmalab.proc.children import answer, end_with_parent, serve


def main(role):
    end_with_parent()   # a killed or interrupted `rdmalab bench` takes its sides with it, their memory released
    state = {"side": None, "spent": None}

    def open_side(**test):
        state["side"] = make_side(role, **test)
        return state["side"].endpoint()

    def connect(peer):
        state["side"].connect(peer)
        return {"ok": True}

    def serve_size(size, iters, warmup):   # the target: ready first, then it works until the initiator is done
        state["side"].prepare(size, iters + warmup)
        answer({"ready": True})
        state["spent"] = state["side"].serve(size, iters, warmup)

    def run(**size):
        return state["side"].run(**size)

    try:
        serve({"open": open_side, "connect": connect, "serve": serve_size, "report": lambda: {"spent": state["spent"]},
               "run": run}, stop_on_error=True)
    finally:
        if state["side"] is not None:
            state["side"].close()


if __name__ == "__main__":
    main(sys.argv[1])
