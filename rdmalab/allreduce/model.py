"""The alpha-beta-gamma cost of AllReduce, fitted to this machine, then scaled to a training cluster.

    T(algorithm, p, n) = steps * alpha + bytes_sent(n) * beta + bytes_reduced(n) * gamma

alpha: time to start a message (latency, s); beta: time per byte on the wire (s/B, 1 / bandwidth);
gamma: time per byte reduced (s/B). For p ranks and n bytes (Thakur, Rabenseifner and Gropp, 2005):
    ring   2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
    hd     2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
    naive  2 (p-1) alpha + 2 (p-1) n beta + (p-1) n gamma        (rank 0 sends and receives it all)
    tree   2 log2(p) alpha + 2 n beta + n gamma                   (NCCL's double binary tree, pipelined:
           log depth; each rank sends about 2n bytes, as the ring does at scale (2 (p-1)/p n tends to 2n):
           only at small p does the ring send less (half at p = 2). NCCL models it so: its tuning converts
           bus bandwidth to algorithm bandwidth with algbw = busbw / 2 for the tree and busbw p / (2 (p-1))
           for the ring (src/graph/tuning.cc, "Convert bus BW to algorithm BW"))
    sharp  2 alpha + n beta                                       (in-network reduction, one switch level:
           every rank sends its n bytes up once and receives the sum once, both at the same time on a
           full-duplex link; the switch adds, so no gamma. algbw is then the link's bandwidth, about twice
           the ring's at scale, and the busbw nccl-tests prints, algbw x 2 (p-1)/p, exceeds the link's)
The bandwidth terms do not grow with p: that is why the ring scales, and why beta, the network,
decides AllReduce time for large gradients. nccl-tests reports busbw = algbw x 2 (p-1)/p whatever the
algorithm (doc/PERFORMANCE.md: "independent of the algorithm used (ring, tree, or other)").

beta of a path is set by its slowest stage when the stages overlap (pipelined(): a byte crosses the
wire while the next one is copied), not by the sum of the stages' times (that holds only when each
message is copied whole before it is sent, unpipelined()).

The model assumes each rank has a processor of its own (a GPU, or a CPU, and a NIC). Ranks that share
fewer CPUs take turns (turns(), on_shared_cpus()); fit() and held_out() count the turns when told the CPUs.
"""
import math

import numpy as np


class Costs:
    def __init__(self, alpha, beta, gamma, label=""):
        self.alpha, self.beta, self.gamma, self.label = alpha, beta, gamma, label

    def __repr__(self):
        return (f"Costs({self.label}: alpha {self.alpha * 1e6:.2f} us, bandwidth {1 / self.beta / 1e9:.2f} GB/s, "
                f"reduction {1 / self.gamma / 1e9:.2f} GB/s)")


def terms(algorithm, p, n):
    """(messages on the critical path, bytes sent, bytes reduced) per rank."""
    if p <= 1:
        return 0.0, 0.0, 0.0
    if algorithm == "ring":
        return 2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n
    if algorithm == "hd":
        return 2 * math.log2(p), 2 * (p - 1) / p * n, (p - 1) / p * n
    if algorithm == "naive":
        return 2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n
    if algorithm == "tree":
        return 2 * math.log2(p), 2.0 * n, 1.0 * n
    if algorithm == "sharp":
        return 2.0, 1.0 * n, 0.0
    raise ValueError(f"algorithm {algorithm!r}: {', '.join(PRICED)}")


# what terms() prices: the lab's own algorithms (rdmalab.allreduce.algorithms.ALGORITHMS) and two of NCCL's
PRICED = ("ring", "hd", "naive", "tree", "sharp")


def predict(algorithm, p, n, costs):
    """Predicted AllReduce time (s) of n bytes on p ranks."""
    a, b, g = terms(algorithm, p, n)
    return a * costs.alpha + b * costs.beta + g * costs.gamma


def from_measurements(latency_s, bandwidth_Bps, reduction_Bps, label="this machine"):
    """Costs from microbenchmarks: a one-way latency, a point-to-point bandwidth, numpy's add rate."""
    return Costs(latency_s, 1.0 / bandwidth_Bps, 1.0 / reduction_Bps, label)


def turns(ranks, cpus=None):
    """How many times longer each step takes when `ranks` ranks share `cpus` CPUs and all of a rank's work
    is CPU work (soft0: its NIC is its CPU copying; the reduction too): they take turns, ranks / cpus of
    them per CPU. 1 with a CPU each, or when cpus is None (a processor per rank, as in a cluster)."""
    if cpus is None:
        return 1.0
    if cpus <= 0:
        raise ValueError("cpus: how many CPUs the ranks share, > 0")
    return max(1.0, ranks / cpus)


def fit(samples, algorithm="ring", gamma=None, label="fitted", alpha=None, cpus=None):
    """Least-squares alpha, beta (and gamma unless given) to measured (p, n bytes, seconds) samples,
    weighted so that every sample counts by its relative error. A negative alpha or beta is not
    clipped: it means the samples do not follow the model (noise, or a cost the model lacks), and
    check_fit() says so. For ring and hd, bytes sent and bytes reduced are both proportional to (p-1)/p n, so only
    2 beta + gamma can be told apart from their times: give gamma (numpy's rate) to get beta. Give alpha
    (from small sizes) to fit only the per-byte terms to large sizes, whose times cannot show alpha.
    cpus: the CPUs the ranks shared while measured; each sample's terms then count turns(p, cpus) times,
    so that the costs are one rank's, as if it had a CPU to itself."""
    rows, target = [], []
    for p, n, t in samples:
        k = turns(p, cpus)
        a, b, g = (k * x for x in terms(algorithm, p, n))
        rows.append(([] if alpha is not None else [a]) + [b] + ([] if gamma is not None else [g]))
        target.append(t - (g * gamma if gamma is not None else 0.0) - (a * alpha if alpha is not None else 0.0))
    A, y = np.array(rows, float), np.array(target, float)
    w = 1.0 / np.array([t for _, _, t in samples], float)
    coef = list(np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0])
    fitted_alpha = alpha if alpha is not None else float(coef.pop(0))
    beta = float(coef.pop(0))
    return Costs(fitted_alpha, beta, gamma if gamma is not None else float(coef[0]), label)


def check_fit(costs):
    """ValueError unless the fitted costs are physical: alpha > 0 (a message costs time) and beta > 0
    (a byte costs time). A fit that breaks this was made from samples that do not follow the model."""
    if not costs.alpha > 0:
        raise ValueError(f"fitted alpha {costs.alpha:.3g} s is not positive: the small sizes' times do not "
                         f"grow with the number of messages (too few samples, or noise): measure again")
    if not costs.beta > 0:
        raise ValueError(f"fitted beta {costs.beta:.3g} s/B is not positive: the times do not grow with the "
                         f"size (too few or too noisy samples): measure again")
    return costs


def held_out(samples, fitted_on, algorithm="ring", gamma=None, label="fitted", alpha=None, cpus=None):
    """Fit to the samples whose (p, n) is in `fitted_on`, predict all the others: (costs, rows), each row
    {p, n, measured_s, predicted_s, error} for a sample the fit did not see. The honest test of a model.
    cpus: where the ranks run on one host and each rank's "NIC" is CPU work (soft0), the CPUs they share:
    the fit and the predictions both count the turns ranks take (turns(), on_shared_cpus())."""
    fitted_on = set(fitted_on)
    costs = check_fit(fit([s for s in samples if (s[0], s[1]) in fitted_on], algorithm, gamma, label, alpha, cpus))
    rows = []
    for p, n, t in samples:
        if (p, n) not in fitted_on:
            guess = predict(algorithm, p, n, on_shared_cpus(costs, p, cpus) if cpus is not None else costs)
            rows.append({"p": p, "n": n, "measured_s": t, "predicted_s": guess, "error": guess / t - 1})
    return costs, rows


def measure(cluster, sizes, algorithm="ring", rounds=5, iters=10, dtype="float32", progress=None, warmup=1):
    """Median time (s) of an AllReduce of each size on `cluster`: `rounds` rounds, each running every size
    (`iters` back to back after `warmup` more; the slowest rank's mean), so that a moment when another process
    takes a CPU spoils one round of one size, not a size. `iters` may be a function of the size in bytes (more
    for small sizes, as OSU's benchmarks run). Returns {n: median}, and {n: [every round]}.
    progress: called as progress(done, total) after each size of each round."""
    per = {n: [] for n in sizes}
    itemsize = np.dtype(dtype).itemsize
    for r in range(rounds):
        for i, n in enumerate(sizes):
            ranks = cluster.allreduce(n // itemsize, dtype, algorithm, iters=iters(n) if callable(iters) else iters,
                                      warmup=warmup, check=(r == 0))
            if any(x["wrong"] for x in ranks):
                raise RuntimeError(f"{algorithm} AllReduce of {n} bytes gave wrong elements")
            per[n].append(max(x["time"] for x in ranks))
            if progress is not None:
                progress(r * len(sizes) + i + 1, rounds * len(sizes))
    return {n: float(np.median(ts)) for n, ts in per.items()}, per


def pipelined(*stage_Bps):
    """beta (s/B) of a path whose stages overlap (the wire sends one piece while the CPU copies the next):
    the slowest stage sets the pace."""
    return 1.0 / min(stage_Bps)


def unpipelined(*stage_Bps):
    """beta (s/B) of a path whose stages run one after the other for each whole message."""
    return sum(1.0 / r for r in stage_Bps)


def reduction_rate(dtype="float32", nbytes=16 << 20, repeats=5):
    """numpy's in-place add rate on this machine (bytes of the result per second)."""
    import time
    a = np.ones(nbytes // np.dtype(dtype).itemsize, dtype)
    b = np.ones_like(a)
    np.add(a, b, out=a)
    start = time.perf_counter()
    for _ in range(repeats):
        np.add(a, b, out=a)
    return nbytes * repeats / (time.perf_counter() - start)


def copy_rate(nbytes=64 << 20, repeats=5):
    """One CPU core's copy rate on this machine (bytes per second), with buffers larger than its caches,
    as a kernel's copy of a socket's stream meets them: the best of `repeats` numpy copies."""
    import time
    a, b = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    np.copyto(b, a)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - start)
    return nbytes / best


# Published figures for clusters, for scale (labelled; see each source). Like is compared with like:
# the same Ethernet speed with RDMA (RoCE) and with TCP, so that only the transport differs.
GBPS = 1e9 / 8                      # bytes per second in one Gb/s
GPU_REDUCE_BPS = 1.0e12             # a GPU adds at about its memory bandwidth (H100 HBM3: 3.35 TB/s; ~1 TB/s used)
COPY_BPS = 10e9                     # an assumption: one CPU core's memcpy (measured 2-15 GB/s on lab machines);
                                    # the lesson uses the learner's own, copy_rate()
TCP_COPIES = 2                      # per byte: sender user -> kernel, receiver kernel -> user (lesson 01 counts them)
RDMA_ALPHA, TCP_ALPHA = 2e-6, 20e-6  # per message, end to end through a switch (see SOURCES)

SOURCES = {
    "link": "NVIDIA ConnectX-7: NDR InfiniBand and Ethernet up to 400 Gb/s (nvidia.com ConnectX-7 datasheet)",
    "rdma latency": "perftest ib_write_lat on ConnectX (mlx5): 0.93 us inline, 1.32 us (perftest issue 131); "
                    "ConnectX-6 'sub-600 ns' (NVIDIA user manual); we take 1.5 us on IB, 2 us on RoCE with switch hops",
    "tcp latency": "assumed 20 us per message through two kernel TCP stacks and the switch; lesson 01 measured "
                   "15-30 us half round trip over loopback in Python",
    "tcp copies": "two CPU copies per byte (sender: user to kernel, receiver: kernel to user), overlapped with "
                  "the wire (pipelined). How fast they go is an assumption: one core's memcpy rate times the "
                  "cores that copy. NCCL's socket transport can spread a connection over helper threads and "
                  "sockets (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD; NCCL's environment documentation), "
                  "each thread's copies on a core of its own: copy_cores",
    "gpu reduction": "a GPU reduces at ~1 TB/s (HBM: H100 3.35 TB/s peak, NVIDIA H100 datasheet)",
}


def rdma(gbps, alpha=RDMA_ALPHA, label=""):
    """A link of `gbps` Gb/s with RDMA: the NIC moves the bytes, so beta is the wire's."""
    return Costs(alpha, 1 / (gbps * GBPS), 1 / GPU_REDUCE_BPS, label or f"{gbps} Gb/s = {gbps / 8:g} GB/s, RDMA: "
                 f"the NIC moves the bytes (beta = the wire); alpha {alpha * 1e6:g} us")


def tcp(gbps, alpha=TCP_ALPHA, copy_Bps=COPY_BPS, copy_cores=1, copies=TCP_COPIES, label=""):
    """A link of `gbps` Gb/s with TCP: each byte is copied `copies` times by CPUs, overlapped with the wire,
    so beta is the slower of the wire and the copies (copy_cores cores per host share them, each copying
    copy_Bps bytes per second)."""
    copied = copy_Bps * copy_cores / copies
    beta = pipelined(gbps * GBPS, copied)
    return Costs(alpha, beta, 1 / GPU_REDUCE_BPS, label or f"{gbps} Gb/s = {gbps / 8:g} GB/s wire, TCP: {copies:g} "
                 f"CPU copies per byte at {copy_Bps / 1e9:.3g} GB/s x {copy_cores} core(s), overlapped -> "
                 f"{1 / beta / 1e9:.3g} GB/s; alpha {alpha * 1e6:g} us")


def like_with_like(speeds=(400, 100), copy_Bps=COPY_BPS, copy_cores=1, copies=TCP_COPIES):
    """{name: Costs}: each link speed with RDMA (RoCE) and with TCP, so that only the transport differs."""
    out = {}
    for gbps in speeds:
        out[f"{gbps} GbE RoCE (RDMA)"] = rdma(gbps)
        out[f"{gbps} GbE TCP"] = tcp(gbps, copy_Bps=copy_Bps, copy_cores=copy_cores, copies=copies)
    return out


NETWORKS = {
    "InfiniBand NDR 400 Gb/s (RDMA)": rdma(400, 1.5e-6, "NDR 400 Gb/s = 50 GB/s per port (ConnectX-7); "
                                           "alpha 1.5 us (perftest ib_write_lat 0.93-1.32 us, issue 131)"),
    **like_with_like(),
}


def gpu_path(network, gpudirect=True, pcie_Bps=64e9, bounce_alpha=5e-6):
    """The network's costs seen from GPU memory. GPUDirect RDMA: the NIC reads and writes GPU memory
    straight over PCIe (one PCIe crossing per byte, overlapped with the wire). Without it, each byte is
    first copied from the GPU into a host bounce buffer and the NIC reads it from there: it crosses the
    PCIe switch's uplink twice (GPU to host, host to NIC) and each message pays a copy's start
    (bounce_alpha). pcie_Bps: PCIe Gen5 x16 moves about 64 GB/s per direction (32 GT/s x 16 lanes)."""
    wire = 1 / network.beta
    if gpudirect:
        return Costs(network.alpha, pipelined(wire, pcie_Bps), network.gamma, network.label + "; GPUDirect RDMA")
    return Costs(network.alpha + bounce_alpha, pipelined(wire, pcie_Bps / 2), network.gamma,
                 network.label + "; host bounce buffer: 2 PCIe crossings per byte")


def slowest_link(costs, share):
    """A ring moves at its slowest link's pace: the costs when one link delivers only `share` (0-1] of its
    bandwidth (incast of k flows into one port: share 1/k; a link paused by PFC part of the time: the
    share it still runs)."""
    if not 0 < share <= 1:
        raise ValueError("share: the fraction of the link's bandwidth left, in (0, 1]")
    return Costs(costs.alpha, costs.beta / share, costs.gamma, f"{costs.label}; slowest link at {share:.0%}")


def on_shared_cpus(costs, ranks, cpus):
    """The costs of `ranks` ranks that take turns on `cpus` CPUs, where all of a rank's work is CPU work:
    soft0's NIC is its process's CPU copying, and the reduction is CPU work too. With more ranks than CPUs,
    every ring step waits for ranks / cpus turns, so every term costs that many times more. (Hardware NICs
    move the bytes themselves: there only the reduction would share the CPUs.)"""
    k = turns(ranks, cpus)
    if k == 1.0:
        return costs
    return Costs(costs.alpha * k, costs.beta * k, costs.gamma * k, f"{costs.label}; {ranks} ranks on {cpus:g} CPUs")


# Gradient bytes in bf16 (2 bytes per parameter), for models whose data-parallel training fits an 80 GB GPU:
# bf16 parameters and gradients (4 bytes per parameter: 52 GB at 13B), the optimizer's states sharded over
# the GPUs (ZeRO stage 1). ZeRO's stages 1 and 2 move the same bytes as an AllReduce (a reduce-scatter of
# the gradients and an all-gather of the parameters); stage 3 (FSDP), which larger models need, moves 1.5x
# (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020).
MODELS = {
    "7B parameters (bf16)": 7e9 * 2,
    "13B parameters (bf16)": 13e9 * 2,
}


def compute_seconds(parameters, tokens_per_gpu, flops_per_gpu=400e12, utilization=0.4):
    """Time of one training step's compute on each GPU: about 6 FLOPs per parameter per token
    (forward and backward), at a fraction `utilization` of the GPU's peak (bf16 ~400-1000 TFLOP/s)."""
    return 6 * parameters * tokens_per_gpu / (flops_per_gpu * utilization)


def comm_share(algorithm, gpus, gradient_bytes, network, compute_s):
    """Share of a training step spent in the gradient AllReduce, if it does not overlap compute."""
    t = predict(algorithm, gpus, gradient_bytes, network)
    return t / (t + compute_s)


def scaling_table(gpus=(8, 64, 512, 4096, 16384), models=None, networks=None, tokens_per_gpu=4096,
                  algorithm="ring"):
    """Predicted gradient AllReduce time and its share of a training step, for each model, network and
    cluster size: rows of dicts."""
    rows = []
    for model_name, grad_bytes in (models or MODELS).items():
        compute = compute_seconds(grad_bytes / 2, tokens_per_gpu)
        for net_name, costs in (networks or NETWORKS).items():
            for p in gpus:
                t = predict(algorithm, p, grad_bytes, costs)
                rows.append({"model": model_name, "network": net_name, "gpus": p, "allreduce_s": t,
                             "compute_s": compute, "comm_share": t / (t + compute)})
    return rows
