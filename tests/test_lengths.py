"""Every lesson fits 25 minutes by the instructor guide's estimate (rdmalab.lessons.length), and the
lessons' list in rdmalab.lessons.series names the notebooks as they are numbered."""
import glob
import os

import pytest

from rdmalab.lessons import length, series

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_the_series_lists_the_notebooks_in_their_order():
    assert [series.notebook(slug) for slug, _ in series.LESSONS] == NOTEBOOKS
    assert series.slug_of("notebooks/04-one-sided.ipynb") == "one-sided" and series.number("allreduce") == "06"
    with pytest.raises(KeyError, match="the lessons are welcome, socket-path"):
        series.number("05")


@pytest.mark.parametrize("name, e", length.lengths(os.path.join(ROOT, "notebooks")), ids=NOTEBOOKS)
def test_each_lesson_fits_25_minutes_with_its_measured_run_time(name, e):
    assert e["run"] > 0, f"notebooks/README.md: {name}'s run time"
    assert e["exercises"] == length.EXERCISE_MIN, f"{name}: one checked exercise per lesson"
    assert e["total"] <= length.LIMIT_MIN, (f"{name} takes {e['total']:.1f} minutes by the guide's estimate "
                                            f"({e}): tighten its prose or its run outside QUICK")


def test_the_estimate_counts_what_the_guide_says(tmp_path):
    import json
    cells = [{"cell_type": "markdown", "source": ["word " * 240]},                     # 2 minutes of reading
             {"cell_type": "code", "source": ["# a comment\n", "\n", "x = 1\n", "exercises.attempt(x)\n"]}]
    (tmp_path / "00-x.ipynb").write_text(json.dumps({"cells": cells}))
    e = length.estimate(tmp_path / "00-x.ipynb")
    assert e == {"reading": 2.0, "code": (20 + 2 * 5) / 60, "exercises": 6, "total": 8.5}
    (tmp_path / "README.md").write_text("| lesson | content | run | time |\n| --- | --- | --- | --- |\n"
                                        "| 00-x | a lesson | 90 s | 10 min |\n")
    assert length.run_times(tmp_path / "README.md") == {"x": 90.0}
    [(name, e)] = length.lengths(str(tmp_path))
    assert name == "00-x.ipynb" and e["run"] == 1.5 and e["total"] == 10.0
    (tmp_path / "README.md").write_text("| lesson | content | run | time |\n| 00-x | a lesson | fast | 10 min |\n")
    with pytest.raises(ValueError, match="write the measured seconds"):
        length.run_times(tmp_path / "README.md")
