"""PyTorch peer of `bigtrain bench-model` for scripts/bench_gpu: the same encoder,
tile, batch and steps on the same GPU, printed as one JSON line.

Float32 is measured as bigtrain computes it: TF32 off for cuDNN and cuBLAS (on
Ampere and newer PyTorch would otherwise run float32 convolutions as TF32), and
cudnn.benchmark off (cuDNN's heuristic algorithm choice, as bigtrain makes it).
--precision bf16 runs forward and loss under torch.autocast("cuda", torch.bfloat16),
PyTorch's mixed precision as bigtrain's train.precision bf16 mirrors it (no grad
scaler: bf16 has float32's range).
Exits 77 with a reason when torch, torchvision or a CUDA device is missing.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="resnet50")
    parser.add_argument("--tile", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--in-channels", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    try:
        import torch
        import torchvision
    except ImportError as error:
        print(f"bench_gpu_torch: skipped: {error}", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("bench_gpu_torch: skipped: torch sees no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
    model = getattr(torchvision.models, args.preset)(num_classes=2)
    if args.in_channels != 3:
        old = model.conv1
        model.conv1 = torch.nn.Conv2d(args.in_channels, old.out_channels, old.kernel_size, old.stride, old.padding,
                                      bias=False)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    x = torch.rand(args.batch, args.in_channels, args.tile, args.tile, device=device)
    targets = torch.arange(args.batch, device=device) % 2
    loss_fn = torch.nn.CrossEntropyLoss()

    import contextlib
    autocast = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if args.precision == "bf16"
                else contextlib.nullcontext)

    def train_step():
        optimizer.zero_grad(set_to_none=False)
        with autocast():
            loss = loss_fn(model(x), targets)
        loss.backward()
        optimizer.step()
        return loss.item()  # waits for the device, as bigtrain's step does

    encoder = torch.nn.Sequential(*list(model.children())[:-1])  # up to the global average pool

    def infer_step():
        with torch.no_grad(), autocast():
            return encoder(x).flatten(1)[0, 0].item()

    result = {"preset": args.preset, "tile": args.tile, "batch": args.batch, "torch": torch.__version__,
              "precision": args.precision,
              "gpu": torch.cuda.get_device_name(0)}
    for name, step, train in (("train", train_step, True), ("infer", infer_step, False)):
        model.train(train)
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        result[name] = {"median_step_ms": seconds * 1e3, "tiles_per_second": args.batch / seconds,
                        "peak_bytes": torch.cuda.max_memory_allocated()}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
