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
