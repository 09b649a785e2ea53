# Runs inside the Soft-RoCE guest (softroce/vm.sh), in a copy of the project:
#  1. the conformance suite on the emulated NIC soft0, recording what it observes;
#  2. every test and every lesson on the real rxe0 through Debian's pyverbs, recording the same,
#     except those marked host_only (TCP, charts, many-rank scaling: nothing there touches the
#     device, make test runs them, and under CPU emulation they would take most of CI's budget);
#  3. the differential check: the conformance suite must have observed the same outcomes on both;
#  4. the differential fuzzer (tests/fuzz): 300 generated verbs programs on soft0 and rxe0, whose
#     traces must agree but for the differences docs/emulated-nic.md lists; a new one is shrunk to a
#     minimal program, printed to keep as a regression test;
#  5. rdma-core's own tests on rxe0 and soft0 (softroce/rdma-core-tests.sh): every test that passes on
#     rxe0 passes on soft0, but for the soft0 gaps listed in tests/rdmacore/soft0-gaps.txt.
# Tests that only make sense on the emulated NIC (tests/soft) skip on rxe0 and say why; tests/helpers
# holds the programs some tests start, which pytest does not collect.
# RDMALAB_TIME_SCALE: the guest runs under CPU emulation, several times slower than the host
export PYTHONPATH=/project MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 PY_COLORS=0 RDMALAB_TIME_SCALE=5
python -m rdmalab doctor
# make test-softroce PYTEST_ARGS="..." (say -m interop, or -k NAME): those tests on rxe0, and only them;
# the differential check and rdma-core's tests need the whole suite, so they run without PYTEST_ARGS only
if [ $# -gt 0 ]; then
  echo "== the tests PYTEST_ARGS select ($*), on rxe0"
  RDMALAB_PROVIDER=pyverbs python -m pytest -p no:cacheprovider -ra -m "not host_only" "$@"   # (testpaths: tests/)
  exit
fi
t0=$(date +%s)
lap() { now=$(date +%s); times="$times $1 $((now - t0)) s;"; t0=$now; }
echo "== the conformance suite on soft0 (for the differential check)"
RDMALAB_PROVIDER=soft RDMALAB_TRACE=/tmp/trace-soft.json python -m pytest -q -p no:cacheprovider tests/conformance | tail -1
lap "conformance on soft0"
echo "== every test on rxe0"
RDMALAB_PROVIDER=pyverbs RDMALAB_TRACE=/tmp/trace-rxe.json python -m pytest -p no:cacheprovider -ra --durations=15 -m "not host_only" tests "$@"
tests=$?
lap "every test on rxe0"
python softroce/compare_traces.py /tmp/trace-soft.json /tmp/trace-rxe.json
differential=$?
echo "== the differential fuzzer: generated programs on soft0 and rxe0"
python -m tests.fuzz.differential
fuzz=$?
lap "the fuzzer"
echo "== rdma-core's own tests on rxe0 and soft0"
sh softroce/rdma-core-tests.sh
rdmacore=$?
lap "rdma-core's tests"
echo "== times (in the guest, under CPU emulation):$times"
[ $tests -eq 0 ] && [ $differential -eq 0 ] && [ $fuzz -eq 0 ] && [ $rdmacore -eq 0 ]
