# Sourced by the scripts that configure a build: a compiler cache, where the machine has
# one, makes rebuilding unchanged files free (clean clones, the sanitizer and fuzz builds).
# Nothing depends on it; without ccache the array is empty.
compiler_cache_args=()
if command -v ccache >/dev/null; then
  compiler_cache_args=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
