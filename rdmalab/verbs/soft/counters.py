"""soft0's port counters, named as Linux's rxe names its hw_counters (/sys/class/infiniband/rxe0/ports/1/
hw_counters), for what a learner looks at when a connection breaks: resends, sequence errors, RNR NAKs.

On the shared-memory link the NIC is the program's own process (the requester and, for a peer in this
process or another, the responder run in it), so the counters are kept per process, and only these
error counters: counting every packet would put a store on the data path. On the udp link the NIC
process counts every packet (link/nic.py's COUNTERS: link.doorbell.nic_counters() reads them).
"""

NAMES = ("completer_retry_err",     # a request resent after an ACK timeout
         "retry_exceeded_err",      # ... retry_cnt times already: RETRY_EXC_ERR
         "rcvd_rnr_err",            # an RNR NAK received (the requester)
         "send_rnr_err",            # an RNR NAK sent (the responder: no receive posted)
         "retry_rnr_exceeded_err",  # ... rnr_retry times already: RNR_RETRY_EXC_ERR
         "out_of_seq_request",      # a request ahead of the PSN expected (rxe NAKs the first, then drops)
         "duplicate_request")       # a request behind it: one already taken
_counts = dict.fromkeys(NAMES, 0)


def count(name, n=1):
    _counts[name] += n


def read():
    """The counters now, as a dict."""
    return dict(_counts)
