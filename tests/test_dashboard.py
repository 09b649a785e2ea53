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
    assert "latency at 32 B: RDMA/TCP" in d.status.value
    assert not d.run_button.disabled


def test_dashboard_draws_less_when_drawing_costs_more_than_measuring():
    d = Dashboard(tests=("write_lat", "tcp_lat"), sizes=(8, 64), iters=40)
    d.redraw_share = 1e-6        # as if a chart took a million times longer than a size
    charts = []
    d.chart.observe(lambda change: charts.append(change["new"]), "value")
    d.run()
    assert d.progress.value == 8
    assert len(charts) == 3      # the first size, then once at the end of each test


def test_dashboard_without_a_test_says_so():
    d = Dashboard(tests=(), sizes=(8, 8), iters=40)
    assert d.run() == {} and "Choose at least one test" in d.status.value


def test_charts_label_the_provider_and_the_published_references():
    lat = bench.run("write_lat", sizes=[8, 64], iters=40)
    tcp = bench.run("tcp_lat", sizes=[8, 64], iters=40)
    ax = plots.latency([lat, tcp])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [lat.label(), tcp.label()] and lat.provider in labels[0]
    notes = [t.get_text() for t in ax.texts]
    assert any("perftest issue 131" in n for n in notes)
    costs = plots.costs([lat, tcp])
    assert [t.get_text() for t in costs.get_xticklabels()] == [f"write_lat\n({lat.provider})", "tcp_lat\n(tcp)"]
    assert plots.png(ax.figure).startswith(PNG_MAGIC)
