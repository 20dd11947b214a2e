#!/usr/bin/env bash
# BIGTRAIN_CPU_CONV_ALGOS (kernels/cpu/conv_algorithm.hpp): a value other than
# `direct` stops the run before training with an error naming the variable and what
# it accepts; `direct` trains. The network here is wide enough (32 channels, 512
# output pixels a batch) for the default to choose Winograd on AVX-512 CPUs; which
# kernels run is CpuConvAlgorithms.* in test_kernels.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

demo_data --size 128 --classes 0,1 --train 2 --val 0 --test 0 --tile 64
cat > run.yaml <<'YAML'
data: {train: data/train.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 1.0, stem: {kernel: 3, stride: 1, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 1, images_per_step: 2, tile_batch: 4, optimizer: sgd, lr: 0.01, seed: 0}
device: {type: cpu, threads: 1}
YAML

if BIGTRAIN_CPU_CONV_ALGOS=winograd "$BIGTRAIN" run run.yaml --set output.dir=bad >bad.log 2>&1; then
  fail "an unknown BIGTRAIN_CPU_CONV_ALGOS value was accepted"
fi
grep -q "BIGTRAIN_CPU_CONV_ALGOS=winograd: expected \`direct\`" bad.log || { cat bad.log; fail "the error must name the variable and the accepted value"; }
[ ! -e bad/metrics.csv ] || fail "it trained before failing"

BIGTRAIN_CPU_CONV_ALGOS=direct "$BIGTRAIN" run run.yaml --set output.dir=direct >direct.log 2>&1 ||
  { cat direct.log; fail "BIGTRAIN_CPU_CONV_ALGOS=direct did not train"; }
[ -s direct/metrics.csv ] || fail "no metrics.csv after training with direct convolutions"
echo "ok"
