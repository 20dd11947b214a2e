#!/usr/bin/env bash
# `bigtrain run` end to end on tiny generated demo data: the run directory has what
# docs/design.md (section 7) describes, metrics.csv has one row per epoch and split,
# a stopped run resumes, and config mistakes are errors naming the file, line and
# valid keys.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

demo_data --size 192 --classes 2,7 --train 8 --val 4 --test 4 --tile 64
[ -f data/train.csv ] && [ -f data/val.csv ] && [ -f data/test.csv ] || fail "manifests missing"
[ "$(wc -l < data/train.csv)" -eq 9 ] || fail "train.csv should list 8 images plus a header"

cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 2, images_per_step: 2, tile_batch: 5, optimizer: sgd, lr: 0.01, seed: 1, freeze_bn: true}
device: {type: cpu, threads: 2}
output: {dir: runs/a}
YAML

"$BIGTRAIN" run run.yaml --stop-after 1 2> stop.log || { cat stop.log; fail "first epoch failed"; }
grep -q -- "--resume runs/a" stop.log || { cat stop.log; fail "a stopped run must say how to resume"; }
"$BIGTRAIN" run run.yaml --resume runs/a 2> resume.log || { cat resume.log; fail "resume failed"; }
for f in config.yaml classes.json metrics.csv log.txt confusion_val.csv confusion_test.csv \
         checkpoints/last.safetensors checkpoints/last.training.safetensors checkpoints/best.safetensors; do
  [ -s "runs/a/$f" ] || fail "runs/a/$f missing"
done
# header + (train, val) x 2 epochs + test
[ "$(wc -l < runs/a/metrics.csv)" -eq 6 ] || { cat runs/a/metrics.csv; fail "metrics.csv should have 5 rows"; }
cut -d, -f1,2 runs/a/metrics.csv | tr '\n' ' ' | grep -q "1,train 1,val 2,train 2,val 2,test" \
  || { cat runs/a/metrics.csv; fail "rows out of order"; }
grep -q '"2","7"' runs/a/classes.json || fail "classes.json: $(cat runs/a/classes.json)"
ls runs/a/checkpoints | grep -q tmp && fail "a temporary file was left behind"

# Starting over an existing run is refused; so are unknown keys and bad values.
if "$BIGTRAIN" run run.yaml 2> again.log; then fail "a second run into runs/a must be refused"; fi
grep -q -- "--resume" again.log || { cat again.log; fail "the refusal should point to --resume"; }
if "$BIGTRAIN" run run.yaml --set train.epoch=3 2> unknown.log; then fail "an unknown key must fail"; fi
grep -q "epochs" unknown.log && grep -q -- "--set train.epoch=3" unknown.log || { cat unknown.log; fail "unknown key message"; }
printf 'data: {train: data/train.csv}\naggregator:\n  kind: median\n' > bad.yaml
if "$BIGTRAIN" run bad.yaml 2> bad.log; then fail "a bad choice must fail"; fi
grep -q "bad.yaml:3:3" bad.log && grep -q "mean | max | attention" bad.log || { cat bad.log; fail "bad choice message"; }
echo "ok"
