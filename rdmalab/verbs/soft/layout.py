"""Where things live in soft0's shared-memory segments: the 64-bit words of each header.

Every segment (rdmalab.verbs.soft.shm) starts with a 4096-byte header of int64 words. The first two
and the bell are the same in all of them; the others depend on what the segment holds. These are
the parts of a verbs object that a peer's NIC may read or write, so they are the interface between
the processes of one host: change a number here and every process must agree.
"""

# every segment
W_MAGIC, W_OWNER_PID = 0, 1   # "RDMALAB" and the owner's pid (a dead owner's segments are reaped)
W_BELL, W_SLEEPERS = 14, 15   # a futex word its owner sleeps on, and whether one does (shm.Bell)

# a memory region (rdmalab-mr-<lkey>): what a NIC's translation table holds for its key
M_VALID, M_ACCESS, M_LENGTH, M_ADDR, M_PD = 2, 3, 4, 5, 6
# a memory window's binding (rdmalab-mr-<rkey> too, one segment per bind): the words above as a NIC checks
# the window's key (its access and PD; its MR's bounds, as rxe checks them), then the key of the MR whose
# bytes it opens, the window's type, and for type 2 the QP it serves (0: any QP of its PD)
M_MR, M_MW_TYPE, M_QP = 7, 8, 9

# a queue pair (rdmalab-qp-<qpn>): the part of its context a peer's NIC may see. Grouped by who writes
# them, a 64-byte cache line (8 words) each, as NICs lay out their queues' producer and consumer indices:
# a word one CPU writes for every message shares no line with words another CPU reads as it polls, or
# every message would drag the line from one CPU's cache to the other's and back ("false sharing").
# - set up by create and modify(), read by the peer's NIC for every message
Q_STATE, Q_ACCESS, Q_PD, Q_MIN_RNR_TIMER, Q_RQ_SIZE, Q_RQ_MAX_SGE = range(2, 8)
Q_ALIVE, Q_RECV_CQ = 8, 9
Q_GENERATION = 10   # bumped whenever what a responder checks changes: state, access flags, alive
Q_MAX_DEST_RD_ATOMIC = 11   # READs and atomics it may answer at once: with 0 it answers none
Q_TYPE, Q_QKEY = 12, 13   # RC, UC or UD (a datagram reaches only a UD QP), and a UD QP's Q_Key
Q_NUM, Q_SRQ = 16, 17   # the QP's own number (a type 2 window checks it), and its SRQ's (0: none)
Q_PATH_MTU = 18         # its path MTU (an IBV_MTU_* value, 0 before RTR): a WRITE's packets must fit it exactly
# - written by the peer's NIC for every message it delivers
Q_EXPECTED_PSN, Q_RQ_CONSUMED = 24, 25
Q_SEQ_NAKED = 26        # a request ahead of the expected PSN was NAKed (and counted) since the last in order
# - written by the QP's owner as it posts and polls receives
Q_RQ_POSTED, Q_RQ_POLLED = 32, 33
# - the QP number of a peer whose message waits out RNR NAKs here (0: none), written by that peer's NIC at an
#   RNR NAK and read by post_recv (a line of its own: it changes only then)
Q_RNR_WAITING = 40
# - this QP's message that waits out RNR NAKs at its peer, "parked" (requester.SendQueue.park): written by
#   this QP's NIC; the peer's NIC carries it out when a receive is posted there (requester.carry_parked)
#   and leaves its answer. Both hold an fcntl record lock on P_STATE while they use these words.
P_STATE, P_ANSWER, P_DEST, P_OPCODE, P_FLAGS, P_IMM, P_RKEY, P_REMOTE_ADDR, P_PSN, P_COUNT, P_LENGTH, P_NUM_SGE = \
    range(48, 60)
P_SGES = 64   # then (addr, length, lkey) for each SGE, or the inline data's bytes

# one slot of a receive queue, after the QP's header: the posted WR, then (once consumed) its completion
R_WR_ID, R_NUM_SGE, R_STATUS, R_OPCODE, R_BYTE_LEN, R_IMM, R_FLAGS, R_SRC_QP = range(8)   # src_qp: a datagram's sender
R_SGES = 8   # then (addr, length, lkey) for each SGE

# a completion queue (rdmalab-cq-<n>) or a completion channel (rdmalab-ch-<n>); C_EVENT_AT: when the CQ's last
# event was raised (CLOCK_MONOTONIC, ns: one clock for every process), so that its channel hands events out in order
C_ALIVE, C_ARMED, C_CHANNEL, C_EVENTS, C_EVENT_AT = 2, 3, 4, 5, 6

# a shared receive queue (rdmalab-srq-<n>): slots as a receive queue's, posted by its owner and taken
# by the NICs of the QPs on it (under a record lock); the limit arms SRQ_LIMIT_REACHED (counted in S_EVENTS)
S_ALIVE, S_SIZE, S_MAX_SGE, S_POSTED, S_TAKEN, S_LIMIT, S_EVENTS = range(2, 9)
