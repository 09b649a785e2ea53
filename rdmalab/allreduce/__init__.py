"""The hand-built AllReduce: N ranks sum their buffers over RDMA (or TCP), measured as nccl-tests does.

    from rdmalab import allreduce
    report = allreduce.run(ranks=4, sizes=[1 << 20], algorithm="ring", transport="rdma")   # `rdmalab allreduce`
    allreduce.measure(cluster, sizes, "ring")          # the same report on a running Cluster
    allreduce.mpi_allreduce(ranks, counts, "float32", iters)   # MPI_Allreduce, timed the same way

Modules: algorithms (Communicator: naive, ring, halving-doubling; the choices a request may make),
transports (put/signal/wait over RDMA or TCP), cluster (the host side: Cluster starts the ranks as
ipyparallel engines and gathers their results), ranks (what runs inside each engine), report
(nccl-tests' columns, MPI_Allreduce beside them), mpi (run under mpiexec), model (alpha-beta-gamma).

The rule of the package: rdmalab.allreduce imports rdmalab.verbs, rdmalab.proc, rdmalab.sockets,
rdmalab.errors and rdmalab.settings only, never rdmalab.bench or rdmalab.lessons (docs/architecture.md). Inside it imports go
one way: report -> cluster -> ranks -> algorithms, transports; nothing imports back. A request is
validated once, by the entry point the caller used (run, measure, Cluster.allreduce, Cluster.check,
Communicator.allreduce), before it reaches any rank.
"""
from rdmalab.allreduce.report import Report, busbw_table, measure, mpi_allreduce, ranks_per_cpu_note, run

__all__ = ["Report", "busbw_table", "measure", "mpi_allreduce", "ranks_per_cpu_note", "run"]
