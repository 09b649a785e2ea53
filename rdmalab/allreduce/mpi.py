"""MPI_Allreduce timed as rdmalab.allreduce.ranks times its own: run under mpiexec, prints JSON on rank 0.

    mpiexec -n 2 python -m rdmalab.allreduce.mpi --counts 262144 --dtype float32 --iters 10

The reference: a production MPI (MPICH from PyPI, through mpi4py) on the same machine, same sizes.
"""
import argparse
import json
import time


def main(argv=None):
    import numpy as np
    from mpi4py import MPI
    p = argparse.ArgumentParser()
    p.add_argument("--counts", required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rows = []
    for count in (int(c) for c in args.counts.split(",")):
        x = np.full(count, comm.rank + 1, dtype=args.dtype)
        y = np.empty_like(x)
        for _ in range(args.warmup):
            comm.Allreduce(x, y, op=MPI.SUM)
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            comm.Allreduce(x, y, op=MPI.SUM)
        elapsed = comm.reduce((time.perf_counter() - start) / args.iters, op=MPI.MAX, root=0)
        wrong = comm.reduce(int(np.count_nonzero(y != comm.size * (comm.size + 1) // 2)), op=MPI.SUM, root=0)
        rows.append({"count": count, "time": elapsed, "wrong": wrong})
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "library": MPI.Get_library_version().splitlines()[0], "rows": rows}))


if __name__ == "__main__":
    main()
