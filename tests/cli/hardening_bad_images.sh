#!/usr/bin/env bash
# Issue 9: a training manifest with unreadable images. data.on_bad_image: error (the
# default) stops before training, naming the manifest line and the reason; skip
# trains on the rest and lists every skipped image (line and reason) in log.txt and
# in report.html's data summary. Labels that name no class, or no label at all,
# are errors naming the manifest line in both modes.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

broken=$SOURCE/tests/data/broken_images

demo_data --size 128 --classes 0,1 --train 4 --val 2 --test 0 --tile 64
lines=$(wc -l < data/train.csv)
cp data/train.csv data/bad.csv
printf '%s,0\n%s,1\nmissing.tif,1\n' "$broken/not-a-tiff.tif" "$broken/truncated-header.tif" >> data/bad.csv
cat > run.yaml <<'YAML'
data: {train: data/bad.csv, val: data/val.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 7, stride: 4, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 1, images_per_step: 2, tile_batch: 4, optimizer: sgd, lr: 0.01, seed: 0}
device: {type: cpu, threads: 1}
YAML

if "$BIGTRAIN" run run.yaml --set output.dir=strict >strict.log 2>&1; then fail "bad images trained with on_bad_image: error"; fi
grep -q "bad.csv:$((lines + 1)): .*not-a-tiff.tif" strict.log || { cat strict.log; fail "the error must name the manifest line and file"; }
grep -q "on_bad_image" strict.log || { cat strict.log; fail "the error should point to data.on_bad_image"; }
[ ! -e strict/metrics.csv ] || fail "it trained before failing"

"$BIGTRAIN" run run.yaml --set output.dir=skip --set data.on_bad_image=skip >skip.log 2>&1 || { cat skip.log; fail "the run with skip failed"; }
grep -q "3 image(s) left out" skip/log.txt || { cat skip/log.txt; fail "log.txt must count the skipped images"; }
for i in 1 2 3; do
  grep -q "skipped .*bad.csv:$((lines + i)):*" skip/log.txt || { cat skip/log.txt; fail "log.txt does not list bad.csv:$((lines + i))"; }
done
grep -q "1,train,.*,$((lines - 1)),[0-9]*," skip/metrics.csv || { cat skip/metrics.csv; fail "epoch 1 should train on the $((lines - 1)) good images"; }
[ -s skip/report.html ] || fail "no report.html"
grep -q "Skipped images: 3" skip/report.html || fail "report.html's data summary does not count the skipped images"
for name in not-a-tiff.tif truncated-header.tif missing.tif; do
  grep -q "$name" skip/report.html || fail "report.html does not list $name"
done

# Wrong labels: errors in both modes, naming the line. (The classes come from the
# training manifest's labels, so a class no training image has shows in val.)
val_lines=$(wc -l < data/val.csv)
cp data/val.csv data/val_labels.csv
printf 'val/0.tif,zebra\n' >> data/val_labels.csv
if "$BIGTRAIN" run run.yaml --set data.val=data/val_labels.csv --set output.dir=labels --set data.on_bad_image=skip \
  >labels.log 2>&1; then fail "an unknown class trained"; fi
grep -q "val_labels.csv:$((val_lines + 1)): unknown label 'zebra'" labels.log || { cat labels.log; fail "unknown class message"; }
cp data/train.csv data/nolabel.csv
printf 'train/0.tif,\n' >> data/nolabel.csv
if "$BIGTRAIN" run run.yaml --set data.train=data/nolabel.csv --set output.dir=nolabel >nolabel.log 2>&1; then
  fail "a line without a label trained"
fi
grep -q "nolabel.csv:$((lines + 1)): the label of 'train/0.tif' is missing" nolabel.log || { cat nolabel.log; fail "missing label message"; }
echo "ok"
