#!/usr/bin/env bash
# `bigtrain compare` writes compare.html next to compare.csv: one row per run, the best
# (first) row marked, each run linked to its own report.html (which the trainer wrote),
# and each run's report.html shows the table with its own row marked.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
"$BIGTRAIN" compare --help >/dev/null 2>&1 || { echo "SKIP: this build has no bigtrain compare"; exit 77; }
demo_data --size 128 --classes 2,7 --train 6 --val 4 --test 2 --tile 64
for kind in mean max; do
  cat > $kind.yaml <<YAML
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: $kind}
train: {epochs: 1, images_per_step: 2, tile_batch: 4, optimizer: sgd, lr: 0.05, seed: 3, freeze_bn: true}
device: {type: cpu, threads: 2}
YAML
done
"$BIGTRAIN" compare mean.yaml max.yaml --out cmp > compare.out 2> compare.log || { cat compare.log; fail "compare failed"; }
[ -s cmp/compare.html ] || fail "no compare.html next to compare.csv"
ls cmp | grep -q '\.tmp' && fail "a temporary file was left in cmp"
[ "$(grep -o '<tr class="best">' cmp/compare.html | wc -l)" -eq 1 ] || fail "exactly one row must be marked best"
best=$(sed -n 2p cmp/compare.csv | cut -d, -f1)
grep -q "<tr class=\"best\"><td>★ best</td><td>$best</td>" cmp/compare.html || fail "the marked row should be $best, compare.csv's first"
for run in mean max; do
  grep -q "href=\"$run/report.html\"" cmp/compare.html || fail "no link to $run/report.html"
  [ -s cmp/$run/report.html ] || fail "the trainer wrote no cmp/$run/report.html"
  # Each run's own page shows the comparison too, its row marked (rewritten once the table exists).
  grep -q '<h2 id="compare">compare table: this run among 2</h2>' cmp/$run/report.html \
    || fail "cmp/$run/report.html lacks the compare table"
  grep -Eq "<tr class=\"(best )?this\"><td>[^<]*this run</td><td>$run</td>" cmp/$run/report.html \
    || fail "cmp/$run/report.html does not mark its own row"
done
echo "ok"
