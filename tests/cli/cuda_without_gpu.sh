#!/usr/bin/env bash
# The CUDA path as a user without a usable GPU meets it (issue 18): `bigtrain devices`
# says there is none and exits 0; `infer --device cuda` and `eval` with device.type
# cuda are a clear error with a nonzero exit and write nothing; `--device auto` runs on
# the CPU; device.memory_limit on a CPU run is a warning, and metrics.csv has the
# device columns, empty; `bigtrain plan --device cuda` adds the CUDA context and
# handles as the documented constant. On a machine with a usable GPU it skips
# (tests/cli/infer_cuda.sh is the GPU side).
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

"$BIGTRAIN" devices > devices.txt || fail "bigtrain devices exited nonzero without a GPU"
devices=$("$BIGTRAIN" devices --json) || fail "bigtrain devices --json failed"
count=$(python3 -c "import json, sys; d = json.loads(sys.argv[1]); print(sum(g['usable'] for g in d['gpus']))" "$devices")
[ "$count" -eq 0 ] || { echo "SKIP: hardware: a usable GPU is present; this test is of a machine without one"; exit 77; }
if [ "$(python3 -c "import json, sys; print(json.loads(sys.argv[1])['cuda_devices'])" "$devices")" -eq 0 ]; then
  grep -qx "gpus: none" devices.txt || { cat devices.txt; fail "devices should say 'gpus: none'"; }
fi

demo_data --size 128 --classes 3,5 --train 6 --val 2 --test 2 --clutter 2 --tile 64 --seed 2
cat > run.yaml <<YAML
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.1], std: [0.3]}
tiler: {tile: 64, overlap: 32, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 1, tile_batch: 4, images_per_step: 2, seed: 1}
device: {type: cpu, threads: 2, memory_limit: 2GiB}
output: {dir: run}
YAML
BIGTRAIN_REPORT_HEATMAPS=0 "$BIGTRAIN" run run.yaml > run.log 2>&1 || { cat run.log; fail "training failed"; }
grep -q "device.memory_limit 2GiB caps GPU memory; this run is on the cpu, where it has no effect" run.log ||
  { cat run.log; fail "no warning that device.memory_limit does nothing on the CPU"; }
python3 - <<'PY' || fail "metrics.csv's device columns"
import csv
rows = list(csv.reader(open("run/metrics.csv")))
header = rows[0]
assert header[-2:] == ["device_peak_bytes", "device_peak_reserved_bytes"], header
assert header[:15][-1] == "lr", header  # the columns before them stay where they were
assert len(rows) == 4, rows  # epoch 1: train, val, then test at the end
for row in rows[1:]:
    assert len(row) == len(header), (row, header)
    assert row[-2:] == ["", ""], row  # a CPU run: no device allocator
    assert int(row[header.index("peak_allocated_bytes")]) > 0, row
PY
ckpt=run/checkpoints/last.safetensors

expect_no_gpu_error() {  # LOG WHAT
  grep -q "device: cuda was requested, but no GPU can be used: " "$1" || { cat "$1"; fail "$2: unclear error"; }
}
status=0
"$BIGTRAIN" infer data/test --checkpoint "$ckpt" --device cuda --json --tiles-csv tiles/t.csv > infer_cuda.jsonl \
  2> infer_cuda.err || status=$?
[ "$status" -ne 0 ] || fail "infer --device cuda succeeded without a GPU"
expect_no_gpu_error infer_cuda.err "infer --device cuda"
[ ! -s infer_cuda.jsonl ] && [ ! -e tiles ] || fail "infer --device cuda wrote results without a GPU"
status=0
"$BIGTRAIN" eval run.yaml --checkpoint "$ckpt" --set device.type=cuda --out eval_cuda > eval_cuda.txt 2> eval_cuda.err ||
  status=$?
[ "$status" -ne 0 ] || fail "eval with device.type cuda succeeded without a GPU"
expect_no_gpu_error eval_cuda.err "eval with device.type cuda"
[ ! -e eval_cuda ] || fail "eval with device.type cuda wrote eval_cuda/ without a GPU"
status=0
"$BIGTRAIN" run run.yaml --set device.type=cuda --set output.dir=run_cuda > run_cuda.log 2>&1 || status=$?
[ "$status" -ne 0 ] || fail "run with device.type cuda succeeded without a GPU"
expect_no_gpu_error run_cuda.log "run with device.type cuda"

# auto: the CPU, and the same probabilities as --device cpu.
"$BIGTRAIN" infer data/test --checkpoint "$ckpt" --device auto --json > auto.jsonl 2> auto.err ||
  { cat auto.err; fail "infer --device auto failed without a GPU"; }
"$BIGTRAIN" infer data/test --checkpoint "$ckpt" --device cpu --json > cpu.jsonl 2> cpu.err ||
  { cat cpu.err; fail "infer --device cpu failed"; }
grep -q "device: cpu" auto.err || { cat auto.err; fail "infer --device auto does not say it runs on the CPU"; }
python3 - <<'PY' || fail "infer --device auto differs from --device cpu without a GPU"
import json
strip = lambda line: {k: v for k, v in json.loads(line).items() if k != "seconds"}  # timing aside
auto, cpu = [list(map(strip, open(f))) for f in ("auto.jsonl", "cpu.jsonl")]
assert len(auto) == 2 and auto == cpu, (auto, cpu)
PY
status=0
"$BIGTRAIN" infer data/test --checkpoint "$ckpt" --device gpu > /dev/null 2> bad_device.err || status=$?
[ "$status" -ne 0 ] && grep -q "gpu" bad_device.err || { cat bad_device.err; fail "--device gpu not refused clearly"; }

# The plan of a GPU run: the allocator's peak plus the CUDA context and handles.
"$BIGTRAIN" plan run.yaml --device cuda > plan.txt 2> plan.err || { cat plan.err; fail "plan --device cuda failed"; }
grep -q "plus the CUDA context and cuDNN/cuBLAS handles, outside the allocator and device.memory_limit: 600.0 MiB" \
  plan.txt || { cat plan.txt; fail "plan --device cuda leaves out the CUDA context"; }
"$BIGTRAIN" plan run.yaml --device cuda --set train.cudnn_workspace=32MiB --json > plan32.json
"$BIGTRAIN" plan run.yaml --device cuda --json > plan256.json
python3 - <<'PY' || fail "plan's workspace and CUDA runtime figures"
import json
a, b = json.load(open("plan256.json")), json.load(open("plan32.json"))
assert a["step_memory"]["workspace_bytes"] == 256 << 20, a["step_memory"]
assert b["step_memory"]["workspace_bytes"] == 32 << 20, b["step_memory"]
assert a["cuda_runtime"]["bytes"] == 600 << 20 and a["cuda_runtime"]["source"] == "constant", a["cuda_runtime"]
assert a["cuda_runtime"]["device_total_bytes"] == a["step_memory"]["peak_bytes"] + (600 << 20)
PY
echo "no GPU: devices exit 0, cuda refused clearly (infer, eval, run), auto on the CPU, device columns empty, plan adds 600 MiB"
