"""The tests rdmalab bench runs, by perftest's names, and their defaults."""
from rdmalab.errors import RdmalabError


class BenchError(RdmalabError):
    """A benchmark could not run or its peer failed; the message says which and why."""


class Test:
    def __init__(self, name, title, kind, transport, rtt_factor=2, passive_target=False):
        self.name, self.title, self.kind, self.transport = name, title, kind, transport
        self.rtt_factor, self.passive_target = rtt_factor, passive_target


TESTS = {t.name: t for t in [
    Test("write_lat", "RDMA_Write Latency", "lat", "rdma"),
    Test("read_lat", "RDMA_Read Latency", "lat", "rdma", rtt_factor=1, passive_target=True),
    Test("send_lat", "Send Latency", "lat", "rdma"),
    Test("write_bw", "RDMA_Write BW", "bw", "rdma", passive_target=True),
    Test("tcp_lat", "TCP Latency", "lat", "tcp"),
    # a remote read through the server's CPU: 8 B request, `size` bytes back, full round trip like read_lat
    Test("tcp_rr", "TCP Request/Response", "lat", "tcp", rtt_factor=1),
    Test("tcp_bw", "TCP BW", "bw", "tcp"),
]}
ALL_SIZES = [2 ** k for k in range(1, 24)]          # perftest -a: 2 B .. 8 MiB
MAX_SIZE = 64 << 20                                 # largest single size (--size)
DEFAULT_SIZE = {"lat": 2, "bw": 65536}              # perftest's defaults
DEFAULT_ITERS = {"lat": 1000, "bw": 5000}
BYTES_PER_SIZE = 1 << 30                            # a sweep moves at most 1 GiB per size
TX_DEPTH, CQ_MOD = 128, 100                         # perftest's bandwidth defaults
EVENT_TESTS = ("read_lat", "send_lat", "write_bw")    # what can sleep on completion events


def iterations_for(test, size, iters=None):
    """`iters` if given; else perftest's default, capped so that one size moves at most BYTES_PER_SIZE."""
    if iters:
        return iters
    return max(8, min(DEFAULT_ITERS[TESTS[test].kind], BYTES_PER_SIZE // max(size, 1)))
