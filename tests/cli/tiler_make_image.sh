#!/usr/bin/env bash
# `bigtrain make-image`: the same seed gives the same file, another seed another
# image; nothing but the finished file is left behind; bad sizes are errors.
set -euo pipefail
bigtrain=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bigtrain" make-image "$work/a.tif" --size 513x257 --tile 64 --seed 7
"$bigtrain" make-image "$work/b.tif" --size 513x257 --tile 64 --seed 7
"$bigtrain" make-image "$work/c.tif" --size 513x257 --tile 64 --seed 8
cmp -s "$work/a.tif" "$work/b.tif" || { echo "same seed, different files"; exit 1; }
if cmp -s "$work/a.tif" "$work/c.tif"; then echo "different seeds, same file"; exit 1; fi
[ "$(ls -A "$work" | wc -l)" -eq 3 ] || { echo "leftover files:"; ls -A "$work"; exit 1; }

if "$bigtrain" make-image "$work/d.tif" --size 0x100 2>"$work/err"; then echo "accepted size 0x100"; exit 1; fi
grep -q "d.tif" "$work/err" || { cat "$work/err"; exit 1; }
if "$bigtrain" make-image "$work/e.tif" --size big 2>"$work/err"; then echo "accepted size 'big'"; exit 1; fi
grep -q "WIDTHxHEIGHT" "$work/err" || { cat "$work/err"; exit 1; }
[ ! -e "$work/d.tif" ] && [ ! -e "$work/e.tif" ] || { echo "a failed make-image left a file"; exit 1; }
echo "ok"
