#!/usr/bin/env bash
# Issue 21: train.precision bf16 with device: cpu needs AVX512_BF16. On a CPU
# without it the run stops before training with an error naming the setting and the
# missing instruction set. Runs on every x86 machine: ONEDNN_MAX_CPU_ISA caps what
# oneDNN may use at AVX512_CORE (AVX-512 without bf16), which is what such a CPU
# reports (a CPU below that has even less). bf16 training where the CPU has it:
# MixedPrecisionTrainer.Bf16OnTheCpuLearns.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

demo_data --size 128 --classes 0,1 --train 2 --val 0 --test 0 --tile 64
cat > run.yaml <<'YAML'
data: {train: data/train.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 7, stride: 4, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 1, images_per_step: 2, tile_batch: 4, optimizer: sgd, lr: 0.01, seed: 0, precision: bf16}
device: {type: cpu, threads: 1}
YAML

if ONEDNN_MAX_CPU_ISA=AVX512_CORE "$BIGTRAIN" run run.yaml --set output.dir=capped >capped.log 2>&1; then
  fail "bf16 trained on the CPU with oneDNN capped below AVX512_BF16"
fi
grep -q "run.yaml: train.precision bf16" capped.log || { cat capped.log; fail "the error must name the file and setting"; }
grep -q "no AVX512_BF16 instructions" capped.log || { cat capped.log; fail "the error must name the missing instruction set"; }
grep -q "oneDNN's instruction set here: avx" capped.log ||
  { cat capped.log; fail "the error must say which instruction set oneDNN has"; }
[ ! -e capped/metrics.csv ] || fail "it trained before failing"
echo "ok"
