"""Lesson 11's PyTorch part: DDP on Gloo and with the ring as its communication hook (rdmalab.allreduce.ddp), the hook
exercise's check, and the lesson without PyTorch (an optional extra).

The tests that need PyTorch skip, saying how to add it, where it does not import; RDMALAB_TORCH_TEST=1 (.ci/run,
whose make test installs it: make torch-deps) makes that a failure."""
import json
import os
import sys

import numpy as np
import pytest

from rdmalab.allreduce import ddp
from rdmalab.lessons import exercises
from rdmalab.lessons import training as lessons_training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (the Soft-RoCE guest has no PyTorch: there test_notebooks runs lesson 11 as a learner without it does)
on_the_host = pytest.mark.host_only


@pytest.fixture
def torch():
    if not ddp.available():
        if os.environ.get("RDMALAB_TORCH_TEST") == "1":
            pytest.fail("RDMALAB_TORCH_TEST=1 but PyTorch does not import: make torch-deps installs it")
        pytest.skip("PyTorch is not installed (an optional extra): RDMALAB_TORCH_TEST=1 make test installs it")
    import torch
    return torch


def _future(torch, value):
    done = torch.futures.Future()
    done.set_result(value)
    return done


def _through_ring(state, bucket):
    grads = bucket.buffer()
    work = state.comm.buffer(grads.numel())
    work[:] = grads.numpy()
    state.ring(state.comm, work)
    return grads, work


def mistakes(torch):
    """Plausible wrong hooks, each with what its feedback must name."""
    def summed(state, bucket):
        grads, work = _through_ring(state, bucket)
        return _future(torch, grads.copy_(torch.from_numpy(work)))

    def unregistered(state, bucket):
        grads = bucket.buffer()
        state.ring(state.comm, grads.numpy())
        return _future(torch, grads / state.comm.size)

    def a_tensor(state, bucket):
        grads, work = _through_ring(state, bucket)
        return torch.from_numpy(work) / state.comm.size

    def never_completed(state, bucket):
        _through_ring(state, bucket)
        return torch.futures.Future()

    def own_gradients(state, bucket):
        grads, _ = _through_ring(state, bucket)
        return _future(torch, grads)

    def skips_a_bucket(state, bucket):
        if state.comm.rank == 1 and bucket.index() == 1:
            return _future(torch, bucket.buffer())
        grads, work = _through_ring(state, bucket)
        return _future(torch, grads.copy_(torch.from_numpy(work)).div_(state.comm.size))

    def a_copy_summed(state, bucket):   # the ring ran on a copy of the region: the sums never reach `work`
        grads = bucket.buffer()
        work = state.comm.buffer(grads.numel())
        work[:] = grads.numpy()
        state.ring(state.comm, work.copy())
        return _future(torch, grads.copy_(torch.from_numpy(work)).div_(state.comm.size))

    def rank_dependent(state, bucket):  # divides the same sum two ways: the replicas differ in the last bits
        grads, work = _through_ring(state, bucket)
        grads.copy_(torch.from_numpy(work))
        return _future(torch, grads * (1 / state.comm.size) if state.comm.rank else grads / state.comm.size)

    return [(summed, "the sum over the 2 ranks, not their mean"), (unregistered, "outside its registered region"),
            (a_tensor, "not a torch.futures.Future"), (never_completed, "a Future nobody completed"),
            (own_gradients, "its own gradients"), (skips_a_bucket, "ran the ring unequally"),
            (a_copy_summed, "outside its registered region"), (rank_dependent, "in the last bits")]


def test_the_hook_check_passes_the_reference_and_names_each_plausible_mistake(torch):
    assert exercises.check("in-pytorch.hook", ddp.ring_hook).passed
    for hook, named in mistakes(torch):
        feedback = exercises.check("in-pytorch.hook", hook)
        assert feedback.status == "wrong" and named in feedback.message, (hook.__name__, feedback.message)

    def skeleton(state, bucket):
        bucket.buffer()
    assert exercises.check("in-pytorch.hook", skeleton).status == "not yet"


def test_without_pytorch_the_check_says_how_to_add_it_and_the_lesson_goes_on(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # import torch raises ImportError, as where it is missing
    assert not ddp.available()
    feedback = exercises.check("in-pytorch.hook", ddp.ring_hook)
    assert feedback.status == "not yet" and "pip install torch" in feedback.message and "goes on" in feedback.message


@pytest.fixture(scope="module")
def pair():
    from rdmalab.allreduce.cluster import Cluster
    with Cluster(ranks=2, transport="rdma", max_bytes=4 << 20) as cluster:
        yield cluster


@on_the_host
def test_ddp_with_the_ring_as_its_hook_trains_as_gloo_and_as_one_numpy_process(torch, pair):
    runs = lessons_training.in_pytorch(pair, ddp.ring_hook, "ring", steps=20)   # raises if replicas drift
    assert set(runs) == {"gloo", "your ring"}
    keep = {"steps": 20, "keep_params": True, "master": "127.0.0.1"}
    gloo, ring = (pair.run(ddp.train, {**keep, "hook": hook}) for hook in (None, ddp.ring_hook))
    numpy_run = lessons_training.one_process({"steps": 20})
    for per_rank in (gloo, ring):
        lessons_training.replicas_agree(per_rank)
        # the same model, batches and update in another library: the same numbers but for the order of sums
        assert lessons_training.largest_difference(per_rank[0]["params"], numpy_run) < 1e-4
    assert lessons_training.largest_difference(gloo[0]["params"], ring[0]["params"]) < 1e-5
    assert all(len(r["records"]) == 20 and r["compute_alone"] for r in ring)
    assert runs["your ring"].accuracy() == pytest.approx(runs["gloo"].accuracy(), abs=0.02)


SUMMED_HOOK = """
def summed(state, bucket):
    import torch
    grads = bucket.buffer()
    work = state.comm.buffer(grads.numel())
    work[:] = grads.numpy()
    state.ring(state.comm, work)
    done = torch.futures.Future()
    done.set_result(grads.copy_(torch.from_numpy(work)))
    return done
"""


def as_a_notebook_cell_defines_it(source, name):
    """A function defined in __main__, as a notebook's are: ipyparallel sends it to the ranks by value (one from this
    module it would import there, by name)."""
    space = {"__name__": "__main__"}
    exec(source, space)
    return space[name]


@on_the_host
def test_a_hook_that_sums_without_averaging_trains_another_model(torch, pair):
    """What the check's "sum, not mean" stands for, on real DDP: the replicas still agree, and the model is not the
    one DDP on Gloo trains (its steps are p times too long)."""
    summed = as_a_notebook_cell_defines_it(SUMMED_HOOK, "summed")
    keep = {"steps": 5, "keep_params": True, "master": "127.0.0.1"}
    gloo, wrong = (pair.run(ddp.train, {**keep, "hook": hook}) for hook in (None, summed))
    lessons_training.replicas_agree(wrong)
    assert lessons_training.largest_difference(gloo[0]["params"], wrong[0]["params"]) > 1e-3


@on_the_host
def test_busbw_times_both_allreduces_and_they_sum_alike(torch, pair):
    times = pair.run(ddp.busbw, {"sizes": [1 << 16], "iters": 2})   # (raises where the two sums differ)
    (gloo_s, ring_s), = times[0].values()
    assert gloo_s > 0 and ring_s > 0

    sums_nothing = as_a_notebook_cell_defines_it("def sums_nothing(comm, x):\n    pass\n", "sums_nothing")
    with pytest.raises(Exception, match="sums of 65536 bytes differ"):
        pair.run(ddp.busbw, {"sizes": [1 << 16], "iters": 1, "ring": sums_nothing})


@on_the_host
def test_the_pytorch_lesson_without_pytorch_says_how_to_add_it_and_runs_to_the_end(tmp_path, monkeypatch):
    import papermill
    hidden = tmp_path / "hidden"
    (hidden / "torch").mkdir(parents=True)
    (hidden / "torch" / "__init__.py").write_text("raise ImportError('PyTorch hidden by tests/test_ddp.py')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("RDMALAB_LEARNER_DIR", str(tmp_path / "learner"))
    path = os.path.join(ROOT, "notebooks", "11-in-pytorch.ipynb")
    papermill.execute_notebook(path, str(tmp_path / "08.ipynb"), parameters={"QUICK": True}, kernel_name="python3",
                               cwd=os.path.dirname(path), progress_bar=False, execution_timeout=900, start_timeout=120)
    ran = json.load(open(tmp_path / "08.ipynb"))
    text = "".join(json.dumps(o) for c in ran["cells"] for o in c.get("outputs", []))
    assert "PyTorch is not installed: pip install torch" in text
    assert "DDP with" not in text                                   # no DDP table
    kept = json.load(open(tmp_path / "learner" / "evidence.json"))["in-pytorch"]
    assert "ddp_ratio" not in kept and 0 < kept["landing"]["rdma"]
