"""Shared by scripts/bench_tiler and scripts/measure_tiler_rss: finds the build and
writes (once, cached under .cache/tiler) the synthetic TIFFs they measure."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_dir():
    return ROOT / os.environ.get("BIGTRAIN_BUILD_DIR", "build")


def ensure_built(targets):
    """Builds only the targets the script needs (scripts/setup first on a fresh machine);
    BIGTRAIN_NO_BUILD=1 measures the build as it is."""
    build = build_dir()
    if os.environ.get("BIGTRAIN_NO_BUILD") == "1":
        return
    if not (build / "build.ninja").exists():
        subprocess.run([str(ROOT / "scripts" / "setup")], check=True)
    jobs = os.environ.get("BIGTRAIN_JOBS", str(os.cpu_count() or 1))
    subprocess.run(["ninja", "-C", str(build), "-j", jobs, *targets], check=True, stdout=subprocess.DEVNULL)


def bigtrain():
    return str(build_dir() / "pipeline" / "bigtrain")


def synthetic_tiff(size, compression="deflate", tile=256):
    """A tiled synthetic TIFF of size x size, written by `bigtrain make-image` once."""
    cache = ROOT / ".cache" / "tiler"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"synthetic_{size}x{size}_{compression}_t{tile}.tif"
    if not path.exists():
        print(f"writing {path.name} (once; later runs reuse it)", file=sys.stderr, flush=True)
        subprocess.run([bigtrain(), "make-image", str(path), "--size", f"{size}x{size}", "--tile", str(tile),
                        "--compression", compression, "--seed", "1"], check=True)
    return path


def warm_page_cache(path):
    """Reads the file once so every measurement starts with it in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_with_rusage(command):
    """Runs command and returns (stdout, peak RSS MB) using os.wait4 on that child."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.dup2(write_fd, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        try:
            os.execv(command[0], command)
        finally:
            os._exit(127)
    os.close(write_fd)
    chunks = []
    with os.fdopen(read_fd) as out:
        for line in out:
            chunks.append(line)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed with status {os.waitstatus_to_exitcode(status)}")
    return "".join(chunks), usage.ru_maxrss / 1024.0  # Linux: KiB
