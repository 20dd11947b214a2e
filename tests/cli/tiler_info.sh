#!/usr/bin/env bash
# `bigtrain info`: header facts of striped, tiled, BigTIFF and pyramid TIFFs, as
# text and JSON, and a clear error naming the file for what is not an image.
set -euo pipefail
bigtrain=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

expect_json() {  # file, then the fragments its `info --json` must contain
  local file=$1 json
  shift
  json=$("$bigtrain" info "$file" --json)
  for want in "$@"; do
    grep -qF -- "$want" <<<"$json" || { echo "info --json of $file lacks $want: $json"; exit 1; }
  done
}

"$bigtrain" make-image "$work/striped.tif" --size 301x203 --strip 16 --compression lzw --bits 16 --channels 1
expect_json "$work/striped.tif" '"width":301' '"height":203' '"channels":1' '"bits":16' '"format":"tiff"' \
  '"layout":"striped"' '"rows_per_strip":16' '"compression":"lzw"' '"photometric":"min-is-black"'

"$bigtrain" make-image "$work/pyramid.tif" --size 1000x600 --tile 128 --levels 3 --bigtiff --compression jpeg
expect_json "$work/pyramid.tif" '"format":"bigtiff"' '"channels":3' '"bits":8' '"photometric":"ycbcr"' \
  '"layout":"tiled"' '"tile_width":128' '"compression":"jpeg"' '"width":500}' '"width":250}' '"height":150,'
levels=$("$bigtrain" info "$work/pyramid.tif" --json | grep -o '"downsample"' | wc -l)
[ "$levels" -eq 3 ] || { echo "expected 3 levels, got $levels"; exit 1; }
"$bigtrain" info "$work/pyramid.tif" | grep -q "level 2:  250 x 150 (downsample 4), tiled 128x128, jpeg" \
  || { echo "text output lacks level 2:"; "$bigtrain" info "$work/pyramid.tif"; exit 1; }

printf 'this is not an image' >"$work/notes.tif"
if "$bigtrain" info "$work/notes.tif" 2>"$work/err"; then echo "info accepted a text file"; exit 1; fi
grep -q "notes.tif: not a supported image" "$work/err" || { echo "unclear error:"; cat "$work/err"; exit 1; }
if "$bigtrain" info "$work/missing.tif" 2>"$work/err"; then echo "info accepted a missing file"; exit 1; fi
grep -q "missing.tif: cannot open" "$work/err" || { echo "unclear error:"; cat "$work/err"; exit 1; }
echo "ok"
