#!/usr/bin/env bash
# Issue 20: `bigtrain run` and `bigtrain plan` ask the backend table about every op
# the configured run calls before they build anything; a combination the backend
# cannot run is a config-time error naming file, setting, op, dtype and backend, with
# a nonzero exit. Two combinations that are refused on any machine: fp16 planned for
# the CPU backend (it has no float16 convolution), and bf16 on the CPU with oneDNN
# capped at AVX512_CORE (AVX-512 without bf16; see train_cpu_bf16_refused.sh).
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

# No data: the refusal comes before the data is read.
cat > run.yaml <<'YAML'
data: {train: data/train.csv}
tiler: {tile: 128, overlap: 16}
model: {preset: resnet18, in_channels: 3, num_classes: 2}
aggregator: {kind: attention, gated: true}
train: {tile_batch: 8, optimizer: adamw, precision: fp16}
device: {type: cuda}
YAML
# expect_refusal LOG PRECISION DTYPE: the message names file, setting, op, dtype and backend.
expect_refusal() {
  grep -q "run.yaml: train.precision $2 with device: " "$1" || { cat "$1"; fail "the error must name the file and setting"; }
  grep -q "conv2d in $3 is not supported by the cpu backend" "$1" ||
    { cat "$1"; fail "the error must name the op, the dtype ($3) and the backend"; }
}

# fp16 with device: cuda is a valid config; planned for the CPU it cannot run.
status=0
"$BIGTRAIN" plan run.yaml --device cpu >plan_fp16.log 2>&1 || status=$?
[ "$status" -ne 0 ] || { cat plan_fp16.log; fail "plan --device cpu accepted fp16"; }
expect_refusal plan_fp16.log fp16 float16
grep -q "One training step" plan_fp16.log && fail "plan printed a plan before refusing"

# bf16 on a CPU without AVX512_BF16: plan and run both refuse, and the run trains
# nothing (its directory holds only log.txt, where the error is written too).
for command in plan run; do
  status=0
  ONEDNN_MAX_CPU_ISA=AVX512_CORE "$BIGTRAIN" $command run.yaml --set train.precision=bf16 --set device.type=cpu \
    --set output.dir=capped >$command.log 2>&1 || status=$?
  [ "$status" -ne 0 ] || { cat $command.log; fail "$command accepted bf16 on the CPU with oneDNN capped below AVX512_BF16"; }
  expect_refusal $command.log bf16 bfloat16
done
[ ! -e capped/metrics.csv ] && [ ! -e capped/checkpoints ] || fail "the run trained before refusing"
grep -q "conv2d in bfloat16 is not supported by the cpu backend" capped/log.txt || fail "log.txt lacks the error"

# The same config in float32 plans and is not refused.
"$BIGTRAIN" plan run.yaml --set train.precision=fp32 --device cpu >plan_fp32.log 2>&1 ||
  { cat plan_fp32.log; fail "plan refused fp32 on the CPU"; }
echo "ok"
