#!/usr/bin/env bash
# The test suite beside two CPU-bound processes, three runs in a row (the loaded figure in docs/testing.md).
#
#   bash bench/suite_under_load.sh [REVISION]     (default: HEAD of this checkout)
#
# Clones this repository into a temporary directory (never runs from a checkout being edited), starts
# two `python3 -c "while True: pass"` loops, runs `CI=true bash .ci/run` (fresh venv, the README's install
# and test commands), then `python -m pytest` twice more in the same clone, and stops the loops.
# Prints one line per run: exit code, wall seconds, pytest's summary line. Logs stay in the clone's parent.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-$(git -C "$here" rev-parse HEAD)}
work=$(mktemp -d /tmp/genrun-loaded-XXXXXX)
git clone -q "$here" "$work/repo" && git -C "$work/repo" checkout -q "$rev" || exit 1
cd "$work/repo"
python3 -c "while True: pass" & loop1=$!
python3 -c "while True: pass" & loop2=$!
trap 'kill $loop1 $loop2 2>/dev/null' EXIT
echo "revision $(git rev-parse --short HEAD), two busy loops (pids $loop1 $loop2), logs in $work"
start=$(date +%s); CI=true bash .ci/run > "$work/run-1.log" 2>&1; code=$?; end=$(date +%s)
echo "run 1 (.ci/run with a fresh venv): exit $code, $((end - start)) s; $(grep -E ' (passed|failed)' "$work/run-1.log" | tail -1)"
for run in 2 3; do
    start=$(date +%s); (. .ci-venv/bin/activate && python -m pytest -p no:cacheprovider) > "$work/run-$run.log" 2>&1; code=$?; end=$(date +%s)
    echo "run $run (python -m pytest): exit $code, $((end - start)) s; $(tail -1 "$work/run-$run.log")"
done
