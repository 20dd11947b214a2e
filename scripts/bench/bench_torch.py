"""The PyTorch half of scripts/bench_net: the same models and steps as bench_net_cpp.

    /usr/bin/python3 scripts/bench/bench_torch.py --preset resnet18 --tile 224 --batch 8 --mode train

torchvision's ResNet with a 1-channel conv1 and a 2-class fc; training is forward,
cross-entropy, backward, SGD step (momentum 0.9, weight decay 1e-4); inference is a
forward in eval mode under torch.inference_mode(). Prints one JSON object like
bench_net_cpp's. scripts/bench_net runs it with jemalloc preloaded (PyTorch at its best
on this machine) and torch.set_num_threads(--threads).
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torchvision


def build(preset):
    model = getattr(torchvision.models, preset)(num_classes=2)
    # The same 1-channel stem as bigtrain's in_channels: 1 (torchvision's conv1 otherwise).
    old = model.conv1
    model.conv1 = torch.nn.Conv2d(1, old.out_channels, old.kernel_size, old.stride, old.padding, bias=False)
    torch.nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="resnet18")
    parser.add_argument("--tile", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--mode", choices=["train", "infer"], default="train")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build(args.preset)
    images = torch.rand(args.batch, 1, args.tile, args.tile) * 2 - 1
    labels = torch.arange(args.batch) % 2

    if args.mode == "train":
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

        def body():
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
    else:
        model.eval()

        def body():
            with torch.inference_mode():
                model(images)

    for _ in range(args.warmup):
        body()
    seconds = []
    for _ in range(args.iters):
        start = time.perf_counter()
        body()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(json.dumps({
        "kind": "model", "framework": "pytorch", "preset": args.preset, "tile": args.tile,
        "batch": args.batch, "mode": args.mode, "median_s": median, "seconds": seconds,
        "tiles_per_s": args.batch / median,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "jemalloc": "jemalloc" in os.environ.get("LD_PRELOAD", ""),
    }))


if __name__ == "__main__":
    main()
