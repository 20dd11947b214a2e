#!/usr/bin/env bash
# Issue 9: a `kill -9` while a checkpoint is being written leaves a checkpoint that
# resumes, and the resumed run ends exactly (bit for bit) where the uninterrupted
# run ends. The kills are placed deterministically with strace's fault injection:
# SIGKILL on entry to each rename() that publishes epoch 2's checkpoint, i.e. after
# the temporary file was written in full and just before it replaces the old one.
# A checkpoint is two files renamed one after the other (pipeline/engine/checkpoint.hpp):
#   last.training.safetensors  the commit point: weights + optimizer state, all resume reads
#   last.safetensors           the weights alone, for people and `bigtrain infer`
# Killed before the first rename, the run resumes from epoch 1; killed between the
# two, it resumes from epoch 2 and rewrites the stale last.safetensors.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

if ! command -v strace >/dev/null; then echo "strace is not installed, so the kill cannot be placed inside a checkpoint write; skipping"; exit 77; fi
if ! strace -qq -o /dev/null true 2>/dev/null; then echo "strace cannot trace here (ptrace not permitted); skipping"; exit 77; fi

demo_data --size 256 --classes 0,1 --train 8 --val 4 --test 2 --tile 128
cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 7, stride: 4, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 3, images_per_step: 2, tile_batch: 16, optimizer: adamw, lr: 0.001, seed: 0}
device: {type: cpu, threads: 1}
YAML

# LeakSanitizer cannot run under ptrace: in a sanitizer build, the traced runs skip
# only the leak check (the resumed run below keeps it).
traced_asan_options="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

# The uninterrupted run, with every rename() it makes listed in order.
ASAN_OPTIONS=$traced_asan_options strace -f -qq -o renames.txt -e trace=rename "$BIGTRAIN" run run.yaml --set output.dir=reference >/dev/null 2>&1 \
  || fail "the uninterrupted run failed"
# The number of the rename() that publishes the second write of checkpoints/$1.
second_rename_onto() {
  awk -v target="checkpoints/$1\"\\)" '/rename\(/ { n++; if ($0 ~ target && ++seen == 2) { print n; exit } }' renames.txt
}

source "$SOURCE/tests/cli/lib/same_run.sh"

# kill_and_resume FILE EXPECTED_RESUME_LINE: kills the run on entry to the rename()
# of epoch 2's FILE, resumes it, and compares with the reference.
kill_and_resume() {
  local file=$1 expected=$2 dir kill_at status
  dir=killed_${file%%.*}_${file#*.}
  dir=${dir//./_}
  kill_at=$(second_rename_onto "$file")
  [ -n "$kill_at" ] || fail "found no second rename() onto checkpoints/$file; renames seen:$(printf '\n%s' "$(cat renames.txt)")"
  set +e
  ASAN_OPTIONS=$traced_asan_options strace -f -qq -o /dev/null -e trace=rename -e "inject=rename:signal=KILL:when=$kill_at" \
    "$BIGTRAIN" run run.yaml --set output.dir="$dir" >"$dir.log" 2>&1
  status=$?
  set -e
  [ "$status" -ne 0 ] || fail "the run was not killed (exit 0)"
  [ -f "$dir/checkpoints/$file.tmp" ] || fail "no temporary $file: the kill did not land inside its write"
  grep -q '^2,train' "$dir/metrics.csv" || fail "epoch 2 had not finished when the kill landed"
  "$BIGTRAIN" run run.yaml --resume "$dir" >"$dir.resumed.log" 2>&1 \
    || { cat "$dir.resumed.log"; fail "resume after kill -9 in the rename of $file failed"; }
  grep -q "$expected" "$dir.resumed.log" || { cat "$dir.resumed.log"; fail "expected '$expected' after a kill in $file"; }
  same_run reference "$dir" last.training.safetensors last.safetensors
  echo "killed at rename #$kill_at ($file of epoch 2): $expected, then equal to the uninterrupted run"
}

kill_and_resume last.training.safetensors "resuming killed_last_training_safetensors after epoch 1"
kill_and_resume last.safetensors "rewriting it from the training state"
grep -q "resuming killed_last_safetensors after epoch 2" killed_last_safetensors.resumed.log \
  || fail "a kill after the training state's rename must resume from epoch 2"
echo "ok"
