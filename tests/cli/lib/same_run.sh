# Sourced by the CLI tests that stop and resume a run (not a test itself: CTest takes
# only tests/cli/*.sh). The caller defines fail().
# same_run REFERENCE_DIR RUN_DIR CHECKPOINT...: every tensor of each named checkpoint
# is bit-for-bit equal in the two run directories, and so are the metrics.csv columns
# that measure neither time nor memory (losses, accuracies, AUCs, counts, learning rate).
same_run() {
  local reference=$1 run=$2
  shift 2
  python3 - "$reference" "$run" "$@" <<'PY' || fail "$run differs from the uninterrupted run"
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}
for name in sys.argv[3:]:
    a, b = (tensors(f"{d}/checkpoints/{name}") for d in sys.argv[1:3])
    if a.keys() != b.keys(): sys.exit(f"{name}: tensor names differ")
    bad = [k for k in a if a[k] != b[k]]
    if bad: sys.exit(f"{name}: {len(bad)} tensors differ, e.g. {bad[0]}")
PY
  same_columns() { cut -d, -f1-8,15- "$1/metrics.csv"; }
  diff <(same_columns "$reference") <(same_columns "$run") || fail "$run/metrics.csv differs from the uninterrupted run's"
}
