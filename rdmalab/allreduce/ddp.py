"""The training lesson's model in PyTorch: DistributedDataParallel on the ranks, its gradients summed by Gloo or
by your ring, registered as DDP's communication hook. Needs PyTorch (an optional extra: pip install torch).

    # on every rank (Cluster.run passes each rank's Communicator; the host side is rdmalab.lessons.training):
    cluster.run(ddp.train, {"hook": None, "master": "127.0.0.1", "steps": 100})      # DDP on Gloo
    cluster.run(ddp.train, {"hook": ring_hook, "ring": my_ring, ...})                # DDP, your ring summing

How DDP hands gradients to a transport: it packs them in buckets (last layer first, a size cap each, as lesson
10's) and, once a bucket's gradients are final, calls the hook registered with model.register_comm_hook(state,
hook): hook(state, bucket), where bucket.buffer() is the bucket's gradients as one flat tensor. The hook returns
a torch.futures.Future that completes with the bucket's *averaged* gradients (the sum over the ranks divided by
their number: DDP's default hook, Gloo's or NCCL's all_reduce, divides); DDP waits for every bucket's future
before backward returns, then copies the results into each parameter's .grad. Gloo's all_reduce returns its
future at once and completes it from Gloo's own threads (backward goes on: overlap); ring_hook below completes
it before returning (backward waits for each bucket, as lesson 10's step without overlap).

The process group DDP needs (it broadcasts rank 0's parameters when it starts, and its hooks default to its
all_reduce) is Gloo's, over TCP, joined once per rank process: rank 0 serves a TCPStore on a free port and
the ranks learn the port through your transport (an AllReduce of one number)."""
import datetime
import os
import time

import numpy as np

from rdmalab.allreduce import training

_group = {}   # this rank's process group: its store stays open while the rank lives


def available():
    """Whether PyTorch imports here (it is an optional extra: pip install torch)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


class HookState:
    """What ring_hook needs (DDP passes it back on every call): the rank's Communicator and the ring to run."""

    def __init__(self, comm, ring):
        self.comm, self.ring = comm, ring


def ring_hook(state, bucket):
    """DDP's communication hook, the bucket's gradients summed by a ring over this lab's transport."""
    import torch
    grads = bucket.buffer()                          # the bucket's gradients, one flat float32 tensor
    work = state.comm.buffer(grads.numel())          # the registered data region: what the ring works on
    work[:] = grads.numpy()
    state.ring(state.comm, work)                     # summed over the ranks, in place
    grads.copy_(torch.from_numpy(work)).div_(state.comm.size)   # averaged, as DDP's own hook does
    done = torch.futures.Future()
    done.set_result(grads)
    return done


def join(comm, master, timeout=120):
    """Join (once per rank process) the Gloo process group of comm's ranks; its store served by rank 0 at master."""
    import torch.distributed as dist
    if dist.is_initialized():
        if dist.get_world_size() != comm.size:
            raise RuntimeError(f"this rank is in a process group of {dist.get_world_size()} ranks, not {comm.size}")
        return
    wait = datetime.timedelta(seconds=timeout)
    if master.startswith("127.") or master == "localhost":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")   # (else Gloo takes the host name's interface)
    port = np.zeros(comm.size, np.float32)
    if comm.rank == 0:
        _group["store"] = dist.TCPStore(master, 0, comm.size, True, timeout=wait, wait_for_workers=False)
        port[0] = _group["store"].port
    port = int(comm.allreduce(port)[0])             # (a port is exact in float32)
    if comm.rank:
        _group["store"] = dist.TCPStore(master, port, comm.size, False, timeout=wait)
    dist.init_process_group("gloo", store=_group["store"], rank=comm.rank, world_size=comm.size, timeout=wait)


def model_of(params):
    """lesson 10's MLP as torch.nn layers, holding the same numbers as params (numpy's [W1, b1, ...], W as in x out)."""
    import torch
    layers = []
    for i in range(0, len(params), 2):
        linear = torch.nn.Linear(*params[i].shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(params[i].T.copy()))
            linear.bias.copy_(torch.from_numpy(params[i + 1]))
        layers += [linear, torch.nn.ReLU()] if i + 2 < len(params) else [linear]
    return torch.nn.Sequential(*layers)


def numpy_params(model):
    """The model's parameters as lesson 10's numpy list [W1, b1, ...], W as in x out."""
    out = []
    for layer in model:
        if hasattr(layer, "weight"):
            out += [layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy()]
    return out


def train(comm, options):
    """DDP training on this rank's shards, the same batches as rdmalab.allreduce.training.train; returns its step
    records (the whole step, and the same step's compute alone, measured without the AllReduce by DDP's no_sync),
    the replicas' fingerprints after every step and the test accuracy.

    options: hook (None: DDP's own, Gloo's all_reduce; else a DDP comm hook, called with HookState(comm, ring)),
    ring (the function the hook runs, as lesson 09's), master (rank 0's address for the store), steps, batch,
    width, depth, lr, seed, bucket_cap (bytes), keep_params."""
    import torch
    from torch.nn.parallel import DistributedDataParallel
    o = {"hook": None, "ring": "ring", "master": "127.0.0.1", "steps": 100, "batch": 128, "width": training.WIDTH,
         "depth": training.DEPTH, "lr": 0.1, "seed": 0, "bucket_cap": training.BUCKET_CAP, **options}
    torch.set_num_threads(1)                         # (a CPU a rank, as the numpy ranks)
    join(comm, o["master"])
    p, r = comm.size, comm.rank
    train_x, train_y, test_x, test_y = training.digits()
    params = training.init(training.layer_sizes(o["width"], o["depth"]), o["seed"])
    model = DistributedDataParallel(model_of(params), bucket_cap_mb=o["bucket_cap"] / 2 ** 20)
    if o["hook"] is not None:
        from rdmalab.allreduce.algorithms import REGISTRY
        ring = o["ring"] if callable(o["ring"]) else REGISTRY[o["ring"]].run
        model.register_comm_hook(HookState(comm, ring), o["hook"])
    optimizer = torch.optim.SGD(model.parameters(), lr=o["lr"])
    rng = np.random.default_rng(o["seed"] + 1)
    shards = [rng.choice(len(train_x), o["batch"], replace=False)[r::p] for _ in range(o["steps"])]

    def step(rows, sync=True):
        x, y = torch.from_numpy(train_x[rows]), torch.from_numpy(train_y[rows])
        optimizer.zero_grad()
        start = time.perf_counter()
        if sync:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()                          # the buckets' AllReduces run inside, as backward goes on
        else:
            with model.no_sync():                    # the same compute, no AllReduce
                torch.nn.functional.cross_entropy(model(x), y).backward()
        return start, time.perf_counter() - start

    records, prints = [], []
    for k, rows in enumerate(shards):
        start, backward = step(rows)
        t = time.perf_counter()
        optimizer.step()
        records.append({"step": k, "start": start, "backward": backward, "update": time.perf_counter() - t})
        prints.append([training.digest(param) for param in numpy_params(model.module)])
    alone = [step(rows, sync=False)[1] for rows in shards[-min(20, len(shards)):]]   # nothing updated
    optimizer.zero_grad()
    torch.distributed.barrier()
    final = numpy_params(model.module)
    return {"rank": r, "records": records, "prints": prints, "compute_alone": alone,
            "accuracy": training.accuracy(final, test_x, test_y),
            "params": final if options.get("keep_params") else None}


def busbw(comm, options):
    """Gloo's all_reduce and the ring's, the same sizes, side by side on every rank: {size: (gloo_s, ring_s)},
    each the median of `iters` AllReduces of float32 elements after a warm-up (nccl-tests' busbw is
    bytes x 2(p-1)/p over that time)."""
    import torch
    import torch.distributed as dist
    from rdmalab.allreduce.algorithms import REGISTRY
    o = {"sizes": [1 << 20, 16 << 20], "iters": 10, "master": "127.0.0.1", "ring": "ring", **options}
    torch.set_num_threads(1)
    join(comm, o["master"])
    ring = o["ring"] if callable(o["ring"]) else REGISTRY[o["ring"]].run
    out = {}
    for size in o["sizes"]:
        tensor, work = torch.ones(size // 4), comm.buffer(size // 4)
        work[:] = 1
        times = {"gloo": [], "ring": []}
        for _ in range(o["iters"] + 1):              # (the first of each: warm-up)
            for name, once in (("gloo", lambda: dist.all_reduce(tensor)), ("ring", lambda: ring(comm, work))):
                dist.barrier()
                start = time.perf_counter()
                once()
                times[name].append(time.perf_counter() - start)
        if not np.array_equal(tensor.numpy(), work):   # (both began at 1 and were summed as often)
            raise RuntimeError(f"Gloo's and the ring's sums of {size} bytes differ")
        out[size] = (float(np.median(times["gloo"][1:])), float(np.median(times["ring"][1:])))
    return out
