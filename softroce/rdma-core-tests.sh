# Runs inside the Soft-RoCE guest (softroce/vm.sh): rdma-core's own tests (/opt/rdma-core/tests, of the
# version softroce/vm.sh built into /opt/rdma-core with its pyverbs) on rxe0 through that pyverbs, then
# the same files on soft0, then softroce/compare_rdma_core.py: every test that passes on rxe0 must pass
# on soft0, but for the known soft0 gaps listed in tests/rdmacore/soft0-gaps.txt. About 75 s.
#   softroce/vm.sh sh softroce/rdma-core-tests.sh [runner args, e.g. -k test_cq]
export PYTHONPATH=/project MPLBACKEND=Agg PY_COLORS=0 RDMALAB_TIME_SCALE=${RDMALAB_TIME_SCALE:-5}
T=/opt/rdma-core/tests
[ -d $T ] || { echo "no $T: rebuild the guest (softroce/vm.sh --build)"; exit 2; }
echo "== rdma-core's tests on rxe0, through pyverbs $(cat /opt/rdma-core/VERSION 2>/dev/null)"
start=$(date +%s)
LD_LIBRARY_PATH=/opt/rdma-core/lib PYTHONPATH=/opt/rdma-core/python:/project \
  python -m rdmalab.verbs.run --unittest $T --provider pyverbs --timeout 60 --json /tmp/rdma-core-rxe.json "$@" | tail -1
echo "   ($(( $(date +%s) - start )) s)"
echo "== rdma-core's tests on soft0"
start=$(date +%s)
RDMALAB_PROVIDER=soft python -m rdmalab.verbs.run --unittest $T --timeout 60 --json /tmp/rdma-core-soft.json "$@" 2>&1 | tail -1
echo "   ($(( $(date +%s) - start )) s)"
python softroce/compare_rdma_core.py /tmp/rdma-core-rxe.json /tmp/rdma-core-soft.json --known tests/rdmacore/soft0-gaps.txt
