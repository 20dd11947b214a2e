#!/usr/bin/env bash
# A data-parallel run never hangs on a lost rank:
#  1. kill -9 of one rank mid-run: mpirun notices and ends the job with an error
#     naming the rank, within 60 s;
#  2. a rank that hangs (SIGSTOP): the other rank's collective watchdog
#     (BIGTRAIN_COLLECTIVE_TIMEOUT_S) aborts the job with a message saying which
#     collective waited how long.
set -euo pipefail
BIGTRAIN=$1
SOURCE=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
job=
cleanup() { [ -n "$job" ] && kill -9 "$job" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$tmp"

"$BIGTRAIN" make-demo-data --out data --mnist "$SOURCE/tests/data/mnist" --size 192 --classes 2,7 --train 8 \
  --tile 64 >/dev/null 2>&1 || fail "make-demo-data failed"
# Many epochs: the job is still training whenever the rank is killed.
cat > run.yaml <<'YAML'
data: {train: data/train.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 1000, images_per_step: 2, tile_batch: 5, optimizer: sgd, lr: 0.01, seed: 1}
device: {type: cpu, threads: 1}
YAML

# Starts a 2-rank run in the background; sets $job and waits until rank 1 trains.
start() {
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x BIGTRAIN_COLLECTIVE_TIMEOUT_S="$2" \
    "$BIGTRAIN" run run.yaml --set output.dir="runs/$1" > "$1.log" 2>&1 &
  job=$!
  for _ in $(seq 300); do
    [ -s "runs/$1/metrics.csv" ] && break  # one epoch done: both ranks are in the training loop
    kill -0 "$job" 2>/dev/null || { cat "$1.log"; fail "$1: the job ended before its first epoch"; }
    sleep 0.2
  done
  [ -s "runs/$1/metrics.csv" ] || { cat "$1.log"; fail "$1: no epoch within 60 s"; }
  rank1=
  for pid in $(pgrep -P "$job"); do
    tr '\0' '\n' < "/proc/$pid/environ" | grep -qx "OMPI_COMM_WORLD_RANK=1" && rank1=$pid
  done
  [ -n "$rank1" ] || fail "$1: rank 1's process not found among mpirun's children"
}
# Waits at most $2 s for the job to end; it must end with an error.
expect_end() {
  local waited=0
  while kill -0 "$job" 2>/dev/null; do
    [ "$waited" -lt "$(( $2 * 10 ))" ] || { cat "$1.log"; fail "$1: the job still runs $2 s after the fault"; }
    sleep 0.1
    waited=$((waited + 1))
  done
  if wait "$job"; then cat "$1.log"; fail "$1: the job must fail"; fi
  job=
  echo "$1: the job ended $((waited / 10)).$((waited % 10)) s after the fault"
}

start killed 600
kill -9 "$rank1"
expect_end killed 60
grep -qi "rank 1" killed.log && grep -qi "signal 9\|killed" killed.log || { cat killed.log; fail "no message naming the killed rank"; }
pgrep -f "runs/killed" >/dev/null && fail "a rank of the killed job survived"

# 20 s: long enough that rank 0's own pauses between collectives (checkpoint, report
# and heatmap writing, on a loaded 2-core CI machine) never trip it; 5 s did.
start hung 20
kill -STOP "$rank1"
expect_end hung 60
grep -q "aborting the job: MPI_.* has waited [0-9]* s for the other ranks" hung.log || { cat hung.log; fail "no watchdog message"; }
kill -9 "$rank1" 2>/dev/null || true  # Open MPI kills it; be sure
echo "ok"
