#!/usr/bin/env bash
# report.html of a real tiny run, rendered in headless Chromium: no console errors,
# and the training curves, confusion matrices and the trainer's heatmaps of correct and
# wrong validation images are in the rendered DOM. Also:
# `bigtrain report` regenerates the page, the page loads nothing from elsewhere,
# and no temporary file is left. BIGTRAIN_REPORT_SCREENSHOT=path keeps the screenshot
# (docs/report.png is made this way).
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the heatmaps"; exit 77; }

demo_data --size 192 --classes 2,7 --train 8 --val 4 --test 4 --tile 64
cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 3, images_per_step: 2, tile_batch: 5, optimizer: sgd, lr: 0.01, seed: 1, freeze_bn: true}
device: {type: cpu, threads: 2}
output: {dir: runs/a}
YAML
"$BIGTRAIN" run run.yaml 2> run.log || { cat run.log; fail "training failed"; }
run=runs/a
[ -s $run/report.html ] || fail "the trainer wrote no report.html"
[ -s $run/data_summary.json ] || fail "the trainer wrote no data_summary.json"
ls $run | grep -q '\.tmp' && fail "a temporary file was left in $run: $(ls $run)"
grep -q 'data-chart="loss"' $run/report.html || fail "no loss chart"
# The trainer's last page already has the test split; regenerating gives the same content
# apart from the time it was written.
cp $run/report.html trainer.html
"$BIGTRAIN" report $run > report.out || fail "bigtrain report failed"
grep -qx "$run/report.html" report.out || fail "bigtrain report should print the page's path: $(cat report.out)"
diff <(sed 's/page written [^·]*·//' trainer.html) <(sed 's/page written [^·]*·//' $run/report.html) >/dev/null \
  || fail "bigtrain report does not reproduce the trainer's page"
# Self-contained: no scripts, no external resources.
grep -Eqi '<script|src="https?:|href="https?:|@import|url\(' $run/report.html && fail "the page references something outside itself"
if "$BIGTRAIN" report "$tmp/nowhere" 2> bad.log; then fail "a missing run directory must fail"; fi
grep -q "metrics.csv" bad.log || { cat bad.log; fail "the error should say what is missing"; }

# The trainer drew heatmaps of correct and wrong validation images with its best
# checkpoint (report_heatmaps.json lists them). Check them against `bigtrain infer`
# with that checkpoint: the same predictions, the right correct/wrong split, and
# nothing stale left from earlier epochs.
manifest=$run/heatmaps/report_heatmaps.json
[ -s $manifest ] || fail "the trainer wrote no $manifest"
"$BIGTRAIN" infer $(tail -n +2 data/val.csv | cut -d, -f1 | sed 's|^|data/|') --json \
  --checkpoint $run/checkpoints/best.safetensors > infer.jsonl 2> infer.log || { cat infer.log; fail "bigtrain infer failed"; }
heatmaps=$(python3 - "$run" data/val.csv infer.jsonl <<'PY'
import csv, json, os, struct, sys
run, val_csv, infer = sys.argv[1:]
manifest = json.load(open(os.path.join(run, "heatmaps", "report_heatmaps.json")))
labels = {os.path.realpath(os.path.join("data", r["path"])): r["label"] for r in csv.DictReader(open(val_csv))}
predicted = {os.path.realpath(p["path"]): p for p in map(json.loads, open(infer))}
correct = sum(1 for path, p in predicted.items() if p["top_class"] == labels[path])
wrong = len(predicted) - correct
shown = manifest["heatmaps"]
# All 4 validation images are scanned (fewer than the 16 allowed) unless 2+2 were found first.
assert manifest["validation_images"] == 4, manifest
want_correct = min(2, correct) if manifest["scanned"] == 4 else 2
want_wrong = min(2, wrong) if manifest["scanned"] == 4 else 2
assert sum(h["correct"] for h in shown) == want_correct, (manifest, correct)
assert sum(not h["correct"] for h in shown) == want_wrong, (manifest, wrong)
for h in shown:
    p = predicted[os.path.realpath(h["image"])]
    assert h["predicted_class"] == p["top_class"], (h, p)
    assert abs(h["probability"] - p["top_probability"]) < 1e-6, (h, p)
    assert h["true_class"] == labels[os.path.realpath(h["image"])], h
    assert h["correct"] == (h["true_class"] == h["predicted_class"]), h
    assert h["tiles"] == p["tiles"], (h, p)
    png = open(os.path.join(run, "heatmaps", h["file"]), "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n", h["file"]
    width, height = struct.unpack(">II", png[16:24])
    # A thumbnail: the image's longer side at most 320 px, plus the legend (at most 170 px wide).
    assert height <= 320 and width <= 320 + 170, (h["file"], width, height)
files = sorted(f for f in os.listdir(os.path.join(run, "heatmaps")) if f.endswith(".png"))
assert files == sorted(h["file"] for h in shown), f"stale heatmaps left: {files}"
assert manifest["epoch"] >= 1 and manifest["quantity"] == "attention", manifest
print(len(shown), sum(h["correct"] for h in shown))
PY
) || fail "the trainer's heatmaps do not match bigtrain infer with the best checkpoint"
read -r heatmaps correct_heatmaps <<< "$heatmaps"
[ "$heatmaps" -gt 0 ] || fail "no heatmaps drawn"

chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium_bin" ]; then
  echo "SKIP: chromium is not installed (apt-get install chromium); the page was checked without rendering"
  exit 77
fi
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --hide-scrollbars)
page="file://$tmp/$run/report.html"
timeout 120 "$chromium_bin" "${flags[@]}" --user-data-dir="$(mktemp -d -p "$tmp")" --enable-logging=stderr --v=0 \
  --screenshot="$tmp/report.png" --window-size=1280,2400 "$page" > shot.out 2> shot.log || { tail -20 shot.log; fail "chromium --screenshot failed"; }
[ -s report.png ] || { tail -20 shot.log; fail "no screenshot"; }
if grep -E 'CONSOLE|Uncaught' shot.log; then fail "console messages while rendering the report"; fi
timeout 120 "$chromium_bin" "${flags[@]}" --user-data-dir="$(mktemp -d -p "$tmp")" --enable-logging=stderr --v=0 \
  --dump-dom "$page" > dom.html 2> dom.log || { tail -20 dom.log; fail "chromium --dump-dom failed"; }
if grep -E 'CONSOLE|Uncaught' dom.log; then fail "console messages while rendering the report"; fi
for chart in loss accuracy lr images_per_s tiles_per_s memory; do
  grep -q "data-chart=\"$chart\"" dom.html || fail "chart $chart missing from the rendered DOM"
done
# Three epochs: each curve is a polyline of three points.
for series in train val; do
  points=$(grep -o "data-series=\"$series\"[^>]*points=\"[^\"]*\"" dom.html | head -1 | sed 's/.*points="//; s/"$//')
  [ "$(echo $points | wc -w)" -eq 3 ] || fail "the $series loss curve should have 3 points: '$points'"
done
grep -q '<table class="confusion" data-split="test">' dom.html || fail "test confusion matrix missing"
grep -q '<table class="confusion" data-split="val">' dom.html || fail "validation confusion matrix missing"
# The confusion matrix counts every test image once.
cells=$(sed 's/.*<table class="confusion" data-split="test">//; s#</table>.*##' dom.html | grep -o '<td[^>]*>[0-9]*</td>' | sed 's/<[^>]*>//g')
[ "$(echo "$cells" | awk "{s+=\$1} END {print s}")" -eq 4 ] || fail "test confusion cells should sum to 4: $cells"
# The heatmaps are in the rendered page, correct and wrong ones marked as such.
[ "$(grep -o '<figure data-outcome="\(correct\|wrong\)"><img alt="val_[^"]*" src="data:image/png;base64,' dom.html | wc -l)" -eq "$heatmaps" ] \
  || fail "the $heatmaps heatmap PNGs should be embedded in the page"
[ "$(grep -o '<figure data-outcome="correct">' dom.html | wc -l)" -eq "$correct_heatmaps" ] \
  || fail "the page should mark $correct_heatmaps heatmaps correct"
grep -q 'data-section="heatmaps-chosen"' dom.html || fail "the page should say how the heatmaps were chosen"
[ -n "${BIGTRAIN_REPORT_SCREENSHOT:-}" ] && cp report.png "$BIGTRAIN_REPORT_SCREENSHOT"
echo "ok"
