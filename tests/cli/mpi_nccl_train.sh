#!/usr/bin/env bash
# The GPU path of data-parallel `bigtrain run` (pipeline/distributed_nccl*): 2 ranks on
# 2 GPUs sum their gradients on the devices with NCCL and end on the weights of 1
# process on 1 GPU with the same global batch, up to the order of float additions;
# both ranks hold bit-identical weights. NCCL refuses two ranks on one GPU, so this
# needs 2 CUDA devices and skips (77) without them or without NCCL in the build.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
devices=$("$BIGTRAIN" devices --json) || fail "bigtrain devices failed"
field() { python3 -c "import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ''))" "$devices" "$1"; }
[ "$(field nccl_compiled)" = "True" ] || { echo "SKIP: this bigtrain was built without NCCL (needs CUDA, MPI and NCCL at configure time)"; exit 77; }
count=$(field cuda_devices)
[ "$count" -ge 2 ] || { echo "SKIP: hardware: $count CUDA device(s) here; NCCL needs one GPU per rank, this test 2 ($(field cuda_unavailable_reason))"; exit 77; }
source "$SOURCE/tests/cli/lib/mpi_demo.sh"
mpi_demo_run cuda

"$BIGTRAIN" run run.yaml 2> single.log || { cat single.log; fail "single-process GPU run failed"; }
"${MPIRUN[@]}" -x BIGTRAIN_WEIGHTS_DIGEST_DIR="$tmp/digests" "$BIGTRAIN" run run.yaml --set output.dir=runs/nccl \
  > nccl.log 2>&1 || { cat nccl.log; fail "2-rank GPU run failed"; }
grep -q "gradient allreduce: NCCL [0-9.]* over 2 ranks on cuda:" nccl.log \
  || { cat nccl.log; fail "the 2-rank run did not sum its gradients with NCCL"; }
grep -q "allreduce .* ms per optimizer step" runs/nccl/log.txt || { cat nccl.log; fail "no communication time in log.txt"; }

[ -s digests/weights.rank0.txt ] && [ -s digests/weights.rank1.txt ] || fail "weight digests missing: $(ls digests)"
cmp -s digests/weights.rank0.txt digests/weights.rank1.txt \
  || fail "ranks disagree: $(cat digests/weights.rank0.txt) vs $(cat digests/weights.rank1.txt)"

# Against the single-process GPU run. As on the CPU, the gradient sums add in a
# different order ((a+b)+(c+d) against ((a+b)+c)+d, and NCCL's ring adds the ranks'
# halves in its own order): relative 1e-7 per step over 6 momentum steps; cuDNN's
# deterministic float32 algorithms add nothing run to run. 1e-5 relative (+1e-6
# absolute near 0) is ~100x that and far below one step's update (lr 0.05 x gradient).
python3 "$SOURCE/tests/cli/lib/compare_weights.py" 1e-5 1e-6 runs/single/checkpoints/last.safetensors \
  runs/nccl/checkpoints/last.safetensors || fail "weights differ from the single-process GPU run"

# The same job with BIGTRAIN_NCCL=0 takes MPI over host copies, and agrees too.
"${MPIRUN[@]}" -x BIGTRAIN_NCCL=0 "$BIGTRAIN" run run.yaml --set output.dir=runs/host > host.log 2>&1 \
  || { cat host.log; fail "2-rank GPU run over host copies failed"; }
grep -q "NCCL not used (BIGTRAIN_NCCL=0)" host.log || { cat host.log; fail "BIGTRAIN_NCCL=0 was not honoured"; }
python3 "$SOURCE/tests/cli/lib/compare_weights.py" 1e-5 1e-6 runs/single/checkpoints/last.safetensors \
  runs/host/checkpoints/last.safetensors || fail "host-copy weights differ from the single-process GPU run"
echo "ok"
