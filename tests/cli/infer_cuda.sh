#!/usr/bin/env bash
# `bigtrain infer --device cuda` and `bigtrain eval` with device.type cuda against the
# CPU on one checkpoint: the checkpoint's model on the GPU, tile batches uploaded
# through the training path (kernels::upload_async), probabilities and tile
# attention equal to the CPU's within the float32 tolerance of the op tests (1e-4 on
# a probability here: one image's tiles pass through every layer, so the op tests'
# RMS-scaled 1e-5..1e-4 per op add up to about that). Needs a usable CUDA device:
# skips (77) with a reason starting "hardware: " without one. scripts/gpu_check runs it.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
devices=$("$BIGTRAIN" devices --json) || fail "bigtrain devices failed"
field() { python3 -c "import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ''))" "$devices" "$1"; }
[ "$(field cuda_compiled)" = True ] || { echo "SKIP: hardware: this build has no CUDA backend (no toolkit where it was built)"; exit 77; }
[ "$(field cuda_devices)" -ge 1 ] 2>/dev/null ||
  { echo "SKIP: hardware: no CUDA device ($(field cuda_unavailable_reason))"; exit 77; }
usable=$(python3 -c "import json, sys; g = json.loads(sys.argv[1])['gpus'][0]; print('yes' if g['usable'] else g['reason'])" "$devices")
[ "$usable" = yes ] || { echo "SKIP: hardware: GPU 0 cannot run this build: $usable"; exit 77; }

"$BIGTRAIN" make-demo-data --out data --mnist "$SOURCE/tests/data/mnist" --size 128 --classes 3,5 \
  --train 6 --val 4 --test 4 --clutter 2 --tile 64 --seed 2 > /dev/null
cat > run.yaml <<YAML
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.1], std: [0.3]}
tiler: {tile: 64, overlap: 32, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 1, tile_batch: 4, images_per_step: 2, seed: 1}
device: {type: cpu, threads: 2}
output: {dir: run}
YAML
"$BIGTRAIN" run run.yaml > run.log 2>&1 || { cat run.log; fail "training failed"; }
ckpt=run/checkpoints/last.safetensors

for device in cpu cuda; do
  "$BIGTRAIN" infer data/test --checkpoint "$ckpt" --device "$device" --json --tiles-csv "tiles_$device/t.csv" \
    > "infer_$device.jsonl" 2> "infer_$device.err" || { cat "infer_$device.err"; fail "infer --device $device failed"; }
  # On the GPU under a cap, as a user's small card would run it.
  cap=(); [ "$device" = cuda ] && cap=(--set device.memory_limit=1GiB)
  "$BIGTRAIN" eval run.yaml --checkpoint "$ckpt" --set device.type="$device" "${cap[@]}" --json --out "eval_$device" \
    > "eval_$device.json" 2> "eval_$device.err" || { cat "eval_$device.err"; fail "eval on $device failed"; }
done
python3 - <<'PY'
import csv, glob, json, os
tolerance = 1e-4
cpu = [json.loads(l) for l in open("infer_cpu.jsonl")]
gpu = [json.loads(l) for l in open("infer_cuda.jsonl")]
assert len(cpu) == len(gpu) == 4, (len(cpu), len(gpu))
worst = 0.0
for a, b in zip(cpu, gpu):
    assert a["path"] == b["path"] and a["tiles"] == b["tiles"], (a, b)
    for name, p in a["probabilities"].items():
        worst = max(worst, abs(p - b["probabilities"][name]))
for path in glob.glob("tiles_cpu/*.csv"):
    rows_cpu = list(csv.DictReader(open(path)))
    rows_gpu = list(csv.DictReader(open(path.replace("tiles_cpu", "tiles_cuda"))))
    assert len(rows_cpu) == len(rows_gpu) > 0
    for a, b in zip(rows_cpu, rows_gpu):
        worst = max(worst, abs(float(a["attention"]) - float(b["attention"])))
assert worst <= tolerance, f"cuda differs from cpu by {worst:.3g} (> {tolerance})"
e_cpu, e_gpu = json.load(open("eval_cpu.json")), json.load(open("eval_cuda.json"))
assert abs(e_cpu["loss"] - e_gpu["loss"]) <= 1e-4 * max(1.0, abs(e_cpu["loss"])), (e_cpu["loss"], e_gpu["loss"])
print(f"infer/eval on cuda equal the cpu's: largest difference {worst:.2g} (tolerance {tolerance})")
PY
