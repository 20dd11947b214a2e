#!/usr/bin/env bash
# `bigtrain plan` end to end: the human report, the JSON fields a script reads, the
# budget figures, a plan from an image file's header, and clear errors.
set -euo pipefail
BIGTRAIN=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! command -v python3 >/dev/null; then echo "python3 is needed to read the JSON; skipping"; exit 77; fi

cat > "$tmp/run.yaml" <<'YAML'
data: {train: train.csv}
tiler: {tile: 256, overlap: 32}
model: {preset: resnet50, in_channels: 1, num_classes: 2, stem: {kernel: 11, stride: 4}}
train: {tile_batch: 8, optimizer: adamw}
device: {type: cpu}
YAML

"$BIGTRAIN" plan "$tmp/run.yaml" --image 2435x2435 --memory 2GiB > "$tmp/plan.txt"
for expected in "layer4.2.conv3" "One training step" "Whole image at batch 1" "largest tile batch" "121 tiles"; do
  grep -q "$expected" "$tmp/plan.txt" || fail "human report lacks '$expected'"
done

"$BIGTRAIN" plan "$tmp/run.yaml" --image 2435x2435 --memory 2GiB --json > "$tmp/plan.json"
python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
step, image, budget = p["step_memory"], p["image"], p["budget"]
assert p["model"]["preset"] == "resnet50" and p["backend"] == "cpu", p["model"]
assert p["tiles"] == 121 and image["grid"] == {"cols": 11, "rows": 11}, image["grid"]
parts = sum(step[k] for k in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "workspace_bytes", "activations_bytes"))
assert parts == step["peak_bytes"], (parts, step["peak_bytes"])
whole = image["whole_image_memory"]["peak_bytes"]
assert whole > 4 * step["peak_bytes"], (whole, step["peak_bytes"])
assert image["flops"]["tiled_total"] > image["flops"]["whole_image"]
assert budget["bytes"] == 2 << 30 and budget["max_tile_batch"] >= 1
assert budget["fits"] == (step["peak_bytes"] <= budget["bytes"])
assert p["layers"][0]["name"] == "conv1" and p["layers"][0]["output"] == [8, 64, 64, 64], p["layers"][0]
print("json ok: step peak %.3f GiB, whole image %.2f GiB" % (step["peak_bytes"] / 2**30, whole / 2**30))
PY

# train.memory_budget's split: the kept tile batches and the FLOPs without their recompute.
"$BIGTRAIN" plan "$tmp/run.yaml" --image 2435x2435 --set train.memory_budget=16GiB --json > "$tmp/kept.json"
python3 - "$tmp/kept.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
r = p["recompute"]
assert r["budget_bytes"] == 16 << 30 and "train.memory_budget 16GiB" in r["budget_source"], r
kept = (r["budget_bytes"] - r["recompute_peak_bytes"]) // r["kept_bytes_per_batch"]
assert r["kept_batches_per_image"] == kept and kept >= 1, r
assert r["image"]["batches"] == 16 and r["image"]["kept_batches"] == min(kept, 16), r["image"]
assert r["image"]["flops"] < p["image"]["flops"]["tiled_total"], (r["image"], p["image"]["flops"])
print("recompute ok: %d of 16 batches kept" % r["image"]["kept_batches"])
PY
"$BIGTRAIN" plan "$tmp/run.yaml" --image 2435x2435 --set train.memory_budget=0 > "$tmp/none.txt"
grep -q "0 of 16 batches kept whole (0 B); pass 2 runs 121 of 121 tiles" "$tmp/none.txt" || fail "budget 0 report: $(tail -4 "$tmp/none.txt")"

# --device cuda plans the GPU (no GPU needed) and counts the cuDNN workspace.
"$BIGTRAIN" plan "$tmp/run.yaml" --device cuda --json > "$tmp/cuda.json"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["backend"]=="cuda" and p["step_memory"]["workspace_bytes"]>0, p["step_memory"]' "$tmp/cuda.json"

# The image size from a file's header.
"$BIGTRAIN" make-image "$tmp/img.tif" --size 700x500 >/dev/null
"$BIGTRAIN" plan "$tmp/run.yaml" --image "$tmp/img.tif" --json > "$tmp/file.json"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert (p["image"]["width"], p["image"]["height"]) == (700, 500), p["image"]' "$tmp/file.json"

# Overrides apply as in a run.
"$BIGTRAIN" plan "$tmp/run.yaml" --set train.tile_batch=2 --json > "$tmp/b2.json"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["tile_batch"]==2, p["tile_batch"]' "$tmp/b2.json"

# Clear errors.
if "$BIGTRAIN" plan "$tmp/run.yaml" --memory 2GiBs 2> "$tmp/err.txt"; then fail "bad --memory accepted"; fi
grep -q "memory size '2GiBs'" "$tmp/err.txt" || fail "bad --memory message: $(cat "$tmp/err.txt")"
if "$BIGTRAIN" plan "$tmp/run.yaml" --image "$tmp/missing.tif" 2> "$tmp/err.txt"; then fail "missing image accepted"; fi
grep -q "missing.tif" "$tmp/err.txt" || fail "missing image message: $(cat "$tmp/err.txt")"
if "$BIGTRAIN" plan "$tmp/run.yaml" --set tiler.tile=8 --set tiler.overlap=0 --set model.stem.padding=0 2> "$tmp/err.txt"; then fail "8-pixel tile accepted"; fi
grep -q "smaller than" "$tmp/err.txt" || fail "tiny tile message: $(cat "$tmp/err.txt")"
echo "plan cli ok"
