"""rdmalab's errors, and what a failed verb or a bad completion most likely means.

Real pyverbs reports errno numbers and completion status codes; these turn them into the next step, and
name libibverbs' numbers (statuses, QP states, WR opcodes) for every module of the lab, soft0's too.
Nothing here imports a provider, so it works even when choosing one fails.
"""
import errno


class RdmalabError(RuntimeError):
    """What rdmalab raises on purpose: its message says what happened and what to do. The `rdmalab`
    command prints such a message and exits 1; any other exception is a bug, and keeps its traceback."""


class RequestError(RdmalabError, ValueError):
    """A request refused before anything ran: a size, a rank count, an algorithm, a file or a setting
    that cannot be (a ValueError too, as Python's own checks of arguments are)."""


class ProviderError(RdmalabError):
    """The provider asked for cannot run here; the message says what to do."""

# libibverbs' numbers named, without its prefix, the same on every provider (verbs.h): every ibv_wc_status
# (IBV_WC_...), ibv_qp_state (IBV_QPS_...) and ibv_wr_opcode (IBV_WR_...)
WC_STATUS_NAMES = dict(enumerate((
    "SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR", "MW_BIND_ERR",
    "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR",
    "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR",
    "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR", "TM_ERR", "TM_RNDV_INCOMPLETE")))
QP_STATE_NAMES = dict(enumerate(("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN")))
WR_OPCODE_NAMES = {**dict(enumerate((
    "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP",
    "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV", "TSO", "DRIVER1"))), 14: "FLUSH", 15: "ATOMIC_WRITE"}

# What the port counters a broken connection moves are called: rxe's hw_counters (soft0 keeps the same
# names, verbs/soft/counters.py) and mlx5's (Linux's drivers/infiniband/hw/mlx5/counters.c)
RXE_ERROR_COUNTERS = (
    "completer_retry_err",     # a request resent after an ACK timeout
    "retry_exceeded_err",      # ... retry_cnt times already: RETRY_EXC_ERR
    "rcvd_rnr_err",            # an RNR NAK received (the requester)
    "send_rnr_err",            # an RNR NAK sent (the responder: no receive posted)
    "retry_rnr_exceeded_err",  # ... rnr_retry times already: RNR_RETRY_EXC_ERR
    "out_of_seq_request",      # a request ahead of the PSN expected (rxe NAKs the first, then drops)
    "duplicate_request")       # a request behind it: one already taken
MLX5_ERROR_COUNTERS = ("local_ack_timeout_err", "packet_seq_err", "out_of_sequence", "rnr_nak_retry_err",
                       "implied_nak_seq_err", "duplicate_request", "out_of_buffer", "req_cqe_error", "resp_cqe_error",
                       "req_remote_invalid_request", "req_remote_access_errors", "resp_remote_access_errors",
                       "resp_local_length_error", "req_transport_retries_exceeded", "req_rnr_retries_exceeded")
STATUS_HINTS = {
    1: "a receive buffer is smaller than the message sent into it, or an SGE is longer than its MR",
    2: "a work request names an lkey that is not a registered MR of this PD (Soft-RoCE and soft0 say so "
       "with this status), or breaks the QP's limits",
    4: "the local SGE lies outside its MR, or the MR lacks the access flag the operation needs "
       "(LOCAL_WRITE to receive into it or RDMA READ into it), or (on mlx5 and other hardware NICs) its "
       "lkey is not a registered MR of this PD",
    5: "the QP was already in ERR: an earlier completion failed; look for that one first",
    9: "the peer rejected the request: message longer than the peer accepts, or an operation its QP "
       "does not allow",
    10: "the peer's rkey or address range is wrong, or the peer's MR or QP lacks REMOTE_WRITE / "
        "REMOTE_READ / REMOTE_ATOMIC",
    11: "the peer could not complete the operation: typically a SEND larger than its posted receive",
    12: "the peer never answered: wrong destination QP number or PSN, the peer QP not in RTR/RTS, or "
        "a GID that cannot route (on RoCE use the IPv4-mapped RoCE v2 GID: rdmalab.verbs.routable_gid_index)",
    13: "the peer had no receive posted for a SEND (RNR) after all retries: post_recv before the peer sends",
    19: "the device itself failed (on soft0's udp link: this host's NIC process died; `rdmalab doctor` "
        "shows the NIC; a new program starts a new one)",
}

ERRNO_HINTS = {
    errno.ENOMEM: "the locked-memory limit is too low for this registration, or a queue is full: "
                  "raise `ulimit -l` (containers: --ulimit memlock=-1), or poll completions before posting more",
    errno.ENODATA: "that GID table entry is empty: use rdmalab.verbs.routable_gid_index(ctx, port)",
    errno.EINVAL: "an attribute or mask is wrong for this QP state transition, or the QP is not in a "
                  "state that allows the call (post_send needs RTS)",
    errno.EPERM: "not permitted: the process may lack CAP_IPC_LOCK or access to /dev/infiniband",
    errno.EACCES: "no access to /dev/infiniband/uverbs*: add the user to the 'rdma' group or run as root",
}


def status_name(status):
    return WC_STATUS_NAMES.get(status, f"status {status}")


def explain_status(status):
    """'12 (RETRY_EXC_ERR): the peer never answered: ...'"""
    hint = STATUS_HINTS.get(status)
    return f"{status} ({status_name(status)})" + (f": {hint}" if hint else "")


def explain_error(error):
    """The hint for a PyverbsRDMAError (its errno), or '' when there is none."""
    return ERRNO_HINTS.get(getattr(error, "error_code", -1), "")


class CompletionError(RdmalabError):
    """A work request completed with an error status; the message says what it likely means."""

    def __init__(self, wc, what="the work request"):
        self.wc = wc
        super().__init__(f"{what} completed with status {explain_status(wc.status)}")


def check(wc, what="the work request"):
    """Returns `wc` when it succeeded; raises CompletionError with a hint otherwise."""
    if wc.status != 0:
        raise CompletionError(wc, what)
    return wc
