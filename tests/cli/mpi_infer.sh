#!/usr/bin/env bash
# `mpirun -np 2 bigtrain infer` shards the images across ranks: each rank classifies
# a disjoint share (round robin), rank 0 prints every result in input order, the
# same lines as one process (JSON and text, up to the seconds each image took);
# tile CSVs written by either rank equal one process's; a bad image on rank 1 is
# still reported by rank 0 and fails the job; all good images exit 0.
set -euo pipefail
BIGTRAIN=$1
SOURCE=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }
# CI runs as root; Open MPI refuses root without both of these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One oneDNN thread in every process, so each image's numbers come from the same
# kernels whether one process or two ranks classify it (exact comparison below).
export OMP_NUM_THREADS=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

"$BIGTRAIN" make-demo-data --out data --mnist "$SOURCE/tests/data/mnist" --size 128 --classes 3,5 --train 4 --val 2 \
  --test 5 --clutter 2 --tile 64 --seed 4 >/dev/null 2>&1 || fail "make-demo-data failed"
cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, mean: [0.1], std: [0.3]}
tiler: {tile: 64, overlap: 32, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 1, tile_batch: 4, images_per_step: 2, seed: 1}
device: {type: cpu, threads: 1}
output: {dir: run}
YAML
"$BIGTRAIN" run run.yaml > run.log 2>&1 || { cat run.log; fail "training failed"; }
ckpt=run/checkpoints/last.safetensors

# Input order: good, garbage, good, missing, then a folder of 4 more. Round robin puts
# the garbage image (index 1) and the missing one (index 3) on rank 1.
mkdir -p more
images=(data/test/*.tif)
cp "${images[@]:1:4}" more/
echo "not an image" > garbage.tif
inputs=("${images[0]}" garbage.tif "${images[1]}" missing.png more)
common=(--checkpoint "$ckpt" --threads 1 --tile-batch 3)

if "$BIGTRAIN" infer "${inputs[@]}" "${common[@]}" --json --tiles-csv one/t.csv > one.jsonl 2> one.err; then
  fail "one process: bad images gave exit code 0"
fi
if "${MPIRUN[@]}" "$BIGTRAIN" infer "${inputs[@]}" "${common[@]}" --json --tiles-csv two/t.csv > two.jsonl 2> two.err; then
  fail "2 ranks: bad images gave exit code 0"
fi
if grep -q "built without MPI" two.err; then echo "SKIP: this bigtrain was built without MPI"; exit 77; fi
grep -q "8 images (2 failed), .* (MPI .*2 ranks: 4+4 images)" two.err \
  || { cat two.err; fail "rank 0's summary must count both ranks' images (4 each) and both failures"; }

python3 - <<'PY' || fail "2-rank JSON differs from one process"
import json
def rows(name):
    out = []
    for line in open(name):
        r = json.loads(line)
        r.pop("seconds", None)  # wall time, the only field allowed to differ
        out.append(r)
    return out
one, two = rows("one.jsonl"), rows("two.jsonl")
assert len(one) == 8, one
assert [("error" in r) for r in one] == [False, True, False, True, False, False, False, False], one
assert one == two, "\n".join(f"{a}\n{b}\n" for a, b in zip(one, two) if a != b) or f"{len(one)} vs {len(two)} rows"
print("8 JSON lines identical; errors:", [r["path"] for r in two if "error" in r])
PY
# Each error reported once, by rank 0, naming the item.
for item in garbage.tif missing.png; do
  [ "$(grep -c "$item" two.err)" -eq 1 ] || { cat two.err; fail "the error for $item must appear once"; }
done
# Tile CSVs: every classified image's, equal to one process's.
[ "$(ls two | wc -l)" -eq 6 ] || fail "expected 6 tile CSVs, got: $(ls two)"
diff -r one two > /dev/null || fail "tile CSVs differ: $(diff -r one two | head)"

# Text output too, with the seconds masked; and all-good input exits 0.
"$BIGTRAIN" infer more "${images[0]}" "${common[@]}" 2> /dev/null | sed 's/, [0-9.]* s\]/]/' > one.txt \
  || fail "one process: good images failed"
"${MPIRUN[@]}" "$BIGTRAIN" infer more "${images[0]}" "${common[@]}" 2> two_text.err | sed 's/, [0-9.]* s\]/]/' > two.txt \
  || { cat two_text.err; fail "2 ranks: good images failed"; }
[ "$(wc -l < one.txt)" -eq 5 ] || fail "expected 5 text lines: $(cat one.txt)"
cmp -s one.txt two.txt || fail "text output differs: $(diff one.txt two.txt)"
echo "ok"
