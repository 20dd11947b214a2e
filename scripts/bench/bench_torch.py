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
import math
import os
import resource
import statistics
import time

import torch
import torchvision
from torchvision.models.resnet import BasicBlock, Bottleneck


class ScaledResNet(torchvision.models.resnet.ResNet):
    """torchvision's ResNet with every channel count times `width` and bigtrain's stem options
    (net/encoder.cpp: width-scaled channels rounded, at least 1; stem padding kernel // 2)."""

    def __init__(self, preset, width, stem_kernel, stem_stride, maxpool):
        block, layers = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
                         "resnet50": (Bottleneck, [3, 4, 6, 3])}[preset]
        torch.nn.Module.__init__(self)
        scaled = lambda channels: max(1, math.floor(channels * width + 0.5))  # std::llround
        self._norm_layer, self.dilation, self.groups, self.base_width = torch.nn.BatchNorm2d, 1, 1, 64
        self.inplanes = scaled(64)
        self.conv1 = torch.nn.Conv2d(1, self.inplanes, stem_kernel, stem_stride, stem_kernel // 2, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(self.inplanes)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1) if maxpool else torch.nn.Identity()
        self.layer1 = self._make_layer(block, scaled(64), layers[0])
        self.layer2 = self._make_layer(block, scaled(128), layers[1], stride=2)
        self.layer3 = self._make_layer(block, scaled(256), layers[2], stride=2)
        self.layer4 = self._make_layer(block, scaled(512), layers[3], stride=2)
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(scaled(512) * block.expansion, 2)
        for m in self.modules():
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


def build(args):
    if args.width != 1.0 or args.stem_kernel != 7 or args.stem_stride != 2 or args.no_maxpool:
        return ScaledResNet(args.preset, args.width, args.stem_kernel, args.stem_stride, not args.no_maxpool)
    model = getattr(torchvision.models, args.preset)(num_classes=2)
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
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--stem-kernel", type=int, default=7)
    parser.add_argument("--stem-stride", type=int, default=2)
    parser.add_argument("--no-maxpool", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build(args)
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
        "batch": args.batch, "width": args.width, "mode": args.mode, "median_s": median, "seconds": seconds,
        "tiles_per_s": args.batch / median,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "jemalloc": "jemalloc" in os.environ.get("LD_PRELOAD", ""),
    }))


if __name__ == "__main__":
    main()
