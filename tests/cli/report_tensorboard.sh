#!/usr/bin/env bash
# The TensorBoard event file of a real tiny run, decoded by Google's protobuf runtime
# with TensorBoard's Event/Summary definitions (tests/cli/tensorboard_event.proto):
# TFRecord CRCs verify (independent CRC-32C) and the scalars equal metrics.csv, also
# after a stop and resume (one event file per run, rewritten, not a second one).
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
command -v protoc >/dev/null || { echo "SKIP: protoc is not installed (apt-get install protobuf-compiler)"; exit 77; }
/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null \
  || { echo "SKIP: /usr/bin/python3 has no protobuf module (apt-get install python3-protobuf)"; exit 77; }
mkdir "$tmp/proto"
protoc --proto_path="$SOURCE/tests/cli" --python_out="$tmp/proto" "$SOURCE/tests/cli/tensorboard_event.proto" \
  || fail "protoc failed"

demo_data --size 128 --classes 2,7 --train 6 --val 4 --test 2 --tile 64
cat > run.yaml <<'YAML'
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: mean}
train: {epochs: 2, images_per_step: 2, tile_batch: 4, optimizer: sgd, lr: 0.01, seed: 3, freeze_bn: true}
device: {type: cpu, threads: 2}
output: {dir: runs/b}
YAML
"$BIGTRAIN" run run.yaml --stop-after 1 2> stop.log || { cat stop.log; fail "first epoch failed"; }
events=(runs/b/events.out.tfevents.*)
[ ${#events[@]} -eq 1 ] && [ -s "${events[0]}" ] || fail "expected one event file: ${events[*]}"
/usr/bin/python3 "$SOURCE/tests/cli/report_decode_events.py" proto "${events[0]}" runs/b/metrics.csv || fail "after epoch 1"
first=${events[0]}
"$BIGTRAIN" run run.yaml --resume runs/b 2> resume.log || { cat resume.log; fail "resume failed"; }
events=(runs/b/events.out.tfevents.*)
[ ${#events[@]} -eq 1 ] && [ "${events[0]}" = "$first" ] || fail "a resumed run must keep its one event file: ${events[*]}"
[ "$(wc -l < runs/b/metrics.csv)" -eq 6 ] || fail "metrics.csv should have 5 rows"
/usr/bin/python3 "$SOURCE/tests/cli/report_decode_events.py" proto "${events[0]}" runs/b/metrics.csv || fail "after resume"
# A flipped byte must be caught by the checksums.
cp "${events[0]}" corrupt
printf '\x7f' | dd of=corrupt bs=1 seek=40 conv=notrunc 2>/dev/null
if /usr/bin/python3 "$SOURCE/tests/cli/report_decode_events.py" proto corrupt runs/b/metrics.csv > corrupt.log 2>&1; then
  fail "a corrupted event file passed the checks"
fi
grep -q "CRC" corrupt.log || { cat corrupt.log; fail "corruption should be reported as a CRC mismatch"; }
echo "ok"
