"""Data-parallel training with the lab's AllReduce (rdmalab.allreduce.training, rdmalab.lessons.training): the
gradients are right, data parallelism matches one process on the global batch, replicas stay bit-identical (and a
drifting one is named), overlap changes no result, the landing experiment accounts for every message, and the
training lesson's exercise rejects plausible mistakes by name. No timing is asserted."""
import contextlib
import os

import numpy as np
import pytest

from rdmalab.allreduce import training
from rdmalab.allreduce.cluster import Cluster
from rdmalab.errors import RdmalabError
from rdmalab.lessons import exercises
from rdmalab.lessons import training as lesson
from rdmalab.proc.cpus import pinned_to_one_cpu

STEPS = 8


def test_the_gradients_are_the_losss_derivatives():
    params = [p.astype(np.float64) for p in training.init(training.layer_sizes(12, 2), seed=3)]
    x, y = training.digits()[0][:6].astype(np.float64), training.digits()[1][:6]
    _, grads = training.loss_and_grads(params, x, y, 1 / 6)
    rng = np.random.default_rng(0)
    for i, param in enumerate(params):
        at = tuple(rng.integers(0, n) for n in param.shape)
        param[at] += 1e-6
        up, _ = training.loss_and_grads(params, x, y, 1 / 6)
        param[at] -= 2e-6
        down, _ = training.loss_and_grads(params, x, y, 1 / 6)
        param[at] += 1e-6
        assert grads[i][at] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-7), f"parameter {i} at {at}"


def test_backward_hands_over_each_gradient_last_layer_first():
    params = training.init(training.layer_sizes(16, 3))
    seen = []
    training.loss_and_grads(params, *[a[:4] for a in training.digits()[:2]], 0.25, ready=lambda i, g: seen.append(i))
    assert seen == [7, 6, 5, 4, 3, 2, 1, 0]


def test_ddp_buckets_fill_from_the_last_parameter_and_close_at_the_cap():
    sizes = [1000, 10, 4000, 10, 500, 10]
    assert training.ddp_buckets_of_sizes(sizes, 1000) == [[5, 4, 3, 2], [1, 0]]
    assert training.ddp_buckets_of_sizes(sizes, 10 ** 6) == [[5, 4, 3, 2, 1, 0]]
    assert training.ddp_buckets_of_sizes(sizes, 1) == [[5], [4], [3], [2], [1], [0]]


@pytest.fixture(scope="module")
def cluster():
    with Cluster(ranks=2, transport="rdma", max_bytes=1 << 20) as c:
        yield c


def test_data_parallel_training_matches_one_process_on_the_global_batch(cluster):
    options = {"steps": STEPS, "keep_params": True}
    run = lesson.run(cluster, options)   # (raises unless every rank's replica is bit-identical after every step)
    single = lesson.one_process(options)
    assert lesson.largest_difference(run.per_rank[0]["params"], single) < 1e-5
    untrained = training.init(training.layer_sizes())
    assert lesson.largest_difference(untrained, single) > 1e-3   # (the comparison can fail)
    assert len(run.per_rank[0]["records"]) == STEPS and run.per_rank[0]["transport"] == "RdmaTransport"


def test_overlap_and_mpi_sum_the_same_gradients_bit_for_bit(cluster):
    plain = lesson.run(cluster, {"steps": STEPS})
    overlapped = lesson.run(cluster, {"steps": STEPS, "overlap": True, "bucket_cap": 32 << 10})
    assert plain.per_rank[0]["prints"] == overlapped.per_rank[0]["prints"]   # (2 ranks: a + b, whatever the chunks)
    assert overlapped.per_rank[0]["buckets"] == training.ddp_buckets(training.init(training.layer_sizes()), 32 << 10)
    assert len(overlapped.per_rank[0]["buckets"]) > 1
    assert all(len(rec["buckets"]) == len(overlapped.per_rank[0]["buckets"]) for rec in overlapped.per_rank[0]["records"])
    mpi = lesson.mpi_run(2, {"steps": STEPS})
    assert mpi.per_rank[1]["prints"] == plain.per_rank[1]["prints"]


def test_a_replica_that_drifts_is_named_by_rank_step_and_layer(cluster):
    with pytest.raises(RdmalabError, match=r"rank 1's layer 3 weights \(parameter 4\) differ from rank 0's after step 2"):
        lesson.run(cluster, {"steps": 4, "drift": (1, 2, 4)})


def test_the_ranks_are_started_with_one_blas_thread(cluster):
    """numpy reads OPENBLAS_NUM_THREADS when an engine imports it, before anything reaches the engine."""
    for pid in cluster.pids:
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert b"OPENBLAS_NUM_THREADS=1" in f.read().split(b"\0")


@pytest.mark.parametrize("transport, one_cpu", [("rdma", False), ("tcp", False), ("tcp", True)])
def test_every_message_of_the_landing_stream_is_accounted_for(transport, one_cpu):
    with contextlib.ExitStack() as stack:
        if one_cpu:   # (every rank on this process's first CPU, as taskset -c 0 starts them: no CPU to pin to)
            stack.enter_context(pinned_to_one_cpu())
        c = stack.enter_context(Cluster(ranks=2, transport=transport, max_bytes=1 << 20))
        zero, one = c.run(training.compute_while_landing, {"seconds": 0.2, "nbytes": 64 << 10})
        assert zero["alone"] > 0 and zero["landing"] > 0
        assert zero["taken"] * (64 << 10) == one["sent_bytes"]   # every put taken, the last one's count included
        if len(os.sched_getaffinity(0)) >= 2 and not one_cpu:
            assert zero["cpu"] is not None and zero["cpu"] != one["cpu"]
        else:
            assert zero["cpu"] is one["cpu"] is None
        c.run(training.compute_while_landing, {"seconds": 0.1, "nbytes": 64 << 10})   # the transport is reusable


# --- the lesson's exercise ------------------------------------------------------------------------------------

REFERENCE = exercises.REGISTRY["training-step.overlap"].reference


def feedback(answer):
    return exercises.check("training-step.overlap", answer)


def test_the_overlap_reference_passes_and_a_skeleton_is_not_yet():
    assert feedback(REFERENCE()).passed
    buckets, on_gradient, before_update = REFERENCE()
    assert feedback((lambda sizes, cap: None, on_gradient, before_update)).status == "not yet"
    assert "three functions" in feedback(on_gradient).message


def _bucket_of(state, i):
    return next(b for b, bucket in enumerate(state.buckets) if i in bucket)


def launch_on_each_gradient(state, i):
    state.launch(_bucket_of(state, i))


def launch_when_full_in_any_order(state, i):
    b = _bucket_of(state, i)
    if all(j in state.final for j in state.buckets[b]):
        state.launch(b)


def launch_every_full_bucket(state, i):
    for b, bucket in enumerate(state.buckets):
        if all(j in state.final for j in bucket):
            state.launch(b)


def wait_for_what_was_launched(state):
    for b in state.launched:
        state.wait(b)


def launch_and_wait(state, i):
    while len(state.launched) < len(state.buckets) and all(j in state.final for j in state.buckets[len(state.launched)]):
        state.launch(len(state.launched))
        state.wait(state.launched[-1])


def launch_on_first_gradient(state, i):
    while len(state.launched) < len(state.buckets) and any(j in state.final for j in state.buckets[len(state.launched)]):
        state.launch(len(state.launched))


def launch_all_after_backward(state, i):
    if len(state.final) == sum(len(b) for b in state.buckets):
        for b in range(len(state.buckets)):
            state.launch(b)


def launch_all_but_the_last(state, i):
    while len(state.launched) < len(state.buckets) - 1:
        b = len(state.launched)
        if not all(j in state.final for j in state.buckets[b]):
            return
        state.launch(b)


def forward_order(sizes, cap):
    return [list(range(len(sizes)))]


def in_pairs(sizes, cap):
    return [[i, i - 1] for i in range(len(sizes) - 1, 0, -2)]


def one_short(sizes, cap):
    return [b for b in REFERENCE()[0](sizes, cap)][:-1]


def over_the_cap(sizes, cap):
    return [list(reversed(range(len(sizes))))]


def closed_only_over_the_cap(sizes, cap):   # (held > cap: a bucket that holds cap bytes exactly stays open)
    buckets, current, held = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        held += sizes[i]
        if held > cap:
            buckets.append(current)
            current, held = [], 0
    return buckets + [current] if current else buckets


def one_twice(sizes, cap):
    buckets = REFERENCE()[0](sizes, cap)
    return buckets + [[0]]


@pytest.mark.parametrize("which, mistake, said", [
    (0, forward_order, "the buckets hold the parameters in the order [0, 1"),
    (0, in_pairs, "under the"),
    (0, one_short, "is in no bucket"),
    (0, one_twice, "parameter 0 is in 2 buckets"),
    (0, over_the_cap, "it should have closed before parameter"),
    (0, closed_only_over_the_cap, "it should have closed before parameter"),
    (1, launch_on_each_gradient, "launched bucket 0 before gradient"),
    (1, launch_every_full_bucket, "launched bucket 0 twice"),
    (1, launch_when_full_in_any_order, "the ranks launched their buckets in different orders"),
    (1, launch_on_first_gradient, "before gradient"),
    (1, launch_all_after_backward, "left bucket 0 waiting"),
    (1, launch_all_but_the_last, "left bucket 3 waiting"),
    ((1, 2), (launch_all_but_the_last, wait_for_what_was_launched), "left bucket 3 waiting"),
    (1, launch_and_wait, "waited for bucket 0 during backward"),
    (2, lambda state: None, "without waiting for bucket 0"),
    (2, lambda state: state.wait(len(state.buckets) - 1), "without waiting for bucket 0"),
    (2, lambda state: [state.wait(b) for b in range(len(state.buckets) + 1)], "never launched: it would wait forever"),
])
def test_the_overlap_check_names_each_plausible_mistake(which, mistake, said):
    answer = list(REFERENCE())
    for w, m in zip(*((which, mistake) if isinstance(which, tuple) else ((which,), (mistake,)))):
        answer[w] = m
    got = feedback(tuple(answer))
    assert got.status == "wrong" and said in got.message, got.message
