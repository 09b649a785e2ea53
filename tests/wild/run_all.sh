#!/usr/bin/env bash
# Run every program of this corpus, each with a time limit, and print one line per program.
#
#   tests/wild/run_all.sh                 # on soft0: .venv/bin/python -m rdmalab.verbs.run PROGRAM
#   RUN="python3" tests/wild/run_all.sh   # on a real device (rxe0): the installed pyverbs
#
# RUN is the command that runs one program (default: the lab's runner from the repository root);
# TIMEOUT the limit per program in seconds (60). Each program's output goes to $LOGS/NAME.log
# (default /tmp/wild-logs). Exits 0 when every program printed its "OK NAME" line and exited 0.
# rdma_helpers.py is a module, not a program; cm_sync_server.py / cm_sync_client.py run under
# cm_sync_driver.py.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
RUN="${RUN:-$root/.venv/bin/python -m rdmalab.verbs.run}"
TIMEOUT="${TIMEOUT:-60}"
LOGS="${LOGS:-/tmp/wild-logs}"
mkdir -p "$LOGS"
failed=0
for program in "$here"/*.py; do
    name="$(basename "$program" .py)"
    case "$name" in rdma_helpers|cm_sync_server|cm_sync_client) continue ;; esac
    timeout "$TIMEOUT" $RUN "$program" > "$LOGS/$name.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -qx "OK $name" "$LOGS/$name.log"; then
        echo "pass  $name"
    else
        failed=$((failed + 1))
        why="$(grep -E '^(FAIL|[A-Za-z.]*(Error|Exception))' "$LOGS/$name.log" | tail -1)"
        [ "$rc" -eq 124 ] && why="timeout after ${TIMEOUT} s; ${why}"
        echo "FAIL  $name (exit $rc) ${why}"
    fi
done
echo "$failed program(s) failed; logs in $LOGS"
[ "$failed" -eq 0 ]
