#!/usr/bin/env bash
# A checkpoint written from PyTorch (a torchvision ResNet-18 state_dict saved as
# safetensors with the metadata of docs/checkpoints.md) classifies an image through
# `bigtrain infer` with the probabilities PyTorch computes for the same tiles.
set -euo pipefail
BIGTRAIN=$1
SOURCE=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHON=/usr/bin/python3
if ! "$PYTHON" -c 'import torch, torchvision' 2>/dev/null; then
  echo "skipping: $PYTHON cannot import torch and torchvision (Debian's python3-torch, python3-torchvision)"
  exit 77
fi
"$PYTHON" "$SOURCE/tests/cli/infer_torch_oracle.py" "$tmp"
"$BIGTRAIN" infer "$tmp/image.png" --checkpoint "$tmp/resnet18.safetensors" --json > "$tmp/ours.json"
"$PYTHON" - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
ours = json.loads(open(f"{tmp}/ours.json").read())
expected = json.load(open(f"{tmp}/expected.json"))
assert ours["tiles"] == expected["tiles"], (ours["tiles"], expected["tiles"])
got = [ours["probabilities"]["cat"], ours["probabilities"]["dog"]]
# float32 through ResNet-18 (~20 layers of sums over up to 4608 products), different
# summation orders in oneDNN and PyTorch: logits agree to ~1e-5 relative, so the
# probabilities to well within 1e-4.
for g, e in zip(got, expected["probabilities"]):
    assert abs(g - e) < 1e-4, (got, expected)
import math
# The log-odds are the logit difference: a check that holds even when a probability saturates.
log_odds = math.log(got[1]) - math.log(got[0])
want = expected["logits"][1] - expected["logits"][0]
assert abs(log_odds - want) < 1e-3 * max(1.0, abs(want)), (log_odds, want)
print("bigtrain", got, "pytorch", expected["probabilities"], "logits", expected["logits"])
PY
echo "infer_torch ok"
