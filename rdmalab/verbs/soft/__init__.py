"""The emulated NIC: a pyverbs-compatible RDMA device, `soft0`, in pure Python and numpy.

Its modules carry pyverbs' names (device, pd, mr, cq, qp, wr, addr, srq, enums, libibverbs_enums,
pyverbs_error), so an unmodified pyverbs program runs on it with
`python -m rdmalab.verbs.run program.py`.

What it models faithfully, and what it does not, is in docs/emulated-nic.md. In one paragraph:
registered memory and queue pairs live in shared memory; a peer process maps them and carries out
your RDMA WRITE into your memory while your process runs no code. The initiator's CPU does the work
a NIC's DMA engine would do; there is no wire, no packet loss, and timing is that of host memory.
That is its default link; on its udp link (RDMALAB_SOFT_LINK=udp, docs/wire.md) a NIC process per
host carries every request as RoCEv2 packets, with loss and retransmission.
Checks, completion statuses, errno values and QP states follow real Soft-RoCE (rxe), which the
conformance suite (tests/conformance) checks on both.

The rule of the package: it imports rdmalab.errors, rdmalab.proc, rdmalab.settings and rdmalab.wire only, and the rest of
the lab reaches it through rdmalab.verbs (its provider switch, and emulated.py for what only soft0 tells).
"""
__version__ = "rdmalab-soft"
