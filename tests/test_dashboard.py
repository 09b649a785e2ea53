"""The charts and the dashboard widget, driven headless as a notebook's button would drive them."""
import matplotlib
import pytest

matplotlib.use("Agg")

from rdmalab import bench
from rdmalab.lessons import plots  # noqa: E402
from rdmalab.lessons.dashboard import Dashboard  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.host_only   # charts and widgets: the same on any provider


def test_dashboard_runs_headless_and_grows_its_chart_size_by_size():
    d = Dashboard(tests=("write_lat", "tcp_lat", "write_bw"), sizes=(8, 32), iters=40)
    assert d.sizes == [8, 16, 32] and d.tests == ["write_lat", "tcp_lat", "write_bw"]
    d.redraw_share = 1.0         # drawing may take all the time: redrawn after every size
    charts = []
    d.chart.observe(lambda change: charts.append(change["new"]), "value")
    results = d.run()
    assert set(results) == {"write_lat", "tcp_lat", "write_bw"}
    assert (d.progress.value, d.progress.max, d.progress.bar_style) == (9, 9, "success")
    assert len(charts) >= 9 and all(bytes(c[:8]) == PNG_MAGIC for c in charts)
    assert "RDMA latency lower than TCP's at" in d.status.value and "of 3</b> sizes" in d.status.value
    assert not d.run_button.disabled


def test_dashboard_draws_less_when_drawing_costs_more_than_measuring():
    d = Dashboard(tests=("write_lat", "tcp_lat"), sizes=(8, 64), iters=40)
    d.redraw_share = 1e-6        # as if a chart took a million times longer than a size
    charts = []
    d.chart.observe(lambda change: charts.append(change["new"]), "value")
    d.run()
    assert d.progress.value == 8
    assert len(charts) == 3      # the first size, then once at the end of each test


def _row(size, t=None, bw=None, target_cpu=0.0, initiator_cpu=1e-3, iterations=100):
    side = lambda cpu: {"cpu_s": cpu, "wall_s": 1.0, "waited_for_cpu_s": 0.0}   # noqa: E731
    return {"size": size, "iterations": iterations, "t_typical": t, "bw_avg_mib": bw,
            "initiator": side(initiator_cpu), "target": side(target_cpu)}


def test_repeats_keep_the_median_run_and_mark_the_noisy_points():
    runs = [bench.Results("write_lat", "soft", "soft0", [_row(8, t), _row(64, u)]) for t, u in ((2.0, 3.0), (9.0, 3.1),
                                                                                                (2.2, 3.2))]
    from rdmalab.lessons.dashboard import medians
    med = medians(runs)
    assert [row["t_typical"] for row in med.rows] == [2.2, 3.1]
    assert med.rows[0]["spread"] == pytest.approx(4.5) and med.rows[1]["spread"] < 1.5


def test_the_summary_counts_every_size_and_leads_with_the_receivers_cpu():
    from rdmalab.lessons.dashboard import summary
    results = {"write_lat": bench.Results("write_lat", "soft", "soft0", [_row(8, 2.0), _row(4096, 9.0)]),
               "tcp_lat": bench.Results("tcp_lat", "tcp", "loopback", [_row(8, 5.0), _row(4096, 6.0)]),
               "write_bw": bench.Results("write_bw", "soft", "soft0", [_row(1 << 20, bw=9000.0, target_cpu=0.0)]),
               "tcp_bw": bench.Results("tcp_bw", "tcp", "loopback", [_row(1 << 20, bw=2000.0, target_cpu=0.05)])}
    said = " ".join(summary(results))
    assert "RDMA latency lower than TCP's at <b>1 of 2</b> sizes (not at 4 KiB)" in said
    assert "RDMA target spent 0 ns of CPU per KiB; the TCP receiver 488 ns" in said
    assert "busy-polls its CQ" in said and "blocks in read()" in said


def test_dashboard_without_a_test_says_so():
    d = Dashboard(tests=(), sizes=(8, 8), iters=40)
    assert d.run() == {} and "Choose at least one test" in d.status.value


def test_charts_label_the_provider_and_the_published_references():
    lat = bench.run("write_lat", sizes=[8, 64], iters=40)
    tcp = bench.run("tcp_lat", sizes=[8, 64], iters=40)
    ax = plots.latency([lat, tcp])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    device = "emulated NIC" if lat.provider == "soft" else "Soft-RoCE" if lat.device.startswith("rxe") else "hardware"
    assert labels == [f"write_lat ({lat.device}: {device})", "tcp_lat (TCP loopback)"]
    notes = [t.get_text() for t in ax.texts]
    assert any("[perftest #131]" in n for n in notes)   # a published figure names its source
    costs = plots.costs([lat, tcp])
    assert [t.get_text() for t in costs.get_xticklabels()] == [f"write_lat\n({lat.provider})", "tcp_lat\n(tcp)"]
    assert plots.png(ax.figure).startswith(PNG_MAGIC)
