#!/usr/bin/env bash
# README "Train on your own images", command for command: class folders of 12-bit
# grey TIFFs (generated; no header tag says they are 12-bit) -> bigtrain init ->
# bigtrain plan -> bigtrain run on the written config unchanged -> accuracy above
# chance -> bigtrain infer on one image -> the resize baseline. Then bad data:
# init reports every bad file and writes nothing.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
PYTHON=/usr/bin/python3
"$PYTHON" -c 'import numpy, tifffile' 2>/dev/null ||
  fail "$PYTHON cannot import numpy and tifffile (python3-numpy, python3-tifffile: scripts/packages/test.txt)"

"$PYTHON" "$SOURCE/scripts/make_grey12_classes.py" my_images --per-class 16 --size 256
start=$SECONDS

# --- the README's commands ---
"$BIGTRAIN" init my_images --out my_images.yaml --memory 2GiB > init.log || { cat init.log; fail "init failed"; }
cat init.log
grep -q "max_value: 4095" my_images.yaml || { cat my_images.yaml; fail "12-bit data in 16-bit samples: init must write data.max_value 4095"; }
grep -q "in_channels: 1" my_images.yaml || fail "grey data: in_channels 1"
grep -q "freeze_bn: true" my_images.yaml || fail "one image's tiles per batch: freeze_bn"
"$BIGTRAIN" plan my_images.yaml --image my_images/disks/000.tif --memory 2GiB > plan.log || { cat plan.log; fail "plan failed"; }
grep -i "peak" plan.log | head -3
"$BIGTRAIN" run my_images.yaml > run.log 2>&1 || { tail -30 run.log; fail "run on the written config failed"; }
"$BIGTRAIN" infer my_images/bars/003.tif --checkpoint runs/my_images/checkpoints/best.safetensors > infer.log ||
  { cat infer.log; fail "infer failed"; }
cat infer.log
"$BIGTRAIN" run my_images.yaml --set tiler.mode=resize --set tiler.resize_size=256 \
  --set output.dir=runs/my_images_resize > baseline.log 2>&1 || { tail -30 baseline.log; fail "baseline run failed"; }

# --- checks ---
"$PYTHON" - <<'PY'
import csv
rows = list(csv.DictReader(open("runs/my_images/metrics.csv")))
val = [r for r in rows if r["split"] == "val"]
best = max(float(r["accuracy"]) for r in val)
print(f"tiled: best val accuracy {best:.3f} over {len(val)} epochs (chance 0.5)")
assert best >= 0.75, f"the written config should learn: best val accuracy {best}"
base = [r for r in csv.DictReader(open("runs/my_images_resize/metrics.csv")) if r["split"] == "val"]
print(f"resize baseline: best val accuracy {max(float(r['accuracy']) for r in base):.3f}")
PY
grep -Eq "disks|bars" infer.log || fail "infer should name a class"
echo "README commands: $((SECONDS - start)) s"

# --- bad data: every bad file named, nothing written ---
mkdir -p bad/a bad/b bad/c bad/d
cp my_images/disks/000.tif my_images/disks/001.tif bad/a/
cp my_images/bars/000.tif bad/b/
printf 'not a tiff' > bad/b/broken.tif
cp my_images/bars/001.tif bad/c/
cp my_images/bars/002.tif bad/d/
"$BIGTRAIN" make-image bad/c/rgb.tif --size 256x256 --channels 3 >/dev/null
if "$BIGTRAIN" init bad --out bad.yaml 2> bad.log; then fail "init must refuse bad data"; fi
cat bad.log
grep -q "broken.tif" bad.log || fail "the unreadable file must be named"
grep -q "rgb.tif: 3 channel" bad.log || fail "the file with other channels must be named"
grep -q "class 'd' has 1 image" bad.log || fail "a class with one image must be named"
[ ! -e bad.yaml ] || fail "nothing may be written for bad data"
echo "ok"
