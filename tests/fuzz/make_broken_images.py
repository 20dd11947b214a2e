#!/usr/bin/env python3
"""Writes the committed corpus of broken images, tests/data/broken_images/.

Run once to (re)create it; the files are committed, so tests never depend on this
script, and it needs only Python's standard library. Every file must make
open_image or read_region raise a bigtrain::Error naming the file (checked by
test_broken_images and fuzz.replay.tiff_reader). The byte-flip variants are
seeded, so the same files come out every time; tests/fuzz/README.md says how the
ones that still decoded cleanly were weeded out.

  tests/fuzz/make_broken_images.py [OUT_DIR]
"""
import os
import random
import struct
import sys
import zlib

SHORT, LONG = 3, 4
TAG = dict(subfile=254, width=256, height=257, bits=258, compression=259, photometric=262,
           strip_offsets=273, spp=277, rows_per_strip=278, strip_counts=279, planar=284,
           tile_width=322, tile_length=323, tile_offsets=324, tile_counts=325, sample_format=339,
           ycbcr_subsampling=530)


def tiff(entries, data=b"", data_offset=None, pad_to=0):
    """A little-endian classic TIFF with its IFD at offset 8 and `data` after it.

    entries: {tag name: (type, value or list)}; list values longer than one go to an
    out-of-line array placed after the IFD. Returns (bytes, offset where data starts).
    """
    items = sorted((TAG[name], kind, value if isinstance(value, list) else [value])
                   for name, (kind, value) in entries.items())
    ifd_size = 2 + 12 * len(items) + 4
    arrays_at = 8 + ifd_size
    arrays = b""
    ifd = struct.pack("<H", len(items))
    for tag, kind, values in items:
        fmt = "<H" if kind == SHORT else "<I"
        packed = b"".join(struct.pack(fmt, v) for v in values)
        if len(packed) <= 4:
            ifd += struct.pack("<HHI", tag, kind, len(values)) + packed.ljust(4, b"\0")
        else:
            ifd += struct.pack("<HHII", tag, kind, len(values), arrays_at + len(arrays))
            arrays += packed
    ifd += struct.pack("<I", 0)
    head = b"II*\0" + struct.pack("<I", 8) + ifd + arrays
    start = data_offset if data_offset is not None else len(head)
    out = head.ljust(start, b"\0") + data
    return out.ljust(pad_to, b"\0"), start


def grey_strip(width, height, offset, count, compression=1, extra=None, omit=()):
    entries = dict(width=(LONG, width), height=(LONG, height), bits=(SHORT, 8), compression=(SHORT, compression),
                   photometric=(SHORT, 1), strip_offsets=(LONG, offset), spp=(SHORT, 1),
                   rows_per_strip=(LONG, height), strip_counts=(LONG, count))
    entries.update(extra or {})
    for name in omit:
        entries.pop(name)
    return entries


def deflate_tiled(side=64, tile=16, seed=1):
    """A valid 8-bit grey tiled Deflate image, IFD first, so the data can be cut."""
    rng = random.Random(seed)
    tiles = []
    for _ in range((side // tile) ** 2):
        pixels = bytes(rng.randrange(256) if rng.random() < 0.3 else 128 for _ in range(tile * tile))
        tiles.append(zlib.compress(pixels, 6))
    entries = dict(width=(LONG, side), height=(LONG, side), bits=(SHORT, 8), compression=(SHORT, 8),
                   photometric=(SHORT, 1), spp=(SHORT, 1), tile_width=(LONG, tile), tile_length=(LONG, tile),
                   tile_offsets=(LONG, [0] * len(tiles)), tile_counts=(LONG, [len(t) for t in tiles]))
    head, start = tiff(entries)
    offsets, at = [], start
    for t in tiles:
        offsets.append(at)
        at += len(t)
    entries["tile_offsets"] = (LONG, offsets)
    return tiff(entries, b"".join(tiles))[0], tiles, start


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data", "broken_images")
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    files["empty.tif"] = b""
    files["not-a-tiff.tif"] = b"this is a text file with a .tif name, not an image\n"
    files["truncated-header.tif"] = b"II*\0\x08\0"
    files["bigendian-truncated-header.tif"] = b"MM\0*\0\0"
    files["ifd-past-end.tif"] = b"II*\0" + struct.pack("<I", 0x7FFFFFF0) + bytes(64)
    # 2^31 x 2^31 pixels, one strip (so libtiff accepts the header and bigtrain's
    # size check must speak), and tiled (the tile count alone overflows 32 bits).
    files["huge-2pow31-squared-striped.tif"] = tiff(grey_strip(1 << 31, 1 << 31, 512, 256, omit=["rows_per_strip"]), pad_to=1024)[0]
    files["huge-2pow31-squared-tiled.tif"] = tiff(dict(
        width=(LONG, 1 << 31), height=(LONG, 1 << 31), bits=(SHORT, 8), compression=(SHORT, 1), photometric=(SHORT, 1),
        spp=(SHORT, 1), tile_width=(LONG, 256), tile_length=(LONG, 256), tile_offsets=(LONG, 512),
        tile_counts=(LONG, 256)), pad_to=1024)[0]
    files["huge-2pow31-wide-one-row.tif"] = tiff(grey_strip((1 << 31) - 1, 1, 512, 256), pad_to=1024)[0]
    files["strip-offset-past-end.tif"] = tiff(grey_strip(16, 16, 100000, 256), pad_to=768)[0]
    files["strip-count-past-end.tif"] = tiff(grey_strip(16, 16, 512, 100000, compression=32773), pad_to=768)[0]
    files["tile-offset-past-end.tif"] = tiff(dict(
        width=(LONG, 16), height=(LONG, 16), bits=(SHORT, 8), compression=(SHORT, 1), photometric=(SHORT, 1),
        spp=(SHORT, 1), tile_width=(LONG, 16), tile_length=(LONG, 16), tile_offsets=(LONG, 100000),
        tile_counts=(LONG, 256)), pad_to=768)[0]
    files["tile-count-past-end.tif"] = tiff(dict(
        width=(LONG, 16), height=(LONG, 16), bits=(SHORT, 8), compression=(SHORT, 8), photometric=(SHORT, 1),
        spp=(SHORT, 1), tile_width=(LONG, 16), tile_length=(LONG, 16), tile_offsets=(LONG, 512),
        tile_counts=(LONG, 0x7FFFFFFF)), pad_to=768)[0]
    files["no-photometric.tif"] = tiff(grey_strip(16, 16, 512, 256, omit=["photometric"]), pad_to=768)[0]
    files["zero-width.tif"] = tiff(grey_strip(0, 16, 512, 256), pad_to=768)[0]
    files["float32-samples.tif"] = tiff(grey_strip(16, 16, 512, 1024, extra=dict(bits=(SHORT, 32), sample_format=(SHORT, 3))), pad_to=1536)[0]
    files["1-bit-samples.tif"] = tiff(grey_strip(16, 16, 512, 32, extra=dict(bits=(SHORT, 1))), pad_to=768)[0]

    good, tiles, start = deflate_tiled()
    # The intact original is a fuzz seed: proof that the reader reads what was broken.
    seed_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "tiff")
    with open(os.path.join(seed_dir, "handmade-ifd-first-deflate-tiled-grey.tif"), "wb") as f:
        f.write(good)
    files["truncated-data.tif"] = good[: start + sum(len(t) for t in tiles) // 2]
    # Byte counts that agree with a file whose Deflate streams were each cut short.
    cut = [t[: len(t) // 2] for t in tiles]
    entries = dict(width=(LONG, 64), height=(LONG, 64), bits=(SHORT, 8), compression=(SHORT, 8), photometric=(SHORT, 1),
                   spp=(SHORT, 1), tile_width=(LONG, 16), tile_length=(LONG, 16),
                   tile_offsets=(LONG, [0] * len(cut)), tile_counts=(LONG, [len(t) for t in cut]))
    _, start_cut = tiff(entries)
    offsets, at = [], start_cut
    for t in cut:
        offsets.append(at)
        at += len(t)
    entries["tile_offsets"] = (LONG, offsets)
    files["truncated-deflate-streams.tif"] = tiff(entries, b"".join(cut))[0]

    # Two layouts `bigtrain make-image` does not write, as further seeds.
    planes = [bytes((x * 16 + y * 3 + c * 50) % 256 for y in range(8) for x in range(16)) for c in range(3)]
    entries = dict(width=(LONG, 16), height=(LONG, 8), bits=(SHORT, [8, 8, 8]), compression=(SHORT, 1),
                   photometric=(SHORT, 2), spp=(SHORT, 3), planar=(SHORT, 2), rows_per_strip=(LONG, 8),
                   strip_offsets=(LONG, [0, 0, 0]), strip_counts=(LONG, [128, 128, 128]))
    _, data_at = tiff(entries)
    entries["strip_offsets"] = (LONG, [data_at, data_at + 128, data_at + 256])
    with open(os.path.join(seed_dir, "handmade-separate-planes-rgb.tif"), "wb") as f:
        f.write(tiff(entries, b"".join(planes))[0])
    white = grey_strip(16, 16, 0, 256, extra=dict(photometric=(SHORT, 0)))
    _, data_at = tiff(white)
    white["strip_offsets"] = (LONG, data_at)
    with open(os.path.join(seed_dir, "handmade-min-is-white-grey.tif"), "wb") as f:
        f.write(tiff(white, bytes(range(256)))[0])

    # Uncompressed YCbCr with 2x2 chroma subsampling: the reader's RGBA path. Each 2x2
    # block is stored as 4 Y samples, then Cb and Cr.
    ycbcr = dict(width=(LONG, 16), height=(LONG, 16), bits=(SHORT, [8, 8, 8]), compression=(SHORT, 1),
                 photometric=(SHORT, 6), spp=(SHORT, 3), rows_per_strip=(LONG, 16), strip_offsets=(LONG, 0),
                 strip_counts=(LONG, 64 * 6), ycbcr_subsampling=(SHORT, [2, 2]))
    _, data_at = tiff(ycbcr)
    ycbcr["strip_offsets"] = (LONG, data_at)
    blocks = b"".join(bytes([60 + i, 70 + i, 80 + i, 90 + i, 100 + i, 150 - i]) for i in range(64))
    with open(os.path.join(seed_dir, "handmade-ycbcr-subsampled.tif"), "wb") as f:
        f.write(tiff(ycbcr, blocks)[0])

    # Seeded byte flips in the compressed data of the valid image: candidates
    # 0..N-1; tests/fuzz/README.md lists which were dropped because they still decode.
    rng = random.Random(2026)
    for n in range(12):
        data = bytearray(good)
        for _ in range(8):
            position = rng.randrange(start, len(data))
            data[position] ^= 1 << rng.randrange(8)
        files[f"byte-flips-{n:02d}.tif"] = bytes(data)

    for name, data in files.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files to {out_dir}")


if __name__ == "__main__":
    main()
