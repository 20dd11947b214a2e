#!/usr/bin/env python3
"""Golden data from torchvision for tests/net/torchvision_test.cpp.

  export OUT SEED CASE...      CASE = ARCH,IN_CHANNELS,NUM_CLASSES,BATCH,SIZE
      ARCH may end in +gn: torchvision's norm_layer=GroupNorm(gcd(32, C), C).
      For each case builds torchvision's ARCH (conv1 replaced by a 1-channel
      convolution when IN_CHANNELS is 1), gives every BatchNorm random affine
      parameters and running statistics (so loading them wrongly shows), and writes
      in OUT, with TAG = ARCH_<IN_CHANNELS>ch:
        TAG_model.safetensors   its state_dict, names and layouts as PyTorch has them
        TAG_io.safetensors      input [BATCH, IN_CHANNELS, SIZE, SIZE] and eval-mode logits
      With IN_CHANNELS 3 also `gray_input` [BATCH, 1, SIZE, SIZE] and `gray_logits`,
      the logits of (g, g, g): what a 1-channel model loaded with grayscale transfer
      must compute on g.
  import OUT CASE...
      Loads OUT/TAG_ours.safetensors (written by bigtrain) into torchvision's ARCH
      with strict=True and writes OUT/TAG_torch_logits.safetensors: its logits on
      TAG_io's input.
All cases run in one process: importing torch dominates the run time.

The safetensors files are written and read with struct and json, so the
`safetensors` package is not needed.
"""
import json
import math
import struct
import sys

import torch
import torchvision

DTYPES = {torch.float32: "F32", torch.int64: "I64"}
NUMPY_DTYPES = {"F32": "float32", "I64": "int64"}


def save(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load(path):
    import numpy
    with open(path, "rb") as f:
        contents = f.read()
    (length,) = struct.unpack("<Q", contents[:8])
    header = json.loads(contents[8:8 + length])
    data = contents[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = numpy.frombuffer(data[begin:end], dtype=NUMPY_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out


def build(arch, in_channels, num_classes):
    kwargs = {}
    if arch.endswith("+gn"):
        arch = arch[:-len("+gn")]
        kwargs["norm_layer"] = lambda channels: torch.nn.GroupNorm(math.gcd(32, channels), channels)
    model = getattr(torchvision.models, arch)(num_classes=num_classes, **kwargs)
    if in_channels != 3:
        old = model.conv1
        model.conv1 = torch.nn.Conv2d(in_channels, old.out_channels, old.kernel_size, old.stride, old.padding,
                                      bias=False)
        torch.nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model.eval()


def tag_of(arch, in_channels):
    return f"{arch.replace('+', '_')}_{in_channels}ch"


def parse(case):
    fields = case.split(",")
    return fields[0], int(fields[1]), int(fields[2]), [int(f) for f in fields[3:]]


def export(out, seed, case):
    arch, in_channels, num_classes, (batch, size) = parse(case)
    tag = tag_of(arch, in_channels)
    torch.manual_seed(seed)
    model = build(arch, in_channels, num_classes)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(17)
            if isinstance(m, torch.nn.GroupNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
        x = torch.randn(batch, in_channels, size, size)
        io = {"input": x, "logits": model(x)}
        if in_channels == 3:
            g = torch.randn(batch, 1, size, size)
            io["gray_input"] = g
            io["gray_logits"] = model(g.repeat(1, 3, 1, 1))
    save(f"{out}/{tag}_model.safetensors", model.state_dict())
    save(f"{out}/{tag}_io.safetensors", io)


def import_(out, case):
    arch, in_channels, num_classes, _ = parse(case)
    tag = tag_of(arch, in_channels)
    model = build(arch, in_channels, num_classes)
    model.load_state_dict(load(f"{out}/{tag}_ours.safetensors"), strict=True)
    x = load(f"{out}/{tag}_io.safetensors")["input"]
    with torch.no_grad():
        save(f"{out}/{tag}_torch_logits.safetensors", {"logits": model(x)})


def main():
    torch.set_num_threads(1)
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "export":
        seed = int(sys.argv[3])
        for case in sys.argv[4:]:
            export(out, seed, case)
    elif mode == "import":
        for case in sys.argv[3:]:
            import_(out, case)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
