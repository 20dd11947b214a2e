#!/usr/bin/env python3
"""Class folders of 12-bit grey TIFFs (uint16 samples, values 0..4095, no header tag
declaring the maximum, as many detectors write them): a smooth uneven background
with noise, and three small bright objects whose shape is the class (disks or bars).

    make_grey12_classes.py OUT [--per-class 16] [--size 256] [--seed 0]

Needs numpy and tifffile (Debian: python3-numpy, python3-tifffile)."""
import argparse
import os

import numpy as np
import tifffile


def image(rng, size, shape):
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    phase = rng.uniform(0, 2 * np.pi, 2)
    # Uneven illumination: a slow wave of +-300 around 1200 (of 4095).
    level = 1200 + 300 * np.sin(2 * np.pi * x / (1.7 * size) + phase[0]) * np.cos(2 * np.pi * y / (2.3 * size) + phase[1])
    pixels = level + rng.normal(0, 40, (size, size))
    for _ in range(3):
        cx, cy = rng.uniform(24, size - 24, 2)
        if shape == "disks":
            inside = (x - cx) ** 2 + (y - cy) ** 2 <= 11 ** 2
        elif rng.uniform() < 0.5:
            inside = (np.abs(x - cx) <= 15) & (np.abs(y - cy) <= 3)
        else:
            inside = (np.abs(x - cx) <= 3) & (np.abs(y - cy) <= 15)
        pixels[inside] += 1800
    return np.clip(np.round(pixels), 0, 4095).astype(np.uint16)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--per-class", type=int, default=16)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for shape in ("disks", "bars"):
        os.makedirs(os.path.join(args.out, shape), exist_ok=True)
        for i in range(args.per_class):
            tifffile.imwrite(os.path.join(args.out, shape, f"{i:03d}.tif"), image(rng, args.size, shape),
                             photometric="minisblack", tile=(64, 64))


if __name__ == "__main__":
    main()
