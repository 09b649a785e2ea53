"""The alpha-beta-gamma cost of AllReduce, fitted to this machine, then scaled to a training cluster.

    T(algorithm, p, n) = steps * alpha + bytes_sent(n) * beta + bytes_reduced(n) * gamma

alpha: time to start a message (latency, s); beta: time per byte on the wire (s/B, 1 / bandwidth);
gamma: time per byte reduced (s/B). For p ranks and n bytes (Thakur, Rabenseifner and Gropp, 2005):
    ring   2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
    hd     2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
    naive  2 (p-1) alpha + 2 (p-1) n beta + (p-1) n gamma        (rank 0 sends and receives it all)
The bandwidth terms do not grow with p: that is why the ring scales, and why beta, the network,
decides AllReduce time for large gradients.
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
    raise ValueError(f"algorithm {algorithm!r}: ring, hd or naive")


def predict(algorithm, p, n, costs):
    """Predicted AllReduce time (s) of n bytes on p ranks."""
    a, b, g = terms(algorithm, p, n)
    return a * costs.alpha + b * costs.beta + g * costs.gamma


def from_measurements(latency_s, bandwidth_Bps, reduction_Bps, label="this machine"):
    """Costs from microbenchmarks: a one-way latency, a point-to-point bandwidth, numpy's add rate."""
    return Costs(latency_s, 1.0 / bandwidth_Bps, 1.0 / reduction_Bps, label)


def fit(samples, algorithm="ring", gamma=None, label="fitted"):
    """Least-squares alpha, beta (and gamma unless given) to measured (p, n bytes, seconds) samples,
    weighted so that every sample counts by its relative error. Negative fits are clipped to 0.
    For ring and hd, bytes sent and bytes reduced are both proportional to (p-1)/p n, so only
    2 beta + gamma can be told apart from their times: give gamma (numpy's rate) to get beta."""
    rows, target = [], []
    for p, n, t in samples:
        a, b, g = terms(algorithm, p, n)
        rows.append([a, b] + ([] if gamma is not None else [g]))
        target.append(t - (g * gamma if gamma is not None else 0.0))
    A, y = np.array(rows, float), np.array(target, float)
    w = 1.0 / np.array([t for _, _, t in samples], float)
    coef, *_ = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)
    coef = np.clip(coef, 1e-15, None)
    return Costs(coef[0], coef[1], gamma if gamma is not None else coef[2], label)


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


# Published figures for clusters, for scale (labelled; see each source).
NETWORKS = {
    "InfiniBand NDR 400 Gb/s (RDMA)": Costs(
        1.5e-6, 1 / 50e9, 1 / 1.0e12,
        "NDR 400 Gb/s = 50 GB/s per port (NVIDIA ConnectX-7); ~1-2 us end to end (perftest ib_write_lat "
        "0.93-1.32 us on ConnectX, perftest issue 131); GPU reduction at ~1 TB/s (HBM)"),
    "RoCE 200 Gb/s (RDMA)": Costs(
        2.5e-6, 1 / 25e9, 1 / 1.0e12,
        "200 Gb/s = 25 GB/s Ethernet with RDMA (ConnectX-6, NVIDIA: sub-600 ns NIC latency, plus switches); "
        "GPU reduction at ~1 TB/s"),
    "100 GbE TCP": Costs(
        20e-6, 1 / 12.5e9 + 2 / 10e9, 1 / 1.0e12,
        "100 Gb/s = 12.5 GB/s, plus two CPU copies per byte through the kernel (~10 GB/s each), "
        "~20 us per message through the TCP stack"),
}

MODELS = {  # gradient bytes in bf16 (2 bytes per parameter)
    "7B parameters (bf16)": 7e9 * 2,
    "70B parameters (bf16)": 70e9 * 2,
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
    cluster size: rows of dicts (also printable with format_table)."""
    rows = []
    for model_name, grad_bytes in (models or MODELS).items():
        compute = compute_seconds(grad_bytes / 2, tokens_per_gpu)
        for net_name, costs in (networks or NETWORKS).items():
            for p in gpus:
                t = predict(algorithm, p, grad_bytes, costs)
                rows.append({"model": model_name, "network": net_name, "gpus": p, "allreduce_s": t,
                             "compute_s": compute, "comm_share": t / (t + compute)})
    return rows


def format_table(rows):
    lines = [f"{'model':<22} {'network':<32} {'GPUs':>6} {'AllReduce':>10} {'compute':>9} {'share':>6}"]
    for r in rows:
        lines.append(f"{r['model']:<22} {r['network']:<32} {r['gpus']:>6} {r['allreduce_s']:>9.3f}s "
                     f"{r['compute_s']:>8.2f}s {r['comm_share']:>6.0%}")
    return "\n".join(lines)
