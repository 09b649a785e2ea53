"""MPI_Allreduce timed as rdmalab.allreduce.ranks times its own: run under mpiexec, prints JSON on rank 0.

    mpiexec -n 2 python -m rdmalab.allreduce.mpi --counts 262144 --dtype float32 --iters 10

The reference: a production MPI (MPICH from PyPI, through mpi4py) on the same machine, same sizes.
launcher() finds the mpiexec that starts it: MPICH's (Hydra), the one the mpich wheel puts beside this Python.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from rdmalab.errors import RdmalabError


def launcher():
    """The path of MPICH's mpiexec: beside this Python (the mpich wheel's, which a venv used without activation
    does not have on PATH), else on PATH. Judged by what it is, not its name: another MPI's mpiexec (Open MPI's,
    say) starts ranks that never see each other through the lab's mpi4py, so it is refused, saying whose it is."""
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if found is None:
        raise RdmalabError("no mpiexec: pip install mpi4py mpich (the lab's dependencies include them)")
    try:
        said = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
        said = (said.stdout + said.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RdmalabError(f"{found} does not run ({e}): pip install --force-reinstall mpich") from None
    if "HYDRA" not in said:
        raise RdmalabError(f"{found} is not MPICH's mpiexec (it says: {said.splitlines()[0] if said else 'nothing'!r}): "
                           "the lab's mpi4py runs on MPICH; pip install mpich into this Python's environment, "
                           f"which puts Hydra's mpiexec in {os.path.dirname(sys.executable)}")
    return found


def main(argv=None):
    import numpy as np
    from mpi4py import MPI
    p = argparse.ArgumentParser()
    p.add_argument("--counts", required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--iters", default="10", help="timed AllReduces: one number, or one per count")
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rows = []
    counts = [int(c) for c in args.counts.split(",")]
    iters = [int(i) for i in args.iters.split(",")]
    if len(iters) not in (1, len(counts)):
        p.error(f"--iters: one number, or one per count ({len(counts)}), not {len(iters)}")
    for count, n in zip(counts, iters * len(counts) if len(iters) == 1 else iters):
        x = np.full(count, comm.rank + 1, dtype=args.dtype)
        y = np.empty_like(x)
        for _ in range(args.warmup):
            comm.Allreduce(x, y, op=MPI.SUM)
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(n):
            comm.Allreduce(x, y, op=MPI.SUM)
        elapsed = comm.reduce((time.perf_counter() - start) / n, op=MPI.MAX, root=0)
        wrong = comm.reduce(int(np.count_nonzero(y != comm.size * (comm.size + 1) // 2)), op=MPI.SUM, root=0)
        rows.append({"count": count, "time": elapsed, "wrong": wrong})
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "library": MPI.Get_library_version().splitlines()[0], "rows": rows}))


if __name__ == "__main__":
    main()
