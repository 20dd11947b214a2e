"""Shared by scripts/measure_infer_rss and scripts/bench_infer: a small trained
checkpoint, made once (cached under .cache/infer) by `bigtrain make-demo-data` and one
epoch of `bigtrain run` on a handful of MNIST canvases."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiler_images  # noqa: E402

ROOT = tiler_images.ROOT


def checkpoint(name, model_yaml, tile, aggregator="attention"):
    cache = ROOT / ".cache" / "infer" / name
    ckpt = cache / "run" / "checkpoints" / "last.safetensors"
    if ckpt.exists():
        return ckpt
    print(f"training {name} for one epoch (once; later runs reuse it)", file=sys.stderr, flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    data = cache / "data"
    if not (data / "train.csv").exists():
        subprocess.run([tiler_images.bigtrain(), "make-demo-data", "--out", str(data), "--mnist",
                        str(ROOT / "tests" / "data" / "mnist"), "--size", str(2 * tile), "--classes", "3,5",
                        "--train", "4", "--val", "2", "--test", "0", "--clutter", "2", "--tile", "64", "--seed", "1"],
                       check=True, stdout=subprocess.DEVNULL)
    config = cache / "run.yaml"
    config.write_text(f"""data: {{train: {data}/train.csv, val: {data}/val.csv, mean: [0.5], std: [0.25]}}
tiler: {{tile: {tile}, overlap: 0}}
model: {model_yaml}
aggregator: {{kind: {aggregator}, hidden: 32}}
train: {{epochs: 1, tile_batch: 4, seed: 1}}
device: {{type: cpu}}
output: {{dir: {cache / 'run'}}}
""")
    subprocess.run([tiler_images.bigtrain(), "run", str(config)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return ckpt
