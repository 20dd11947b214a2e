#!/usr/bin/env bash
# `bigtrain compare` end to end on a tiny generated demo set: both configs train,
# the table has one row per config, and each row equals its own run's metrics.csv
# (test split); --reuse reads the runs without training again.
set -euo pipefail
BIGTRAIN=$1
SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! command -v python3 >/dev/null; then echo "python3 is needed to check the table; skipping"; exit 77; fi

"$BIGTRAIN" make-demo-data --out "$tmp/demo" --mnist "$SRC/tests/data/mnist" --size 512 --classes 0,1 \
  --train 6 --val 4 --test 4 --tile 128 >/dev/null
for name in demo demo_resize_baseline; do
  sed "s#../data/demo/#$tmp/demo/#" "$SRC/configs/$name.yaml" > "$tmp/$name.yaml"
done
sets=(--set train.epochs=1 --set device.type=cpu --set train.tile_batch=8 --set train.warmup_steps=0)
"$BIGTRAIN" compare "$tmp/demo.yaml" "$tmp/demo_resize_baseline.yaml" --out "$tmp/cmp" "${sets[@]}" > "$tmp/table.md" 2> "$tmp/log.txt" \
  || { cat "$tmp/log.txt"; fail "compare failed"; }
[ -f "$tmp/cmp/compare.csv" ] && [ -f "$tmp/cmp/compare.md" ] || fail "no compare.csv / compare.md"
python3 - "$tmp/cmp" <<'PY'
import csv, sys, os
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "compare.csv"))))
assert sorted(r["name"] for r in rows) == ["demo", "demo_resize_baseline"], rows
accs = [float(r["accuracy"]) for r in rows]
assert accs == sorted(accs, reverse=True), accs
for r in rows:
    metrics = list(csv.DictReader(open(os.path.join(r["run_dir"], "metrics.csv"))))
    test = [m for m in metrics if m["split"] == "test"][-1]
    train = [m for m in metrics if m["split"] == "train"]
    assert abs(float(test["accuracy"]) - float(r["accuracy"])) < 1e-6, (test, r)
    assert abs(float(test["loss"]) - float(r["loss"])) < 1e-6, (test, r)
    assert abs(sum(float(m["seconds"]) for m in train) / len(train) - float(r["train_seconds_per_epoch"])) < 1e-3
    assert int(r["peak_allocated_bytes"]) == max(int(m["peak_allocated_bytes"]) for m in metrics)
print("compare table matches the runs")
PY
grep -q "| demo_resize_baseline |" "$tmp/table.md" || fail "markdown table lacks the baseline row"
"$BIGTRAIN" compare "$tmp/demo.yaml" "$tmp/demo_resize_baseline.yaml" --out "$tmp/cmp" --reuse "${sets[@]}" 2> "$tmp/log2.txt" >/dev/null
grep -q "reading the existing run" "$tmp/log2.txt" || fail "--reuse trained again"
if "$BIGTRAIN" compare "$tmp/demo.yaml" --out "$tmp/cmp2" 2> "$tmp/err.txt"; then fail "one config accepted"; fi
grep -q "at least two configs" "$tmp/err.txt" || fail "one-config message: $(cat "$tmp/err.txt")"
echo "compare cli ok"
