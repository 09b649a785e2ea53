# Runs on both guests of a two-host pair (softroce/vm.sh --pair): on a, the two-host tests (tests/twohost),
# which reach b over ssh; b serves until a says it is done (or an hour passes), then reports.
export PYTHONPATH=/project MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 PY_COLORS=0 RDMALAB_PROVIDER=pyverbs
# RDMALAB_TIME_SCALE: the guests run under CPU emulation, several times slower than the host
export RDMALAB_TIME_SCALE=3
if [ "$RDMALAB_PAIR" = b ]; then
  echo "guest b ($RDMALAB_PAIR_ADDRESS): serving guest a until it is done"
  i=0; while [ ! -e /tmp/pair-done ] && [ $i -lt 3600 ]; do sleep 1; i=$((i + 1)); done
  [ -e /tmp/pair-done ] || { echo "guest a never said it was done"; exit 1; }
  echo "guest a is done after $i s; the lab's processes left here:"
  pgrep -af 'ipyparallel|rdmalab' || echo "(none)"
  exit 0
fi
t0=$(date +%s)
python -m pytest -p no:cacheprovider -v -s -ra tests/twohost "$@"
rc=$?
echo "== the two-host tests took $(( $(date +%s) - t0 )) s (in the guests, under CPU emulation)"
ssh "$RDMALAB_PAIR_PEER" touch /tmp/pair-done || echo "could not tell guest b it is done (it stops on its own)"
exit $rc
