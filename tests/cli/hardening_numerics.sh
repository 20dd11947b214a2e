#!/usr/bin/env bash
# Issue 9: a run whose numbers blow up stops with an error naming the image (path
# and manifest line), the epoch and the optimizer step, and leaves no checkpoint of
# the broken state. The blow-up is real: SGD at the largest learning rate the config
# accepts, with frozen BatchNorm (nothing renormalises the activations) and pixels
# scaled up by a tiny data.std, overflows in the second optimizer step.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

demo_data --size 256 --classes 0,1 --train 8 --val 0 --test 0 --tile 128
cat > run.yaml <<'YAML'
data: {train: data/train.csv, mean: [0.05], std: [1.0e-10], val_fraction: 0}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 7, stride: 4, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 3, images_per_step: 2, tile_batch: 16, optimizer: sgd, lr: 100, seed: 0, freeze_bn: true}
device: {type: cpu, threads: 1}
YAML

if "$BIGTRAIN" run run.yaml --set output.dir=run >run.log 2>&1; then cat run.log; fail "the run did not stop"; fi
line=$(grep -m1 "\[error\]" run.log) || { cat run.log; fail "no error logged"; }
echo "$line" | grep -q "/data/train/[0-9]*\.tif (.*train\.csv:[0-9]*)" || fail "the error does not name the image and manifest line: $line"
echo "$line" | grep -qE "(loss is|gradients non-finite).*epoch 1, optimizer step 2 of the run" || fail "the error does not name epoch and step: $line"
echo "$line" | grep -qE "(-?nan|inf|NaN|Inf)" || fail "the error does not say what the number was: $line"
[ ! -e run/checkpoints/last.training.safetensors ] || fail "a checkpoint was written after the fault"
echo "ok: ${line#*\] }"
