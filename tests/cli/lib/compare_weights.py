# Not a test itself (CTest takes only tests/cli/*.sh): the data-parallel CLI tests'
# check of a run's final weights against the single-process run's.
# compare_weights.py RELATIVE ABSOLUTE REFERENCE.safetensors OTHER.safetensors...:
# every float32 tensor of each OTHER equals REFERENCE's within
# ABSOLUTE + RELATIVE * |reference value|; prints the worst value per file.
import json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out
relative, absolute = float(sys.argv[1]), float(sys.argv[2])
single = load(sys.argv[3])
ok = True
for other_path in sys.argv[4:]:
    other = load(other_path)
    assert set(other) == set(single), "different tensors"
    worst_ratio, worst_diff, worst_name, changed = 0.0, 0.0, "", 0
    for name, values in single.items():
        for x, y in zip(values, other[name]):
            changed += x != y
            ratio = abs(x - y) / (absolute + relative * abs(x))
            if ratio > worst_ratio:
                worst_ratio, worst_diff, worst_name = ratio, abs(x - y), name
    print(f"{other_path}: {changed} values differ; largest difference {worst_diff:.3g} ({worst_name}), "
          f"{worst_ratio:.3g} x the tolerance")
    ok = ok and worst_ratio <= 1.0
sys.exit(0 if ok else 1)
