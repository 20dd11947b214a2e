"""The PyTorch half of scripts/bench_stream: the same training step on the whole image.

    /usr/bin/python3 scripts/bench/bench_stream_torch.py --preset resnet50 --height 2435 --width 2435

torchvision's ResNet with a 1-channel conv1 and a 2-class fc, BatchNorm frozen (its
modules in eval mode: running statistics, as bigtrain's streamed step must), one
image of batch 1: forward, cross-entropy, backward, SGD step. Prints one JSON object
like bench_stream_cpp's. scripts/bench_stream runs it with jemalloc preloaded.
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torchvision


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="resnet50")
    parser.add_argument("--height", type=int, default=2435)
    parser.add_argument("--width", type=int, default=2435)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.preset)(num_classes=2)
    old = model.conv1
    model.conv1 = torch.nn.Conv2d(1, old.out_channels, old.kernel_size, old.stride, old.padding, bias=False)
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    image = torch.rand(1, 1, args.height, args.width) * 2 - 1
    label = torch.tensor([1])

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(image), label).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    seconds = []
    for _ in range(args.iters):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({
        "framework": "pytorch", "mode": "whole image", "preset": args.preset, "height": args.height,
        "width": args.width, "median_s": statistics.median(seconds), "seconds": seconds,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "jemalloc": "jemalloc" in os.environ.get("LD_PRELOAD", ""),
    }))


if __name__ == "__main__":
    main()
