"""One base for what rdmalab raises on purpose: the `rdmalab` command prints its message and exits 1; any
other exception is a bug and keeps its traceback."""
import pytest

from rdmalab import cli
from rdmalab.allreduce.algorithms import validate
from rdmalab.allreduce.cluster import ClusterError
from rdmalab.bench import BenchError
from rdmalab.errors import CompletionError, ProviderError, RdmalabError, RequestError
from rdmalab.proc.children import HelperError


@pytest.mark.parametrize("error", [BenchError, ClusterError, CompletionError, HelperError, ProviderError, RequestError])
def test_every_error_said_on_purpose_shares_one_base(error):
    assert issubclass(error, RdmalabError)


def test_a_refused_request_is_both_ours_and_a_value_error():
    with pytest.raises(RequestError) as refused:
        validate("tree-of-life", "float32", 4)
    assert isinstance(refused.value, ValueError) and "choose one of" in str(refused.value)


def test_the_command_prints_our_errors_and_lets_a_bug_show_its_traceback(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_bench", lambda args: (_ for _ in ()).throw(BenchError("the target process died")))
    assert cli.main(["bench", "write_lat"]) == 1
    assert "rdmalab: the target process died" in capsys.readouterr().err
    monkeypatch.setattr(cli, "_bench", lambda args: (_ for _ in ()).throw(KeyError("a bug")))
    with pytest.raises(KeyError):
        cli.main(["bench", "write_lat"])
