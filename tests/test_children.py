"""rdmalab.proc.children: a helper that dies is reported with its own last words, whether it was the one
asked (reply) or the peer being watched while another worked (reply(watch=...)), as bench's target is."""
import pytest

from rdmalab.proc import children

REASON = "rdmalab: RDMALAB_LOCAL_PEERS='-3' is not a whole number of processes"


def test_a_watched_peer_that_dies_is_reported_with_the_reason_it_gave():
    with children.Helper("the initiator process", "tests.helpers.quits", "wait") as working, \
            children.Helper("the target process", "tests.helpers.quits", REASON) as target:
        with pytest.raises(children.HelperError) as raised:
            working.reply(timeout=30, watch=[target])
    assert str(raised.value) == f"the target process died (exit 1): {REASON}, while the initiator process was working"


def test_a_helper_asked_that_dies_is_reported_with_its_last_line():
    with children.Helper("the target process", "tests.helpers.quits", REASON) as target:
        with pytest.raises(children.HelperError) as raised:
            target.ask(reply_within=30, op="ready")
    assert str(raised.value) == f"the target process died (exit 1): {REASON}"
