"""Tests of rdmalab.wire, the RoCEv2 packet layer, judged by tshark and by a real rxe."""
