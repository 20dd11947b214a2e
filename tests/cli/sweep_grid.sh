#!/usr/bin/env bash
# `bigtrain sweep` end to end: a 2x2 grid (tile 32/64 x overlap 0/16) on a tiny
# generated demo set. sweep.csv, sweep.md and sweep.html each have every combination
# once, best first (validation accuracy, then balanced accuracy, then lower loss); one
# row's accuracy and tiles per image equal its own run's metrics.csv; tiles per image
# grow with smaller tiles and with overlap (the overrides reached the runs); each run's
# report.html shows the table with its row marked; --reuse trains nothing; a bad grid
# value fails before any training.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
"$BIGTRAIN" sweep --help >/dev/null 2>&1 || { echo "SKIP: this build has no bigtrain sweep"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the tables"; exit 77; }
demo_data --size 128 --classes 2,7 --train 6 --val 4 --test 2 --tile 64
cat > base.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 3, images_per_step: 2, tile_batch: 8, optimizer: sgd, lr: 0.05, seed: 5, freeze_bn: true}
device: {type: cpu, threads: 2}
YAML
grid=(--grid tiler.tile=32,64 --grid tiler.overlap=0,16)
# --epochs overrides the config's 3; BIGTRAIN_REPORT_HEATMAPS=0 keeps the runs to training alone.
BIGTRAIN_REPORT_HEATMAPS=0 "$BIGTRAIN" sweep base.yaml "${grid[@]}" --epochs 1 --out sw > table.md 2> sweep.log \
  || { cat sweep.log; fail "sweep failed"; }
for f in sweep.csv sweep.md sweep.html; do [ -s sw/$f ] || fail "no sw/$f"; done
ls sw | grep -q '\.tmp' && fail "a temporary file was left in sw: $(ls sw)"
cmp -s table.md sw/sweep.md || fail "the printed table differs from sweep.md"

python3 - sw <<'PY'
import csv, os, re, sys
out = sys.argv[1]
combos = {f"tile{t}_overlap{o}" for t in (32, 64) for o in (0, 16)}
rows = list(csv.DictReader(open(os.path.join(out, "sweep.csv"))))
names = [r["name"] for r in rows]
assert sorted(names) == sorted(combos), f"sweep.csv should have each combination once: {names}"
assert all(r["split"] == "val" for r in rows), "a sweep ranks on validation, never on test"
assert all(r["epochs"] == "1" for r in rows), "--epochs 1 should override the config's 3"
key = [(-float(r["accuracy"]), -float(r["balanced_accuracy"]), float(r["loss"])) for r in rows]
assert key == sorted(key), f"sweep.csv is not best first: {key}"

# The Markdown table: the same runs in the same order.
md = [l for l in open(os.path.join(out, "sweep.md")) if l.startswith("| tile")]
assert [l.split("|")[1].strip() for l in md] == names, md

# The page: every run once, in the CSV's order, the first marked best, each linked to its report.
html = open(os.path.join(out, "sweep.html")).read()
page_names = re.findall(r'<tr(?: class="[^"]*")?><td>[^<]*</td><td>(tile[^<]*)</td>', html)
assert page_names == names, f"sweep.html rows {page_names} differ from sweep.csv {names}"
assert html.count('<tr class="best">') == 1, "exactly one row must be marked best"
assert f'<tr class="best"><td>★ best</td><td>{names[0]}</td>' in html, "the best row should be the CSV's first"
for n in names:
    assert f'href="{n}/report.html"' in html, f"no link to {n}/report.html"
assert "<script" not in html

# Spot check: one row against its own run directory's metrics.csv (written by the trainer).
row = next(r for r in rows if r["name"] == "tile32_overlap16")
metrics = list(csv.DictReader(open(os.path.join(row["run_dir"], "metrics.csv"))))
val = [m for m in metrics if m["split"] == "val"][-1]
train = [m for m in metrics if m["split"] == "train"]
assert abs(float(val["accuracy"]) - float(row["accuracy"])) < 1e-6, (val["accuracy"], row["accuracy"])
assert abs(float(val["loss"]) - float(row["loss"])) < 1e-6, (val["loss"], row["loss"])
tiles = sum(float(m["tiles"]) for m in train) / sum(float(m["images"]) for m in train)
assert abs(tiles - float(row["tiles_per_image"])) < 0.005 + 1e-9, (tiles, row["tiles_per_image"])  # CSV keeps 2 decimals
assert abs(float(train[-1]["tiles_per_s"]) - float(row["train_tiles_per_s"])) < 1e-3
assert int(row["peak_allocated_bytes"]) == max(int(m["peak_allocated_bytes"]) for m in metrics)

# The overrides reached the runs: smaller tiles and more overlap mean more tiles per image.
tpi = {r["name"]: float(r["tiles_per_image"]) for r in rows}
assert tpi["tile32_overlap0"] > tpi["tile64_overlap0"] and tpi["tile32_overlap16"] > tpi["tile64_overlap16"], tpi
assert tpi["tile32_overlap16"] > tpi["tile32_overlap0"] and tpi["tile64_overlap16"] > tpi["tile64_overlap0"], tpi

# Each run's own report shows the sweep table with that run's row marked.
for n in names:
    page = open(os.path.join(out, n, "report.html")).read()
    assert '<h2 id="sweep">sweep table: this run among 4</h2>' in page, f"{n}/report.html lacks the sweep table"
    assert re.search(rf'<tr class="(best )?this"><td>[^<]*this run</td><td>{n}</td>', page), f"{n}'s row is not marked"
print("sweep tables ok:", ", ".join(f"{n} {tpi[n]:.2f} tiles/image" for n in names))
PY

# --reuse reads the runs again without training; the table is unchanged.
cp sw/sweep.csv first.csv
BIGTRAIN_REPORT_HEATMAPS=0 "$BIGTRAIN" sweep base.yaml "${grid[@]}" --epochs 1 --out sw --reuse > /dev/null 2> reuse.log \
  || { cat reuse.log; fail "sweep --reuse failed"; }
grep -q "sweep 1/4" reuse.log && fail "--reuse trained again"
cmp -s first.csv sw/sweep.csv || fail "--reuse changed the table"
# `bigtrain report` on the sweep folder rebuilds sweep.html.
rm sw/sweep.html
"$BIGTRAIN" report sw > report.out || fail "bigtrain report on a sweep folder failed"
[ -s sw/sweep.html ] || fail "bigtrain report did not rebuild sw/sweep.html"

# A value the config refuses fails before anything trains.
if "$BIGTRAIN" sweep base.yaml --grid tiler.overlap=0,64 --epochs 1 --out bad 2> bad.log > /dev/null; then
  fail "an overlap as large as the tile was accepted"
fi
grep -qi "overlap" bad.log || { cat bad.log; fail "the error should name the bad key"; }
[ ! -e bad/overlap0/metrics.csv ] || fail "a run trained before the bad combination was refused"
if "$BIGTRAIN" sweep base.yaml --grid tiler.tile --out bad 2> bad2.log > /dev/null; then fail "a grid without '=' was accepted"; fi
grep -q "key=value" bad2.log || { cat bad2.log; fail "the error should show the grid syntax"; }
echo "ok"
