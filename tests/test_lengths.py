"""Every lesson fits 30 minutes by the instructor guide's estimate (rdmalab.lessons.length): its prose, its code,
reading what a full run shows (counted from one), its checked challenges (at least two, each counted by the lines
the learner writes, and one retry), its predictions, and its run; and the lessons' list in rdmalab.lessons.series
names the notebooks as they are numbered."""
import functools
import glob
import json
import os

import pytest

from rdmalab.lessons import length, series

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_the_series_lists_the_notebooks_in_their_order():
    assert [series.notebook(slug) for slug, _ in series.LESSONS] == NOTEBOOKS
    assert series.slug_of("notebooks/05-one-sided.ipynb") == "one-sided" and series.number("allreduce") == "09"
    assert series.number("the-answer") == f"{len(series.LESSONS) - 1:02d}", "the answer comes last"
    with pytest.raises(KeyError, match="the lessons are welcome, socket-path"):
        series.number("05")


@functools.lru_cache(maxsize=1)
def estimates():
    return dict(length.lengths(os.path.join(ROOT, "notebooks")))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_lesson_fits_30_minutes_with_its_measured_run_and_outputs(name):
    e = estimates()[name]
    assert e["run"] > 0, f"notebooks/README.md: {name}'s run time"
    assert e["outputs"] > 0, f"notebooks/README.md: {name}'s outputs (python -m rdmalab.lessons.length --measure)"
    assert e["challenges"] >= 2, f"{name}: {e['challenges']} checked challenge(s); a lesson needs at least two"
    assert e["total"] <= length.LIMIT_MIN, (f"{name} takes {e['total']:.1f} minutes by the guide's estimate "
                                            f"({e}): split it, or tighten its prose or its outputs")


def test_the_estimate_counts_what_the_guide_says(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["word " * 240]},                     # 2 minutes of reading
             {"cell_type": "code", "source": ["# a comment\n", "\n", "x = 1\n", "exercises.attempt('x.y', f)\n",
                                              "exercises.compare('z', None, 1)\n"]}]
    (tmp_path / "00-x.ipynb").write_text(json.dumps({"cells": cells}))
    written = {"x.y": 8}.__getitem__                                                  # 8 lines: 2 + 2 minutes, and a retry
    e = length.estimate(tmp_path / "00-x.ipynb", written=written)
    assert e == {"reading": 2.0, "code": (20 + 3 * 5) / 60, "outputs": 0, "exercises": 6.0, "predictions": 1.5,
                 "total": 2.0 + 35 / 60 + 6.0 + 1.5, "challenges": 1}
    seen = {"rows": 10, "charts": 2, "lines": 20, "widgets": 4}                       # 60 + 60 + 60 + 60 s
    assert length.estimate(tmp_path / "00-x.ipynb", seen, written)["outputs"] == 4.0
    (tmp_path / "README.md").write_text("| lesson | content | run | outputs | time |\n| --- | --- | --- | --- | --- |\n"
                                        "| 00-x | a lesson | 90 s | 10 rows, 2 charts, 20 lines, 4 widgets | 10 min |\n")
    assert length.run_times(tmp_path / "README.md") == {"x": 90.0}
    assert length.output_counts(tmp_path / "README.md") == {"x": seen}
    [(name, e)] = length.lengths(str(tmp_path), written)
    assert name == "00-x.ipynb" and e["run"] == 1.5 and e["total"] == 2.0 + 35 / 60 + 6.0 + 1.5 + 4 + 1.5
    length.record({"x": (30.4, {"rows": 1, "charts": 1, "lines": 1, "widgets": 1})}, str(tmp_path), written)
    assert "| 00-x | a lesson | 30 s | 1 row, 1 chart, 1 line, 1 widget | 11 min |" in (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").write_text("| lesson | content | run | outputs | time |\n"
                                        "| 00-x | a lesson | fast | 1 row | 10 min |\n")
    with pytest.raises(ValueError, match="write the measured seconds"):
        length.run_times(tmp_path / "README.md")
    with pytest.raises(ValueError, match="write what a full run shows"):
        length.output_counts(tmp_path / "README.md")


def test_a_lesson_states_the_time_the_guide_estimates(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["# 00 · X\n", "\n", "In this lesson (29 minutes) you will (29 minutes):\n"]}]
    (tmp_path / "00-x.ipynb").write_text(json.dumps({"cells": cells}))
    length.state_time(tmp_path / "00-x.ipynb", 17)
    said = "".join(json.loads((tmp_path / "00-x.ipynb").read_text())["cells"][0]["source"])
    assert said == "# 00 · X\n\nIn this lesson (17 minutes) you will (29 minutes):\n"


def test_outputs_are_counted_as_a_learner_reads_them():
    page = "<p>a takeaway</p><table><tr><th>size</th></tr><tr><td>1</td></tr><tr><td>2</td></tr></table>"
    image = {"image/png": "...", "text/plain": "<Figure>"}
    dashboard = {"application/vnd.jupyter.widget-view+json": {"model_id": "box"}, "text/plain": "VBox()"}
    button = {"application/vnd.jupyter.widget-view+json": {"model_id": "button"}, "text/plain": "Button()"}
    state = {"box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_chart", "IPY_MODEL_button"]}},
             "chart": {"model_name": "ImageModel", "state": {}}, "button": {"model_name": "ButtonModel", "state": {}}}
    nb = {"metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}},
          "cells": [{"cell_type": "code", "outputs": [
              {"output_type": "stream", "text": ["one\n", "two\n", "\n", "x" * 250 + "\n"]},   # 2 + 3 lines
              {"output_type": "display_data", "data": {"text/html": page, "text/plain": "..."}},  # 2 rows, 1 line
              {"output_type": "execute_result", "data": image},
              {"output_type": "display_data", "data": dashboard},                               # its image: a chart
              {"output_type": "display_data", "data": button},
              {"output_type": "execute_result", "data": {"text/plain": "42"}}]},
              {"cell_type": "markdown", "source": ["# no outputs"]}]}
    assert length.count_outputs(nb) == {"rows": 2, "charts": 2, "lines": 7, "widgets": 1}
