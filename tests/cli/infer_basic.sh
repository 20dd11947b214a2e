#!/usr/bin/env bash
# `bigtrain infer` and `bigtrain eval` end to end: a tiny run trains one epoch, then
# infer prints one result per image (text and --json), writes heatmaps (PNG, BigTIFF)
# and tile CSVs; bad images fail one by one with a nonzero exit; eval writes its
# summary, confusion CSV/PNG and predictions.
set -euo pipefail
BIGTRAIN=$1
SOURCE=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! command -v python3 >/dev/null; then echo "python3 is needed to read the JSON; skipping"; exit 77; fi

"$BIGTRAIN" make-demo-data --out "$tmp/data" --mnist "$SOURCE/tests/data/mnist" --size 128 --classes 3,5 \
  --train 6 --val 4 --test 4 --clutter 2 --tile 64 --seed 2 > /dev/null
cat > "$tmp/run.yaml" <<YAML
data: {train: $tmp/data/train.csv, val: $tmp/data/val.csv, test: $tmp/data/test.csv, mean: [0.1], std: [0.3]}
tiler: {tile: 64, overlap: 32, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 1, tile_batch: 4, images_per_step: 2, seed: 1}
device: {type: cpu, threads: 2}
output: {dir: $tmp/run}
YAML
"$BIGTRAIN" run "$tmp/run.yaml" > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "training failed"; }
ckpt="$tmp/run/checkpoints/last.safetensors"
[ -f "$ckpt" ] || fail "no checkpoint"

# Text: one line per image, the top class and both probabilities.
"$BIGTRAIN" infer "$tmp/data/test" --checkpoint "$ckpt" > "$tmp/infer.txt"
[ "$(grep -c 'tiles' "$tmp/infer.txt")" = 4 ] || fail "expected 4 result lines: $(cat "$tmp/infer.txt")"
grep -qE ': (3|5) \(0\.[0-9]+\)  3 0\.[0-9]+  5 0\.[0-9]+  \[9 tiles' "$tmp/infer.txt" || fail "text format: $(cat "$tmp/infer.txt")"

# JSON, heatmaps and tile CSVs.
"$BIGTRAIN" infer "$tmp/data/test" --checkpoint "$ckpt" --json --heatmap "$tmp/heat/h.png" --tiles-csv "$tmp/heat/t.csv" > "$tmp/infer.jsonl"
"$BIGTRAIN" infer "$(ls "$tmp"/data/test/*.tif | head -1)" --checkpoint "$ckpt" --heatmap "$tmp/heat.tif" > /dev/null
python3 - "$tmp" <<'PY'
import glob, json, os, struct, sys
tmp = sys.argv[1]
rows = [json.loads(line) for line in open(os.path.join(tmp, "infer.jsonl"))]
assert len(rows) == 4, rows
for r in rows:
    p = r["probabilities"]
    assert set(p) == {"3", "5"}, p
    assert abs(sum(p.values()) - 1) < 1e-5, p
    assert r["top_class"] == max(p, key=p.get), r
    assert r["tiles"] == 9 and r["seconds"] > 0, r
    stem = os.path.splitext(os.path.basename(r["path"]))[0]
    png = os.path.join(tmp, "heat", "h_%s.png" % stem)
    with open(png, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", png
    width, height = struct.unpack(">II", head[16:24])
    assert height >= 128 and width > 128, (width, height)  # thumbnail (128 px) + legend
    lines = open(os.path.join(tmp, "heat", "t_%s.csv" % stem)).read().splitlines()
    assert lines[0] == "tile,x,y,width,height,level,downsample,attention,p_3,p_5", lines[0]
    assert len(lines) == 10, len(lines)
    attention = [float(l.split(",")[7]) for l in lines[1:]]
    assert abs(sum(attention) - 1) < 1e-4, attention
with open(os.path.join(tmp, "heat.tif"), "rb") as f:
    head = f.read(4)
assert head in (b"II+\x00", b"MM\x00+"), head  # BigTIFF
print("infer json, heatmaps and tile CSVs ok")
PY
"$BIGTRAIN" info "$tmp/heat.tif" | grep -q "4 x 4\|4x4" || fail "heatmap TIFF size: $("$BIGTRAIN" info "$tmp/heat.tif")"

# Bad items: each its own error, the rest still classified, exit code 1.
mkdir -p "$tmp/mixed"
cp "$tmp"/data/test/*.tif "$tmp/mixed/"
echo "not an image" > "$tmp/mixed/0_garbage.tif"
if "$BIGTRAIN" infer "$tmp/mixed" "$tmp/missing.png" --checkpoint "$ckpt" --json > "$tmp/mixed.jsonl" 2> "$tmp/mixed.err"; then
  fail "bad images gave exit code 0"
fi
python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
rows = [json.loads(line) for line in open(os.path.join(tmp, "mixed.jsonl"))]
assert len(rows) == 6, rows
errors = [r for r in rows if "error" in r]
assert [os.path.basename(r["path"]) for r in errors] == ["0_garbage.tif", "missing.png"], errors
for r in errors:
    assert r["path"] in r["error"], r
assert sum("probabilities" in r for r in rows) == 4
PY
grep -q "0_garbage.tif" "$tmp/mixed.err" || fail "no error line for the garbage image"

# A bad checkpoint: a clear error naming it.
echo "junk" > "$tmp/bad.safetensors"
if "$BIGTRAIN" infer "$tmp/data/test" --checkpoint "$tmp/bad.safetensors" 2> "$tmp/ckpt.err"; then fail "bad checkpoint accepted"; fi
grep -q "bad.safetensors" "$tmp/ckpt.err" || fail "bad checkpoint message: $(cat "$tmp/ckpt.err")"

# eval: summary, confusion CSV and PNG, predictions; the same numbers as the run's test row.
"$BIGTRAIN" eval "$tmp/run.yaml" --checkpoint "$tmp/run/checkpoints/best.safetensors" --split test --out "$tmp/eval" --json > "$tmp/eval.json"
for f in summary.json confusion.csv confusion.png predictions.csv; do [ -s "$tmp/eval/$f" ] || fail "eval wrote no $f"; done
python3 - "$tmp" <<'PY'
import csv, json, os, sys
tmp = sys.argv[1]
s = json.load(open(os.path.join(tmp, "eval", "summary.json")))
assert s["images"] == 4 and s["failed"] == 0, s
assert set(s["per_class"]) == {"3", "5"} and "precision" in s["per_class"]["3"], s["per_class"]
assert sum(map(sum, s["confusion"])) == 4, s["confusion"]
rows = list(csv.DictReader(open(os.path.join(tmp, "run", "metrics.csv"))))
test = [r for r in rows if r["split"] == "test"][-1]
assert abs(float(test["loss"]) - s["loss"]) < 1e-6, (test["loss"], s["loss"])
assert abs(float(test["accuracy"]) - s["accuracy"]) < 1e-9, (test["accuracy"], s["accuracy"])
if test["auc"]:
    assert abs(float(test["auc"]) - s["roc_auc"]) < 1e-9, (test["auc"], s["roc_auc"])
print("eval ok: loss %.6f accuracy %.3f (run's test row: %s, %s)" % (s["loss"], s["accuracy"], test["loss"], test["accuracy"]))
PY
echo "infer_basic ok"
