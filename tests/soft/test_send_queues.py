"""soft0's send queues, one interface (requester.Queue) whichever link carries their work: the shared-memory
link's RC, UC and UD queues and the udp link's, each of which the QP and its CQ use through the same
methods only (qp.py asks no queue what kind it is)."""
import inspect

import pytest

from rdmalab import verbs as v

pytestmark = pytest.mark.skipif(v.PROVIDER != "soft", reason="soft0's own send queues")


def test_every_send_queue_is_a_queue_and_carries_out_what_a_qp_asks():
    from rdmalab.verbs.soft import datagram, requester
    from rdmalab.verbs.soft.link import doorbell
    queues = [requester.SendQueue, requester.UnansweredQueue, datagram.DatagramQueue, doorbell.WireSendQueue,
              doorbell.WireDatagramQueue]
    required = [name for name, method in vars(requester.Queue).items()
                if inspect.isfunction(method) and "raise NotImplementedError" in inspect.getsource(method)]
    assert {"post", "hold", "progress", "slots_held", "waiting", "reset"} <= set(required)
    for queue in queues:
        assert issubclass(queue, requester.Queue), queue
        missing = [name for name in required if getattr(queue, name) is getattr(requester.Queue, name)]
        assert missing == [], (queue.__name__, missing)


def test_the_qp_asks_no_send_queue_what_it_is():
    import rdmalab.verbs.soft.qp as qp
    source = inspect.getsource(qp)
    assert "hasattr(send" not in source and "hasattr(self._send" not in source and ".shortcuts" not in source


def test_both_links_spend_a_retry_budget_by_one_rule():
    """requester.spend: what rxe's completer does with retry_cnt and rnr_retry, for both links' requesters."""
    from rdmalab.verbs.soft import requester
    counted = []
    left, spent = 2, []
    while left is not None:
        spent.append(left)
        left = requester.spend(left, lambda name: counted.append(name), "retry_exceeded_err")
    assert spent == [2, 1, 0] and counted == ["retry_exceeded_err"]   # two retries, then the WR fails
    assert requester.spend(7, counted.append, "x") == 7 and counted == ["retry_exceeded_err"]   # 7: for ever


def test_an_answer_that_cannot_land_whole_writes_nothing():
    """requester.land, as both links land a READ's bytes: a refused SGE anywhere, or too little room, and no
    byte of it is written, the pieces before it included."""
    from rdmalab.verbs.soft import requester
    memory = {1: bytearray(4), 2: bytearray(4)}
    view = lambda addr, length, lkey: memoryview(memory[lkey])[addr:addr + length] if lkey in memory else 4  # noqa: E731
    assert not requester.land([(0, 4, 1), (0, 4, 3)], 0, b"abcdefgh", view) and memory[1] == bytearray(4)
    assert not requester.land([(0, 4, 1)], 0, b"abcdefgh", view) and memory[1] == bytearray(4)
    assert requester.land([(0, 4, 1), (0, 4, 2)], 2, b"cdef", view)   # (a second packet's bytes, from 2 on)
    assert (memory[1], memory[2]) == (bytearray(b"\0\0cd"), bytearray(b"ef\0\0"))
