# Sourced first by the CLI test scripts, which CTest runs as
# `bash script.sh BIGTRAIN SOURCE_DIR`: the two paths, `fail`, a scratch directory
# that becomes the working directory and is removed on exit, and `demo_data`, the
# tiny MNIST canvases most of these tests train on (made in ./data from the digits
# checked in under tests/data/mnist, so the tests run offline).
BIGTRAIN=$1
SOURCE=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# demo_data MAKE_DEMO_DATA_OPTIONS...  e.g. demo_data --size 128 --classes 0,1 --train 4 --tile 64
demo_data() {
  "$BIGTRAIN" make-demo-data --out data --mnist "$SOURCE/tests/data/mnist" "$@" >/dev/null 2>&1 ||
    fail "make-demo-data $* failed"
}
