"""The alpha-beta-gamma model: its formulas on known numbers, and fitting recovers known costs."""
import math

import pytest

from rdmalab.allreduce import model


def test_ring_hd_and_naive_terms():
    assert model.terms("ring", 4, 1000) == (6, 1500.0, 750.0)
    assert model.terms("hd", 8, 800) == (6.0, 1400.0, 700.0)
    assert model.terms("naive", 4, 1000) == (6, 6000, 3000)
    assert model.terms("ring", 1, 1000) == (0.0, 0.0, 0.0)
    assert model.terms("tree", 8, 800) == (6.0, 1600.0, 800.0)
    assert model.terms("sharp", 4, 1000) == (2.0, 1000.0, 0.0)
    with pytest.raises(ValueError, match="ring, hd, naive, tree, sharp"):
        model.terms("butterfly", 4, 10)


def test_prediction_adds_the_three_costs():
    c = model.Costs(alpha=1e-6, beta=1e-9, gamma=1e-10)
    assert model.predict("ring", 4, 1000, c) == pytest.approx(6e-6 + 1500e-9 + 750e-10)


def test_fit_recovers_the_costs_that_made_the_times():
    truth = model.Costs(alpha=5e-6, beta=2e-10, gamma=3e-10)
    samples = [(p, n, model.predict("ring", p, n, truth)) for p in (2, 4, 8) for n in (1 << 12, 1 << 18, 1 << 24)]
    # in a ring, bytes sent and bytes reduced are both proportional to (p-1)/p n: only 2 beta + gamma
    # is identifiable from ring times alone, so gamma comes from numpy's measured add rate
    fitted = model.fit(samples, "ring", gamma=truth.gamma)
    assert fitted.alpha == pytest.approx(truth.alpha, rel=1e-6) and fitted.beta == pytest.approx(truth.beta, rel=1e-6)
    free = model.fit(samples, "ring")
    assert 2 * free.beta + free.gamma == pytest.approx(2 * truth.beta + truth.gamma, rel=1e-6)
    assert all(model.predict("ring", p, n, free) == pytest.approx(t, rel=1e-6) for p, n, t in samples)


def test_bandwidth_term_does_not_grow_with_ranks_but_latency_does():
    ib = model.NETWORKS["InfiniBand NDR 400 Gb/s (RDMA)"]
    n = model.MODELS["13B parameters (bf16)"]
    t8, t16k = model.predict("ring", 8, n, ib), model.predict("ring", 16384, n, ib)
    assert t16k / t8 < 1.2            # 2 (p-1)/p n beta tends to 2 n beta
    small = 1 << 20
    assert model.predict("ring", 16384, small, ib) > 100 * model.predict("ring", 8, small, ib) / 10
    assert math.isclose(1 / ib.beta, 50e9)


def test_networks_are_labelled_with_sources():
    for name, costs in model.NETWORKS.items():
        assert costs.label and "Gb" in name and "GB/s" in costs.label


def test_share_of_a_step_spent_communicating():
    params = 7e9
    compute = model.compute_seconds(params, tokens_per_gpu=4096)
    assert compute == pytest.approx(6 * 7e9 * 4096 / (400e12 * 0.4))
    for speed in (100, 400):   # like with like: the same link speed, RDMA against TCP
        rdma = model.comm_share("ring", 64, params * 2, model.NETWORKS[f"{speed} GbE RoCE (RDMA)"], compute)
        tcp = model.comm_share("ring", 64, params * 2, model.NETWORKS[f"{speed} GbE TCP"], compute)
        assert 0 < rdma < tcp < 1


def test_tcp_copies_overlap_the_wire_rather_than_add_to_it():
    slow_wire = model.tcp(10, copy_Bps=100e9)          # 1.25 GB/s wire, copies far faster: the wire decides
    assert 1 / slow_wire.beta == pytest.approx(1.25e9)
    fast_wire = model.tcp(400, copy_Bps=10e9)          # 50 GB/s wire, 2 copies at 10 GB/s: 5 GB/s
    assert 1 / fast_wire.beta == pytest.approx(5e9)
    assert model.pipelined(50e9, 5e9) == pytest.approx(1 / 5e9)
    assert model.unpipelined(50e9, 5e9) == pytest.approx(1 / 50e9 + 1 / 5e9)
    for speed in (100, 400):   # same wire: RDMA's beta is the wire's, TCP's never smaller
        assert model.NETWORKS[f"{speed} GbE RoCE (RDMA)"].beta == pytest.approx(8 / (speed * 1e9))
        assert model.NETWORKS[f"{speed} GbE TCP"].beta >= model.NETWORKS[f"{speed} GbE RoCE (RDMA)"].beta


def test_fit_that_is_not_physical_is_refused_not_clipped():
    # times that fall with size: the least-squares beta is negative, and check_fit says so
    samples = [(2, 1 << 16, 4e-4), (2, 1 << 20, 2e-4), (2, 1 << 24, 1e-4)]
    bad = model.fit(samples, "ring", gamma=1e-11)
    assert bad.beta < 0
    with pytest.raises(ValueError, match="beta"):
        model.check_fit(bad)
    with pytest.raises(ValueError, match="alpha"):
        model.check_fit(model.Costs(-1e-6, 1e-10, 1e-11))


def test_held_out_predicts_only_what_the_fit_did_not_see():
    truth = model.Costs(alpha=4e-5, beta=1e-10, gamma=3e-11)
    samples = [(p, n, model.predict("ring", p, n, truth) * (1.1 if p == 4 else 1.0))
               for p in (2, 4) for n in (1 << 16, 1 << 18, 1 << 20, 1 << 22)]
    costs, rows = model.held_out(samples, [(2, 1 << 16), (2, 1 << 20)], gamma=truth.gamma)
    assert {(r["p"], r["n"]) for r in rows} == {(2, 1 << 18), (2, 1 << 22)} | {(4, n) for n in (1 << 16, 1 << 18, 1 << 20, 1 << 22)}
    assert costs.alpha == pytest.approx(truth.alpha) and costs.beta == pytest.approx(truth.beta)
    for r in rows:   # exact on 2 ranks; the 4-rank times were made 10% slower than the model
        assert r["error"] == pytest.approx(0.0 if r["p"] == 2 else 1 / 1.1 - 1, abs=1e-9)


def test_ranks_sharing_cpus_take_turns_and_held_out_predicts_with_it():
    c = model.Costs(alpha=4e-5, beta=1e-10, gamma=3e-11, label="fit")
    assert model.on_shared_cpus(c, 2, 2) is c and model.on_shared_cpus(c, 4, 8) is c   # a CPU each: unchanged
    shared = model.on_shared_cpus(c, 4, 2)
    assert (shared.alpha, shared.beta, shared.gamma) == pytest.approx((8e-5, 2e-10, 6e-11))
    assert model.predict("ring", 4, 1 << 20, shared) == pytest.approx(2 * model.predict("ring", 4, 1 << 20, c))
    with pytest.raises(ValueError, match="cpus"):
        model.on_shared_cpus(c, 4, 0)
    # 4 ranks on 2 CPUs measured twice as slow as a CPU each: predicted exactly once the turns are counted
    samples = [(p, n, model.predict("ring", p, n, c) * (2.0 if p == 4 else 1.0)) for p in (2, 4) for n in (1 << 16, 1 << 20)]
    _, rows = model.held_out(samples, [(2, 1 << 16), (2, 1 << 20)], gamma=c.gamma, cpus=2)
    assert [round(r["error"], 9) for r in rows] == [0.0, 0.0]
    _, rows = model.held_out(samples, [(2, 1 << 16), (2, 1 << 20)], gamma=c.gamma)   # without: half the time
    assert [round(r["error"], 9) for r in rows] == [-0.5, -0.5]


def test_on_one_cpu_the_fit_divides_the_turns_out_and_predicts_more_ranks():
    # the scaling lesson: 2 ranks and 4 ranks, all on one CPU; a run takes p times one rank's time
    one_rank = model.Costs(alpha=2e-4, beta=1.6e-10, gamma=7e-11)
    samples = [(p, n, p * model.predict("ring", p, n, one_rank))
               for p in (2, 4) for n in (64 << 10, 16 << 20, 32 << 20)]
    assert model.turns(4, 1) == 4 and model.turns(2, 2) == 1 and model.turns(8, None) == 1
    costs, rows = model.held_out(samples, [(2, 64 << 10), (2, 32 << 20)], gamma=one_rank.gamma, cpus=1)
    assert costs.alpha == pytest.approx(one_rank.alpha) and costs.beta == pytest.approx(one_rank.beta)
    assert len(rows) == 4 and all(abs(r["error"]) < 1e-9 for r in rows)


def test_one_cpu_pins_what_starts_inside_and_gives_the_cpus_back():
    import os
    from rdmalab.lessons import scaling
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this system")
    before = os.sched_getaffinity(0)
    with scaling.one_cpu() as cpus:
        assert cpus == 1 and os.sched_getaffinity(0) == {min(before)}
    assert os.sched_getaffinity(0) == before


def test_scaling_lesson_compares_the_prediction_times_the_turns():
    from rdmalab.lessons import scaling
    predicted = {16 << 20: 5e-3, 32 << 20: 10e-3}
    close = scaling.compare(predicted, {16 << 20: 21e-3, 32 << 20: 38e-3}, cpus=1)   # x 4 turns: 20 and 40 ms
    assert close.worst == pytest.approx(max(abs(20 / 21 - 1), abs(40 / 38 - 1)))
    assert "Within" in repr(close) and "x 4 turns" in repr(close) and "<table>" in close._repr_html_()
    far = scaling.compare(predicted, {16 << 20: 40e-3, 32 << 20: 80e-3}, cpus=1)
    assert far.worst == pytest.approx(0.5) and "run the cell again" in repr(far)
    assert scaling.compare(predicted, {16 << 20: 5e-3}, cpus=4).worst == pytest.approx(0.0)   # a CPU each


def test_gpudirect_bounce_and_slowest_link():
    ndr = model.NETWORKS["InfiniBand NDR 400 Gb/s (RDMA)"]
    direct, bounce = model.gpu_path(ndr, True), model.gpu_path(ndr, False)
    assert 1 / direct.beta == pytest.approx(50e9) and 1 / bounce.beta == pytest.approx(32e9)
    assert bounce.alpha > direct.alpha
    half = model.slowest_link(ndr, 0.5)
    assert half.beta == pytest.approx(2 * ndr.beta) and half.alpha == ndr.alpha
    with pytest.raises(ValueError):
        model.slowest_link(ndr, 0)


def test_sharp_sends_each_byte_up_once():
    ib = model.NETWORKS["InfiniBand NDR 400 Gb/s (RDMA)"]
    p, n = 8, 1 << 30
    t = model.predict("sharp", p, n, ib) - 2 * ib.alpha
    algbw = n / t
    assert algbw == pytest.approx(50e9)    # up and down at once, full duplex: the link's bandwidth, no more
    assert algbw * 2 * (p - 1) / p > 50e9                      # the busbw nccl-tests prints exceeds the wire


def test_scaling_table_covers_the_models_networks_and_sizes():
    rows = model.scaling_table(gpus=(8, 16384))
    assert len(rows) == len(model.MODELS) * len(model.NETWORKS) * 2
    by = {(r["model"], r["network"], r["gpus"]): r for r in rows}
    big = "13B parameters (bf16)"
    assert by[(big, "400 GbE TCP", 16384)]["comm_share"] > by[(big, "400 GbE RoCE (RDMA)", 16384)]["comm_share"]


def test_the_example_models_fit_an_80_GB_gpu_for_data_parallel_training():
    for grad_bytes in model.MODELS.values():   # bf16 parameters and gradients: 2 + 2 bytes per parameter
        assert 2 * grad_bytes < 80e9


def test_tree_and_ring_send_about_2n_at_scale_as_nccl_models_them():
    # NCCL's tuning.cc: algbw = busbw / 2 for the tree, busbw p / (2 (p-1)) for the ring; beta = 1 / busbw
    c = model.Costs(alpha=0.0, beta=1 / 50e9, gamma=0.0)
    n = 1 << 30
    for p in (2, 8, 1024):
        assert n / model.predict("tree", p, n, c) == pytest.approx(50e9 / 2)
        assert n / model.predict("ring", p, n, c) == pytest.approx(50e9 * p / (2 * (p - 1)))
    assert model.predict("tree", 2, n, c) == pytest.approx(2 * model.predict("ring", 2, n, c))   # 2x at p = 2 only
    assert model.predict("tree", 1024, n, c) == pytest.approx(model.predict("ring", 1024, n, c), rel=1e-3)


def test_tcp_copies_are_the_learners_figures_and_the_copy_cores_an_assumption():
    nets = model.like_with_like(copy_Bps=8e9, copies=2.0)
    assert 1 / nets["400 GbE TCP"].beta == pytest.approx(4e9) == 1 / nets["100 GbE TCP"].beta   # both copy-bound
    four = model.like_with_like(copy_Bps=8e9, copy_cores=4)
    assert 1 / four["400 GbE TCP"].beta == pytest.approx(16e9) and 1 / four["100 GbE TCP"].beta == pytest.approx(12.5e9)
    assert 1 / nets["400 GbE RoCE (RDMA)"].beta == pytest.approx(50e9)
    assert model.copy_rate(nbytes=1 << 20, repeats=2) > 0


def test_scaling_lesson_measures_again_when_noise_leaves_no_positive_beta(monkeypatch, capsys):
    import contextlib
    from rdmalab.allreduce import cluster as cluster_module
    from rdmalab.lessons import scaling
    sizes = [64 << 10, 256 << 10, 1 << 20]
    good = {64 << 10: 1.0e-4, 256 << 10: 1.5e-4, 1 << 20: 3.5e-4}
    noisy = {64 << 10: 9.0e-4, 256 << 10: 2.0e-4, 1 << 20: 3.5e-4}   # a disturbed small size: beta < 0
    runs = [noisy, noisy, good]
    monkeypatch.setattr(cluster_module, "Cluster", lambda **kwargs: contextlib.nullcontext("cluster"))
    monkeypatch.setattr(model, "reduction_rate", lambda: 20e9)
    asked = []

    def measure(cluster, sizes, rounds, **kwargs):
        times = runs.pop(0)
        asked.append(rounds)
        return times, {n: [t] for n, t in times.items()}

    monkeypatch.setattr(model, "measure", measure)
    two = scaling.two_ranks(sizes, quick=True)
    assert two.times == good and asked == [3, 6, 12] and two.turns == 2
    assert "measuring again with 6 rounds" in capsys.readouterr().out
    runs[:] = [noisy, noisy, noisy]
    with pytest.raises(ValueError, match="too busy for 3 attempts"):
        scaling.two_ranks(sizes, quick=True)


def test_large_sizes_fit_beta_with_alpha_from_small_ones():
    true = model.Costs(40e-6, 2e-11, 7e-11)
    noisy = {16 << 20: 0.9, 64 << 20: 1.0}   # 10% noise on 16 MiB turns alpha (0.08 ms of 2.4 ms) negative
    samples = [(2, n, model.predict("ring", 2, n, true) * k) for n, k in noisy.items()]
    with pytest.raises(ValueError, match="alpha"):
        model.check_fit(model.fit(samples, gamma=7e-11))
    fixed = model.check_fit(model.fit(samples, gamma=7e-11, alpha=40e-6))
    assert fixed.alpha == 40e-6 and abs(fixed.beta / true.beta - 1) < 0.25   # the 10% lands on beta, doubled by 2 beta + gamma
