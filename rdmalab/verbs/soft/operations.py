"""soft0's one table of work-request operations, as rxe keeps rxe_wr_opcode_info[] (rxe_opcode.c): for each
IBV_WR_* opcode, what the rest of soft0 needs to know of it. Every other module reads this table.

Adding an operation: a row here, the code that carries it out (requester.attempt and responder.respond on
the shm link, link/transport.py's Requester and Responder on the udp link) and its tests. The packets'
opcodes (BTH's RC_SEND_FIRST, ...) are another table: wire/opcodes.py.
"""
from typing import NamedTuple

from .constants import (
    IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_WRITE,
    IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_FLUSH, IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_RDMA_READ,
    IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND, IBV_QP_EX_WITH_SEND_WITH_IMM,
    IBV_QP_EX_WITH_SEND_WITH_INV, IBV_WC_BIND_MW, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_LOCAL_INV,
    IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_SEND, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_ATOMIC_WRITE, IBV_WR_BIND_MW, IBV_WR_FLUSH, IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV)

RC, UC, UD = IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD


class Operation(NamedTuple):
    opcode: int          # IBV_WR_*
    message: str         # what its request is on the wire: SEND, RDMA_WRITE, RDMA_READ, ATOMIC; "" if it
                         # never leaves our NIC (binding and invalidating memory windows)
    completion: int      # the IBV_WC_* opcode of the sender's completion
    access: int          # the access the target's MR needs (IBV_ACCESS_REMOTE_*; 0: a SEND needs none)
    qp_types: tuple      # QP types that carry it out; on any other, rxe and soft0 complete it with LOC_QP_OP_ERR
    ex_flag: int         # the IBV_QP_EX_WITH_* bit a QPEx asks for its wr_* builder with
    ex_qp_types: tuple   # QP types whose QPEx may ask for it (rxe's RXE_SUP_*_QP_SEND_OPS_FLAGS)
    imm: bool = False    # carries immediate data
    inv: bool = False    # carries an rkey for the target to invalidate

    @property
    def consumes_receive(self):   # the target completes it on a receive it posted
        return self.message == "SEND" or self.imm


TABLE = (
    #          opcode                      message       completion         access
    Operation(IBV_WR_RDMA_WRITE,          "RDMA_WRITE", IBV_WC_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE,
              (RC, UC), IBV_QP_EX_WITH_RDMA_WRITE, (RC, UC)),
    Operation(IBV_WR_RDMA_WRITE_WITH_IMM, "RDMA_WRITE", IBV_WC_RDMA_WRITE, IBV_ACCESS_REMOTE_WRITE,
              (RC, UC), IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, (RC, UC), imm=True),
    Operation(IBV_WR_SEND,                "SEND",       IBV_WC_SEND,       0,
              (RC, UC, UD), IBV_QP_EX_WITH_SEND, (RC, UC, UD)),
    Operation(IBV_WR_SEND_WITH_IMM,       "SEND",       IBV_WC_SEND,       0,
              (RC, UC, UD), IBV_QP_EX_WITH_SEND_WITH_IMM, (RC, UC, UD), imm=True),
    Operation(IBV_WR_RDMA_READ,           "RDMA_READ",  IBV_WC_RDMA_READ,  IBV_ACCESS_REMOTE_READ,
              (RC,), IBV_QP_EX_WITH_RDMA_READ, (RC,)),
    Operation(IBV_WR_ATOMIC_CMP_AND_SWP,  "ATOMIC",     IBV_WC_COMP_SWAP,  IBV_ACCESS_REMOTE_ATOMIC,
              (RC,), IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, (RC,)),
    Operation(IBV_WR_ATOMIC_FETCH_AND_ADD, "ATOMIC",    IBV_WC_FETCH_ADD,  IBV_ACCESS_REMOTE_ATOMIC,
              (RC,), IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, (RC,)),
    # rxe lets a UC QPEx ask for SEND_WITH_INV, but its requester has no UC opcode for it
    Operation(IBV_WR_SEND_WITH_INV,       "SEND",       IBV_WC_SEND,       0,
              (RC,), IBV_QP_EX_WITH_SEND_WITH_INV, (RC, UC), inv=True),
    Operation(IBV_WR_LOCAL_INV,           "",           IBV_WC_LOCAL_INV,  0,
              (RC, UC), IBV_QP_EX_WITH_LOCAL_INV, (RC,)),
    Operation(IBV_WR_BIND_MW,             "",           IBV_WC_BIND_MW,    0,
              (RC, UC), IBV_QP_EX_WITH_BIND_MW, (RC, UC)),
    # a QPEx may ask for these (rxe's flags include them), but soft0 carries neither out: it completes them
    # with LOC_QP_OP_ERR, as rxe on Linux 6.1 does an ATOMIC_WRITE
    Operation(IBV_WR_FLUSH,               "FLUSH",      0,                 0, (), IBV_QP_EX_WITH_FLUSH, (RC,)),
    Operation(IBV_WR_ATOMIC_WRITE,        "ATOMIC_WRITE", 0,               0, (), IBV_QP_EX_WITH_ATOMIC_WRITE, (RC,)),
)
OPERATIONS = {op.opcode: op for op in TABLE}


def _opcodes(test):
    return frozenset(op.opcode for op in TABLE if test(op))


# what each part of soft0 asks of an opcode, read off the table
CARRIED_OUT = _opcodes(lambda op: op.qp_types)
REMOTE = _opcodes(lambda op: op.message in ("SEND", "RDMA_WRITE", "RDMA_READ", "ATOMIC") and op.qp_types)
NEEDS_ACCESS = {op.opcode: op.access for op in TABLE if op.opcode in REMOTE}   # the peer checks this access
CARRIES_DATA = _opcodes(lambda op: op.message in ("SEND", "RDMA_WRITE"))        # the request holds our bytes
ANSWERS_DATA = _opcodes(lambda op: op.message in ("RDMA_READ", "ATOMIC") and op.qp_types)   # the answer holds bytes
ATOMICS = _opcodes(lambda op: op.message == "ATOMIC")
CONSUMES_RECEIVE = _opcodes(lambda op: op.consumes_receive)
WITH_IMM = _opcodes(lambda op: op.imm)
LOCAL_OPERATIONS = _opcodes(lambda op: op.message == "" and op.qp_types)      # done by our own NIC, in order
WC_OPCODE = {op.opcode: op.completion for op in TABLE if op.qp_types}
MESSAGE = {op.opcode: op.message for op in TABLE}
# the send operations an extended QP of each type may ask for (send_ops_flags, IBV_QP_EX_WITH_*)
SEND_OPS = {qp_type: sum(op.ex_flag for op in TABLE if qp_type in op.ex_qp_types) for qp_type in (RC, UC, UD)}
