# Runs inside the Soft-RoCE guest (softroce/vm.sh): rdma-core's own tests (of each version softroce/vm.sh built,
# with its pyverbs: /opt/rdma-core and /opt/rdma-core-older) on rxe0 through that pyverbs, then
# the same files on soft0, then softroce/compare_rdma_core.py: every test that passes on rxe0 must pass
# on soft0, but for the known soft0 gaps listed in tests/rdmacore/soft0-gaps.txt. About 75 s a version.
#   softroce/vm.sh sh softroce/rdma-core-tests.sh [runner args, e.g. -k test_cq]
export PYTHONPATH=/project MPLBACKEND=Agg PY_COLORS=0 RDMALAB_TIME_SCALE=${RDMALAB_TIME_SCALE:-5}
# Each release the guest holds: /opt/rdma-core (59.0, libibverbs_enums) and /opt/rdma-core-older (57.0,
# whose tests use pyverbs <= 58's enums and cm_enums). Programs of both generations must run on soft0.
status=0
for P in /opt/rdma-core /opt/rdma-core-older; do
  T=$P/tests
  [ -d $T ] || { echo "no $T: rebuild the guest (softroce/vm.sh --build)"; status=2; continue; }
  v=$(cat $P/VERSION 2>/dev/null)
  echo "== rdma-core $v's tests on rxe0, through pyverbs $v"
  start=$(date +%s)
  LD_LIBRARY_PATH=$P/lib PYTHONPATH=$P/python:/project \
    python -m rdmalab.verbs.run --unittest $T --provider pyverbs --timeout 60 --json /tmp/rdma-core-$v-rxe.json "$@" | tail -1
  echo "   ($(( $(date +%s) - start )) s)"
  echo "== rdma-core $v's tests on soft0"
  start=$(date +%s)
  RDMALAB_PROVIDER=soft python -m rdmalab.verbs.run --unittest $T --timeout 60 --json /tmp/rdma-core-$v-soft.json "$@" 2>&1 | tail -1
  echo "   ($(( $(date +%s) - start )) s)"
  python softroce/compare_rdma_core.py /tmp/rdma-core-$v-rxe.json /tmp/rdma-core-$v-soft.json --known tests/rdmacore/soft0-gaps.txt || status=1
done
exit $status
