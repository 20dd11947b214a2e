#!/usr/bin/env python3
"""PyTorch side of tests/cli/infer_torch.sh: a torchvision ResNet-18 state_dict
saved as safetensors with the metadata docs/checkpoints.md documents, an RGB PNG,
and the probabilities PyTorch computes for that image the way bigtrain infers
it (64-pixel tiles, ImageNet normalisation, features averaged over the tiles,
then fc, then softmax).

  infer_torch_oracle.py OUT

writes OUT/resnet18.safetensors, OUT/image.png and OUT/expected.json.
Written with struct, zlib and json only: no `safetensors` or PIL needed.
"""
import json
import struct
import sys
import zlib

import torch
import torchvision

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
TILE = 64


def save_safetensors(path, tensors, metadata):
    dtypes = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_png(path, rgb):  # rgb: uint8 tensor [H, W, 3]
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + bytes(rgb[y].flatten().tolist()) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw)))
        f.write(chunk(b"IEND", b""))


def main():
    out = sys.argv[1]
    torch.manual_seed(7)
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=2).eval()
    with torch.no_grad():
        # Random BatchNorm statistics and affine parameters, so loading them wrongly shows.
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    metadata = {
        "model": "preset: resnet18\nin_channels: 3\nnum_classes: 2\n",
        "classes": json.dumps(["cat", "dog"]),
        "normalization": json.dumps({"mean": MEAN, "std": STD}),
        "tiler": json.dumps({"tile": TILE, "overlap": 0, "border": "pad"}),
        "aggregator": json.dumps({"kind": "mean"}),
    }
    save_safetensors(f"{out}/resnet18.safetensors", model.state_dict(), metadata)

    # 192 x 128: 3 x 2 tiles of 64.
    rgb = torch.randint(0, 256, (128, 192, 3), dtype=torch.uint8)
    write_png(f"{out}/image.png", rgb)
    x = rgb.permute(2, 0, 1).float() / 255.0
    x = (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    tiles = torch.stack([x[:, y:y + TILE, x0:x0 + TILE] for y in (0, 64) for x0 in (0, 64, 128)])
    encoder = torch.nn.Sequential(*list(model.children())[:-1], torch.nn.Flatten())
    with torch.no_grad():
        features = encoder(tiles)
        logits = model.fc(features.mean(0, keepdim=True))[0]
        probabilities = torch.softmax(logits.double(), 0)
    json.dump({"logits": logits.tolist(), "probabilities": probabilities.tolist(), "tiles": len(tiles)},
              open(f"{out}/expected.json", "w"))


if __name__ == "__main__":
    main()
