"""The checked challenges of lessons 10-12 (training-step, in-pytorch, scaling-out) added in the sixth edition: each
reference passes, each skeleton is "not yet", and each plausible mistake is rejected with a message that names it.
(The first challenge of each lesson is tested in tests/test_training.py, tests/test_ddp.py and tests/test_exercises.py.)"""
import sys

import numpy as np
import pytest

from rdmalab.lessons import exercises
from rdmalab.lessons.checks import in_pytorch, scaling_out, training_step


def feedback(name, answer, *args):
    return exercises.check(name, answer, *args)


def reference(name):
    return exercises.REGISTRY[name].reference()


# --- 10 training-step.replicas: every (rank, parameter) that is not rank 0's, bit for bit -----------------------------

def drifts_by(same):
    """A learner's my_drifts that calls two parameters the same when same(mine, rank 0's) says so."""
    def my_drifts(replicas):
        return [(r, i) for r in range(1, len(replicas))
                for i, (mine, ref) in enumerate(zip(replicas[r], replicas[0])) if not same(mine, ref)]
    return my_drifts


def first_layer_only(replicas):
    return [(r, i) for r in range(1, len(replicas)) for i in (0, 1) if not np.array_equal(replicas[r][i], replicas[0][i])]


def stops_at_the_first(replicas):
    for r in range(1, len(replicas)):
        for i, (mine, ref) in enumerate(zip(replicas[r], replicas[0])):
            if not np.array_equal(mine, ref):
                return [(r, i)]
    return []


def one_per_rank(replicas):
    drifts = []
    for r in range(1, len(replicas)):
        for i, (mine, ref) in enumerate(zip(replicas[r], replicas[0])):
            if not np.array_equal(mine, ref):
                drifts.append((r, i))
                break
    return drifts


def with_its_neighbour(replicas):
    return [(r, i) for r in range(1, len(replicas))
            for i, (mine, ref) in enumerate(zip(replicas[r], replicas[r - 1])) if not np.array_equal(mine, ref)]


def with_the_mean(replicas):
    mean = [sum(ps[i] for ps in replicas) / len(replicas) for i in range(len(replicas[0]))]
    return [(r, i) for r in range(len(replicas)) for i, p in enumerate(replicas[r]) if not np.array_equal(p, mean[i])]


def only_rank_1(replicas):
    return [(1, i) for i, (mine, ref) in enumerate(zip(replicas[1], replicas[0])) if not np.array_equal(mine, ref)]


def ambiguous_if(replicas):
    return [(r, i) for r in range(1, len(replicas)) for i, p in enumerate(replicas[r]) if p != replicas[0][i]]


def test_the_replicas_reference_passes_and_the_skeleton_is_not_yet():
    name = "training-step.replicas"
    assert feedback(name, reference(name)).passed
    assert feedback(name, lambda replicas: []).status == "not yet"      # the skeleton: its empty list
    assert feedback(name, lambda replicas: None).status == "not yet"
    assert feedback(name, drifts_by(lambda a, b: a.tobytes() == b.tobytes())).passed   # bytes compared: right too
    assert feedback(name, drifts_by(lambda a, b: bool((a == b).all()))).passed


@pytest.mark.parametrize("mistake, said", [
    (drifts_by(np.allclose), "one unit in the last place: a tolerance (np.allclose"),
    (drifts_by(lambda a, b: abs(a - b).max() < 1e-6), "a tolerance"),
    (drifts_by(lambda a, b: np.linalg.norm(a) == np.linalg.norm(b)), "its norm and its sum of squares are rank 0's"),
    (drifts_by(lambda a, b: a.sum() == b.sum()), "A sum or a mean of the parameter misses it too"),
    (first_layer_only, "not only the first layer's"),
    (stops_at_the_first, "and stopped there"),
    (one_per_rank, "found rank 1's first drifting parameter and stopped there"),
    (only_rank_1, "it compared rank 1 only"),
    (with_its_neighbour, "Compare every rank with rank 0, the one reference, not with the rank before it"),
    (with_the_mean, "rank 0 is the replica the others are compared with"),
    (lambda replicas: [(1, 0)], "which is rank 0's bit for bit"),
    (ambiguous_if, "with == or != inside an if"),
    (lambda replicas: 3, "a list of (rank, parameter) pairs"),
    (lambda replicas: replicas[9], "raised IndexError"),
    ("my_drifts", "lambda: my_drifts"),
])
def test_the_replicas_check_names_each_plausible_mistake(mistake, said):
    got = feedback("training-step.replicas", mistake)
    assert got.status == "wrong" and said in got.message, got.message


def test_the_replicas_check_tries_the_drifts_the_lab_makes():
    """Each case of the check is made as it says: the changed parameters differ, the rest stay rank 0's bit for bit."""
    for kind, changes in training_step.CASES:
        replicas = training_step._made(changes)
        assert reference("training-step.replicas")(replicas) == sorted(changes), kind
    ulp = training_step._made({(1, 0): training_step._ulp})
    assert np.allclose(ulp[1][0], ulp[0][0], rtol=0, atol=1e-6) and not np.array_equal(ulp[1][0], ulp[0][0])


def test_the_overlap_skeleton_returning_its_empty_list_is_not_yet():
    _, on_gradient, before_update = exercises.REGISTRY["training-step.overlap"].reference()
    got = feedback("training-step.overlap", (lambda sizes, cap: [], on_gradient, before_update))
    assert got.status == "not yet" and "returned no bucket" in got.message


def test_your_ring_is_the_ring_from_09_under_its_old_name_too(capsys):
    from rdmalab.allreduce.algorithms import ring_allreduce
    from rdmalab.lessons import training
    assert training.ring_from_06 is training.your_ring
    assert training.your_ring(ring_allreduce) is ring_allreduce
    assert "passed lesson 09's check" in capsys.readouterr().out

    def my_ring(comm, x):
        ...
    assert training.your_ring(my_ring) is not my_ring
    assert "reference ring sums the gradients" in capsys.readouterr().out


# --- 11 in-pytorch.landing-cost: ms of compute lost per GB that lands ------------------------------------------------

def cost_by(rate="right", unit=1.0):
    return lambda alone, landing, landed_Bps: in_pytorch.landing_cost(alone, landing, landed_Bps, rate, unit)


def test_the_landing_cost_reference_passes_without_pytorch_and_the_skeleton_is_not_yet(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # as where PyTorch is missing: this check needs none
    name = "in-pytorch.landing-cost"
    assert feedback(name, reference(name)).passed
    assert reference(name)(50, 40, 2e9) == pytest.approx(100.0)   # a fifth of each second, over 2 GB: 100 ms per GB
    assert feedback(name, lambda alone, landing, landed_Bps: None).status == "not yet"


@pytest.mark.parametrize("mistake, said", [
    (cost_by("kept"), "landing / alone is the share of its speed rank 0 kept"),
    (cost_by("inverted"), "alone / landing - 1 is how much longer a step took"),
    (cost_by("per step"), "1/landing - 1/alone is the time lost per step"),
    (cost_by("steps"), "alone - landing is steps lost per second, not seconds"),
    (cost_by("clamped"), "the figure was clamped at 0"),
    (cost_by(unit=1e-3), "seconds, not milliseconds"),
    (cost_by(unit=1e-9), "per byte, not per GB"),
    (cost_by(unit=1e-6), "per MB, not per GB"),
    (cost_by(unit=2 ** 30 / 1e9), "per GiB (2**30 bytes)"),
    (cost_by("inverted", 1e-3), "how much longer a step took than alone; the stream's bytes are counted per second of "
                                "the stream, and in each of those seconds rank 0 lost 1 - landing / alone of a second; "
                                "and seconds, not milliseconds"),
    (lambda a, l, b: 1e3 * (1 - l / a) / b * 1e9 + 1, "that is not what the rates make"),
    (lambda a, l, b: "100 ms", "return one number"),
    (lambda a, l, b: a / 0, "raised ZeroDivisionError"),
    (42, "lambda: my_cost"),
])
def test_the_landing_cost_check_names_each_plausible_slip(mistake, said):
    got = feedback("in-pytorch.landing-cost", mistake)
    assert got.status == "wrong" and said in got.message, got.message


def test_the_landing_cost_says_which_rates_it_got_wrong():
    got = feedback("in-pytorch.landing-cost", cost_by("clamped"))
    assert "60.6 while 3 GB/s landed (faster: noise)" in got.message, got.message


# --- 12 scaling-out.fit: more equations than unknowns, each weighed by its relative miss ------------------------------

def fit_weighed(weights):
    return lambda ring, add, p, turns: scaling_out.fitted(ring, add, p, turns, (), weights)


def unweighted(ring, add, p, turns):
    """The fit as lesson 12 first asked for it: right on exact times, wrong on measured ones."""
    rows = [[turns * 2 * (p - 1), turns * 2 * (p - 1) / p * n, turns * (p - 1) / p * n] for n in ring]
    rows += [[0, 0, n] for n in add]
    return np.linalg.lstsq(np.array(rows), np.array([*ring.values(), *add.values()]), rcond=None)[0]


@pytest.mark.parametrize("mistake, said", [
    (unweighted, "your fit weighs every equation alike, by its miss in seconds"),
    (fit_weighed("none"), "32 MiB's time is hundreds of times 64 KiB's"),
    (fit_weighed("squared"), "divides each equation by its time squared"),
    (fit_weighed("ring only"), "divides the ring's equations by their times but not the adds'"),
    (fit_weighed("rows only"), "divides each row by its time but not the time itself"),
])
def test_the_fit_must_weigh_each_equation_by_its_relative_miss(mistake, said):
    got = feedback("scaling-out.fit", mistake)
    assert got.status == "wrong" and said in got.message, got.message
    assert "more equations than unknowns" in got.message or "exactly" in got.message


def test_the_noisy_times_are_ones_no_three_costs_meet():
    ring, add, p, turns = scaling_out.noisy_times()
    assert len(ring) + len(add) > 3
    right = scaling_out.fitted(ring, add, p, turns)
    assert not scaling_out._close(right, scaling_out.TRUE)            # noise moves the costs a little ...
    assert scaling_out._close(right, scaling_out.TRUE, rtol=0.15)     # ... and only a little, when weighed right
    assert not scaling_out._close(scaling_out.fitted(ring, add, p, turns, (), "none"), scaling_out.TRUE, rtol=0.5)


# --- 12 scaling-out.ring-time: the ring's time on p ranks, then used for 4 ranks and a cluster --------------------------

def ring_by(*slips):
    return lambda p, n, alpha, beta, gamma: scaling_out.ring_time(p, n, (alpha, beta, gamma), slips)


def test_the_ring_time_reference_passes_and_the_skeleton_is_not_yet():
    name = "scaling-out.ring-time"
    assert feedback(name, reference(name)).passed
    assert feedback(name, lambda p, n, alpha, beta, gamma: None).status == "not yet"
    assert reference(name)(4, 1 << 20, 1e-6, 1e-9, 1e-10) == pytest.approx(6e-6 + 1.5 * 2 ** 20 * 1e-9 + 0.75 * 2 ** 20 * 1e-10)


@pytest.mark.parametrize("mistake, said", [
    (ring_by("factors"), "the bytes lack the (p-1)/p factors"),
    (ring_by("messages p"), "the messages are 2p"),
    (ring_by("messages p-1"), "the messages are p-1: that is the reduce-scatter alone"),
    (ring_by("beta once"), "beta is counted once"),
    (ring_by("gamma doubled"), "gamma's factor is doubled"),
    (lambda p, n, a, b, g: 2 * (p - 1) * a + 2 * ((p - 1) // p) * n * b + (p - 1) // p * n * g, "integer division"),
    (ring_by("factors", "messages p-1"), "(p-1)/p factors: each of the 2(p-1) steps sends a chunk of n/p bytes, so a "
                                         "rank sends 2(p-1)/p n and reduces (p-1)/p n, not 2n and n; and the messages "
                                         "are p-1"),
    (ring_by("messages p", "gamma doubled"), "the messages are 2p"),
    (lambda p, n, a, b, g: 2 * (p - 1) * a + 2 * (p - 1) / p * n * b, "that is not 2(p-1) alpha"),
    (lambda p, n, a, b, g: (1.0, 2.0), "return one number"),
    (lambda p, n: 0.0, "raised TypeError"),
    ("my_ring_time", "lambda: my_ring_time"),
])
def test_the_ring_time_check_names_each_plausible_slip(mistake, said):
    got = feedback("scaling-out.ring-time", mistake)
    assert got.status == "wrong" and said in got.message, got.message


def test_the_cluster_prediction_uses_the_learners_ring_time(monkeypatch):
    from rdmalab.allreduce import model
    from rdmalab.lessons import scaling
    monkeypatch.setattr(model, "copy_rate", lambda: 8e9)
    nets = scaling.networks({"copy_Bps": 8e9, "copies": 2, "copies_counted": False})
    mine = reference("scaling-out.ring-time")
    assert str(scaling.tcp_over_rdma(2.0, nets, time=mine)) == str(scaling.tcp_over_rdma(2.0, nets))
    doubled = str(scaling.tcp_over_rdma(2.0, nets, time=lambda *args: 2 * mine(*args)))
    assert doubled != str(scaling.tcp_over_rdma(2.0, nets)) and "times as long" in doubled


# --- 12's residual: every equation's miss, beside the rounds' spread ---------------------------------------------------

def two_ranks(times, rounds):
    from rdmalab.lessons import scaling
    return scaling.TwoRanks(times, 1, "soft0", rounds)


def test_the_residual_is_within_the_noise_when_the_times_follow_the_model():
    from rdmalab.lessons import scaling
    sizes = [64 << 10, 16 << 20, 24 << 20, 32 << 20]
    ring, add = scaling_out.times(scaling_out.TRUE, 2, 2, sizes, [16 << 20])
    rounds = {n: [t * 0.97, t, t * 1.04] for n, t in ring.items()}   # rounds 7% apart
    fit = [n for n in sizes if n != sizes[2]]
    costs = reference("scaling-out.fit")({n: ring[n] for n in fit}, add, 2, 2)
    shown = str(scaling.show_fit(costs, two_ranks(ring, rounds), fit, add))
    assert "4 equations, 3 costs" in shown and "below this machine's noise" in shown, shown
    assert "not seen" in shown and "numpy add, 16 MiB" in shown and "7%" in shown
    assert str(scaling.show_fit(costs, two_ranks(ring, rounds), fit)).count("\n") < shown.count("\n")   # as before


def test_a_residual_larger_than_the_noise_says_the_model_lacks_a_term():
    from rdmalab.lessons import scaling
    sizes = [64 << 10, 16 << 20, 24 << 20, 32 << 20]
    ring, add = scaling_out.times(scaling_out.TRUE, 2, 2, sizes, [16 << 20])
    ring[16 << 20] *= 0.7                                              # a size much cheaper per byte: a cache
    rounds = {n: [t, t * 1.01] for n, t in ring.items()}
    fit = [n for n in sizes if n != sizes[2]]
    costs = reference("scaling-out.fit")({n: ring[n] for n in fit}, add, 2, 2)
    shown = str(scaling.show_fit(costs, two_ranks(ring, rounds), fit, add))
    assert "do not lie on the model's line" in shown, shown


def test_times_of_a_millisecond_print_as_ms():
    from rdmalab.lessons import scaling
    assert scaling._time(0.99999e-3) == "1 ms" and scaling._time(0.5e-3) == "500 us"
