#!/usr/bin/env bash
# Data-parallel `bigtrain run` under mpirun (pipeline/distributed*): 2 ranks train the
# same weights as 1 process with the same global batch (images_per_step), up to the
# order of float additions in the gradient sum; both ranks end with bit-identical
# weights; only rank 0 writes the run directory; a run checkpointed by 2 ranks resumes
# in 1 process and still ends on the single-process weights.
set -euo pipefail
source "$2/tests/cli/lib/scratch.sh"
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
source "$SOURCE/tests/cli/lib/mpi_demo.sh"
mpi_demo_run cpu

"$BIGTRAIN" run run.yaml 2> single.log || { cat single.log; fail "single-process run failed"; }
if ! "${MPIRUN[@]}" -x BIGTRAIN_WEIGHTS_DIGEST_DIR="$tmp/digests" "$BIGTRAIN" run run.yaml \
     --set output.dir=runs/mpi > mpi.log 2>&1; then
  if grep -q "built without MPI" mpi.log; then echo "SKIP: this bigtrain was built without MPI"; exit 77; fi
  cat mpi.log; fail "2-rank run failed"
fi
grep -q "data-parallel: MPI" mpi.log || { cat mpi.log; fail "the 2-rank run did not say it runs data-parallel"; }
grep -q "allreduce .* ms per optimizer step" runs/mpi/log.txt || { cat mpi.log; fail "no communication time in log.txt"; }

# Both ranks hold the same weights, bit for bit (one allreduce result, same update).
[ -s digests/weights.rank0.txt ] && [ -s digests/weights.rank1.txt ] || fail "weight digests missing: $(ls digests)"
cmp -s digests/weights.rank0.txt digests/weights.rank1.txt \
  || fail "ranks disagree: $(cat digests/weights.rank0.txt) vs $(cat digests/weights.rank1.txt)"

# Rank 0 alone writes: one header and (train, val) x 2 + test rows, counting ALL
# images (the ranks' shards gathered), not one rank's half.
[ "$(wc -l < runs/mpi/metrics.csv)" -eq 6 ] || { cat runs/mpi/metrics.csv; fail "metrics.csv rows"; }
images_col=$(head -1 runs/mpi/metrics.csv | tr ',' '\n' | grep -n '^images$' | cut -d: -f1)
[ "$(cut -d, -f2,"$images_col" runs/mpi/metrics.csv | tail -n +2 | tr '\n' ' ')" = "train,10 val,5 train,10 val,5 test,3 " ] \
  || { cat runs/mpi/metrics.csv; fail "metrics rows must count every rank's images"; }
# Sharded validation gathers every image's result: the same accuracy as one process
# and the same mean loss up to the weights' last-bit differences (see below).
paste -d, <(grep ',val,' runs/single/metrics.csv | cut -d, -f3,4) <(grep ',val,' runs/mpi/metrics.csv | cut -d, -f3,4) \
  | awk -F, '{ d = $1 - $3; if (d < 0) d = -d; if (d > 1e-4 || $2 != $4) exit 1 }' \
  || { cat runs/single/metrics.csv runs/mpi/metrics.csv; fail "validation metrics differ"; }

# A run checkpointed by 2 ranks resumes in 1 process (the checkpoint is rank-independent).
"${MPIRUN[@]}" "$BIGTRAIN" run run.yaml --set output.dir=runs/switch --stop-after 1 > switch1.log 2>&1 \
  || { cat switch1.log; fail "2-rank first epoch failed"; }
"$BIGTRAIN" run run.yaml --resume runs/switch 2> switch2.log || { cat switch2.log; fail "1-process resume failed"; }

# Final weights against the single-process run. The only difference is the order of
# float32 additions in each step's gradient sum ((a+b)+(c+d) against ((a+b)+c)+d):
# relative 1e-7 per step, carried through 6 momentum steps. 1e-5 relative (+1e-6
# absolute for weights near 0) is ~100x that and far below one step's update
# (lr 0.05 x gradient), which is what a wrong shard or a doubled gradient changes.
python3 "$SOURCE/tests/cli/lib/compare_weights.py" 1e-5 1e-6 runs/single/checkpoints/last.safetensors \
  runs/mpi/checkpoints/last.safetensors runs/switch/checkpoints/last.safetensors \
  || fail "weights differ from the single-process run"
echo "ok"
