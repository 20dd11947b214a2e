#!/usr/bin/env bash
# Issue 9: a `kill -9` while a checkpoint is being written leaves the previous
# checkpoint intact and loadable; the run resumes from it and ends exactly where
# the uninterrupted run ends. The kill is placed deterministically with strace's
# fault injection: SIGKILL on entry to the rename() that would publish epoch 2's
# weights, i.e. after the temporary file was written in full and just before it
# would replace checkpoints/last.safetensors.
set -euo pipefail
BIGTRAIN=$1
SOURCE=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! command -v strace >/dev/null; then echo "strace is not installed, so the kill cannot be placed inside a checkpoint write; skipping"; exit 77; fi
if ! strace -qq -o /dev/null true 2>/dev/null; then echo "strace cannot trace here (ptrace not permitted); skipping"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

"$BIGTRAIN" make-demo-data --out data --mnist "$SOURCE/tests/data/mnist" --size 256 --classes 0,1 --train 8 --val 4 \
  --test 2 --tile 128 >/dev/null 2>&1
cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 7, stride: 4, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 30, images_per_step: 2, tile_batch: 16, optimizer: adamw, lr: 0.001, seed: 0}
device: {type: cpu, threads: 1}
YAML

# LeakSanitizer cannot run under ptrace: in a sanitizer build, the traced runs skip
# only the leak check (the resumed run below keeps it).
traced_asan_options="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

# The uninterrupted run, with every rename() it makes listed in order.
ASAN_OPTIONS=$traced_asan_options strace -f -qq -o renames.txt -e trace=rename "$BIGTRAIN" run run.yaml --set output.dir=reference --stop-after 3 >/dev/null 2>&1 \
  || fail "the uninterrupted run failed"
kill_at=$(awk '/rename\(/ { n++; if ($0 ~ /checkpoints\/last\.safetensors"\)/ && ++seen == 2) { print n; exit } }' renames.txt)
[ -n "$kill_at" ] || fail "found no second rename() onto checkpoints/last.safetensors; renames seen:$(printf '\n%s' "$(cat renames.txt)")"

# The same run, killed on entry to that rename().
set +e
ASAN_OPTIONS=$traced_asan_options strace -f -qq -o /dev/null -e trace=rename -e "inject=rename:signal=KILL:when=$kill_at" \
  "$BIGTRAIN" run run.yaml --set output.dir=killed --stop-after 3 >killed.log 2>&1
status=$?
set -e
[ "$status" -ne 0 ] || fail "the run was not killed (exit 0)"
[ -f killed/checkpoints/last.safetensors.tmp ] || fail "no temporary checkpoint: the kill did not land inside a checkpoint write"
grep -q '^2,train' killed/metrics.csv || fail "epoch 2 had not finished when the kill landed"

# The previous checkpoint loads: the run resumes after epoch 1 and finishes epochs 2 and 3.
"$BIGTRAIN" run run.yaml --resume killed --stop-after 2 >resumed.log 2>&1 || { cat resumed.log; fail "resume after kill -9 failed"; }
grep -q "resuming killed after epoch 1" resumed.log || { cat resumed.log; fail "did not resume from epoch 1's checkpoint"; }

# Same losses, accuracies, AUCs, counts and learning rates as the uninterrupted run
# (timings, throughput and memory columns differ run to run and are dropped).
same_columns() { cut -d, -f1-8,15- "$1"; }
diff <(same_columns reference/metrics.csv) <(same_columns killed/metrics.csv) \
  || fail "the resumed run's metrics differ from the uninterrupted run's"
echo "ok: killed at rename #$kill_at (epoch 2's checkpoint), resumed from epoch 1, metrics equal the uninterrupted run"
