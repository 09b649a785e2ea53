"""Every lesson runs under papermill (QUICK=True) and is committed clean."""
import glob
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
NAMES = [os.path.basename(p) for p in NOTEBOOKS]


def test_there_are_lessons():
    assert NOTEBOOKS, "notebooks/ holds no lesson"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_notebook_is_committed_clean(path):
    nb = json.load(open(path))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "strip the outputs"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and re.search(r"^QUICK\s*=\s*False", "".join(tagged[0]["source"]), re.M)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    text = json.dumps(nb)
    assert not re.search(r"(/home/|/root/|/work/|/tmp/|[A-Z]:\\\\)", text), "no absolute paths in lessons"


# Lessons 05 and 06 start ipyparallel clusters several times; under the Soft-RoCE guest's CPU emulation
# that alone takes longer than CI's budget. Their RDMA path (the cluster's transport and collectives)
# runs on rxe0 in test_allreduce; the lessons themselves run here, in make test.
CLUSTER_LESSONS = {"05-allreduce.ipynb", "06-scaling-out.ipynb"}
RUNS = [pytest.param(p, marks=pytest.mark.host_only) if os.path.basename(p) in CLUSTER_LESSONS else p for p in NOTEBOOKS]


@pytest.mark.parametrize("path", RUNS, ids=NAMES)
def test_notebook_runs_under_papermill(path, tmp_path):
    import papermill
    # a cell that runs for 15 minutes has hung: fail it rather than wait forever
    papermill.execute_notebook(path, str(tmp_path / os.path.basename(path)), parameters={"QUICK": True},
                               kernel_name="python3", cwd=os.path.dirname(path), progress_bar=False,
                               execution_timeout=900, start_timeout=120)
