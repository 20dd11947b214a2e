#!/usr/bin/env bash
# Issue 9: a real `bigtrain run` whose disk fills up while it writes its outputs
# stops with a clear error naming the file and a nonzero exit, and leaves no
# half-written file under a final name (nor a temporary). The full disk is a file
# size limit (ulimit -f, SIGXFSZ ignored): write() then fails with EFBIG exactly as
# it fails with ENOSPC on a full disk, root included (permissions would not stop
# root). An output folder that cannot be created is a clear error too.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"

demo_data --size 128 --classes 0,1 --train 4 --val 2 --test 0 --tile 64
cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0}
model: {preset: small, in_channels: 1, width: 1.0, stem: {kernel: 7, stride: 4, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 1, images_per_step: 2, tile_batch: 4, optimizer: adamw, lr: 0.001, seed: 0}
device: {type: cpu, threads: 1}
YAML

# Every safetensors file present must be whole: its header's offsets end exactly
# at the end of the file.
all_complete() {
  python3 - "$1" <<'PY'
import json, os, struct, sys
bad = []
for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(root, name)
        if not name.endswith(".safetensors"):
            continue
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8: bad.append(path); continue
            (n,) = struct.unpack("<Q", head)
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        end = max((v["data_offsets"][1] for v in header.values()), default=0)
        if os.path.getsize(path) != 8 + n + end: bad.append(path)
if bad: sys.exit("incomplete: " + ", ".join(bad))
PY
}

# How large each output is, to place the limit between them.
"$BIGTRAIN" run run.yaml --set output.dir=free >free.log 2>&1 || { cat free.log; fail "the unlimited run failed"; }
checkpoint_kib=$(( $(stat -c %s free/checkpoints/last.training.safetensors) / 1024 ))
# Written before it: best.safetensors (the weights alone) and the small files.
largest_other_kib=$(( $(find free -type f ! -name 'last*.safetensors' ! -name log.txt -printf '%s\n' | sort -n | tail -1) / 1024 + 1 ))
[ "$checkpoint_kib" -gt $((largest_other_kib + 2)) ] \
  || fail "the training state ($checkpoint_kib KiB) is not larger than every file written before it ($largest_other_kib KiB): the limit cannot single it out"

# A limit every file written before the training state fits under, but it does not.
limit_kib=$(( (checkpoint_kib + largest_other_kib) / 2 ))
set +e
( trap '' XFSZ; ulimit -f "$limit_kib"; exec "$BIGTRAIN" run run.yaml --set output.dir=full ) >full.log 2>&1
status=$?
set -e
[ "$status" -ne 0 ] || { cat full.log; fail "the run succeeded with a ${limit_kib} KiB file size limit"; }
[ "$status" -lt 128 ] || { cat full.log; fail "the run died of signal $((status - 128)) instead of reporting the error"; }
grep -q "full/checkpoints/last.training.safetensors" full.log || { cat full.log; fail "the error does not name the checkpoint"; }
grep -q "File too large" full.log || { cat full.log; fail "the error does not say why"; }
leftovers=$(find full -name '*.tmp*')
[ -z "$leftovers" ] || fail "temporary files left behind: $leftovers"
[ ! -e full/checkpoints/last.training.safetensors ] || fail "a checkpoint exists under its final name"
all_complete full || fail "a half-written file under a final name"
[ -s full/metrics.csv ] || fail "metrics.csv (smaller than the limit) should have been written"

# An output folder that cannot exist (below a regular file: root cannot create it either).
touch plain
if "$BIGTRAIN" run run.yaml --set output.dir=plain/run >unwritable.log 2>&1; then fail "a run below a regular file succeeded"; fi
grep -q "plain/run" unwritable.log || { cat unwritable.log; fail "the error does not name the folder"; }
grep -qi "not a directory" unwritable.log || { cat unwritable.log; fail "the error does not say why"; }
if [ "$(id -u)" -ne 0 ]; then
  mkdir readonly && chmod 555 readonly
  if "$BIGTRAIN" run run.yaml --set output.dir=readonly/run >readonly.log 2>&1; then fail "a run in a read-only folder succeeded"; fi
  grep -q "readonly/run" readonly.log || { cat readonly.log; fail "the read-only error does not name the folder"; }
  chmod 755 readonly
else
  echo "(root: a read-only folder would not stop it; the folder below a regular file stands in)"
fi
echo "ok: a ${limit_kib} KiB limit failed the ${checkpoint_kib} KiB checkpoint with: $(grep -m1 -o 'full/checkpoints/[^ ]*: .*' full.log)"
