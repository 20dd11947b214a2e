#!/usr/bin/env bash
# `bigtrain tiles`: grid counts per border policy, levels and downsampling,
# background filtering with a preview, lossless tile dumps (8- and 16-bit) and
# clear errors for impossible grids.
set -euo pipefail
bigtrain=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() {  # JSON text, key -> value (numbers only)
  grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | head -1 | cut -d: -f2
}
expect() {  # what, got, want
  [ "$2" = "$3" ] || { echo "$1: got $2, want $3"; exit 1; }
}

"$bigtrain" make-image "$work/slide.tif" --size 700x500 --tile 128 --levels 2 --seed 3

# Stride 112: columns 0..672 (7), rows 0..448 (5); shift moves the last ones inward.
json=$("$bigtrain" tiles "$work/slide.tif" --tile 128 --overlap 16 --border shift --json)
expect "shift tiles" "$(field "$json" tiles)" 35
json=$("$bigtrain" tiles "$work/slide.tif" --tile 128 --overlap 16 --border drop --json)
expect "drop tiles" "$(field "$json" tiles)" 24
expect "drop dropped_border" "$(field "$json" dropped_border)" 11
# Half resolution, from level 1 as stored or as a downsample factor: 350 x 250.
for how in "--level 1" "--downsample 2"; do
  json=$("$bigtrain" tiles "$work/slide.tif" --tile 64 --overlap 0 $how --json)
  expect "$how width" "$(field "$json" width)" 350
  expect "$how tiles" "$(field "$json" tiles)" 24
done

# Background filter + preview + dump: every kept tile is dumped, named by place.
json=$("$bigtrain" tiles "$work/slide.tif" --tile 128 --overlap 0 --min-foreground 0.5 \
  --preview "$work/preview.png" --dump "$work/tiles" --json)
tiles=$(field "$json" tiles) kept=$(field "$json" kept) dropped=$(field "$json" dropped_background)
expect "kept + dropped" "$((kept + dropped))" "$tiles"
[ "$kept" -gt 0 ] && [ "$dropped" -gt 0 ] || { echo "expected both tissue and background tiles: $json"; exit 1; }
expect "dumped files" "$(ls "$work/tiles" | wc -l)" "$kept"
bad_names=$(ls "$work/tiles" | grep -cvE '^r[0-9]+_c[0-9]+_x[0-9]+_y[0-9]+\.png$' || true)
expect "badly named dumps" "$bad_names" 0
expect "preview signature" "$(head -c 4 "$work/preview.png" | od -An -tx1 | tr -d ' \n')" 89504e47
# A dumped tile is a 128x128 8-bit RGB PNG (IHDR: width, height, depth 8, colour type 2).
first=$(ls "$work/tiles" | head -1)
expect "dump IHDR" "$(od -An -tx1 -j16 -N10 "$work/tiles/$first" | tr -d ' \n')" 00000080000000800802
# Names carry the tile's place: with overlap 0, x = col * 128 and y = row * 128.
for name in $(ls "$work/tiles"); do
  IFS=_ read -r r c x y <<<"${name%.png}"
  [ "${x#x}" -eq $((${c#c} * 128)) ] && [ "${y#y}" -eq $((${r#r} * 128)) ] || { echo "misplaced name $name"; exit 1; }
done

# 16-bit grey stays 16-bit: IHDR depth 16, colour type 0.
"$bigtrain" make-image "$work/grey16.tif" --size 200x100 --strip 8 --bits 16 --channels 1
"$bigtrain" tiles "$work/grey16.tif" --tile 64 --overlap 0 --border drop --dump "$work/grey16" >/dev/null
expect "16-bit dumps" "$(ls "$work/grey16" | wc -l)" 3
expect "16-bit IHDR" "$(od -An -tx1 -j16 -N10 "$work/grey16/r0_c1_x64_y0.png" | tr -d ' \n')" 00000040000000401000

json=$("$bigtrain" tiles "$work/slide.tif" --tile 128 --overlap 0 --read --threads 2 --json)
grep -q '"tiles_per_second":' <<<"$json" || { echo "--read reports no rate: $json"; exit 1; }

if "$bigtrain" tiles "$work/slide.tif" --tile 128 --overlap 128 2>"$work/err"; then echo "accepted overlap = tile"; exit 1; fi
grep -q "overlap" "$work/err" || { cat "$work/err"; exit 1; }
if "$bigtrain" tiles "$work/slide.tif" --tile 128 --level 5 2>"$work/err"; then echo "accepted level 5"; exit 1; fi
grep -q "slide.tif: level 5 does not exist" "$work/err" || { cat "$work/err"; exit 1; }
echo "ok"
