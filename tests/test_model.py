"""The alpha-beta-gamma model: its formulas on known numbers, and fitting recovers known costs."""
import math

import pytest

from rdmalab.allreduce import model


def test_ring_hd_and_naive_terms():
    assert model.terms("ring", 4, 1000) == (6, 1500.0, 750.0)
    assert model.terms("hd", 8, 800) == (6.0, 1400.0, 700.0)
    assert model.terms("naive", 4, 1000) == (6, 6000, 3000)
    assert model.terms("ring", 1, 1000) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="ring, hd or naive"):
        model.terms("tree", 4, 10)


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
    n = model.MODELS["70B parameters (bf16)"]
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
    ib = model.comm_share("ring", 64, params * 2, model.NETWORKS["InfiniBand NDR 400 Gb/s (RDMA)"], compute)
    tcp = model.comm_share("ring", 64, params * 2, model.NETWORKS["100 GbE TCP"], compute)
    assert 0 < ib < tcp < 1


def test_scaling_table_covers_the_models_networks_and_sizes():
    rows = model.scaling_table(gpus=(8, 16384))
    assert len(rows) == len(model.MODELS) * len(model.NETWORKS) * 2
    by = {(r["model"], r["network"], r["gpus"]): r for r in rows}
    big = "70B parameters (bf16)"
    assert by[(big, "100 GbE TCP", 16384)]["comm_share"] > by[(big, "InfiniBand NDR 400 Gb/s (RDMA)", 16384)]["comm_share"]
    assert "share" in model.format_table(rows).splitlines()[0]
