# Sourced by the data-parallel CLI tests (mpi_train, mpi_nccl_train) after
# lib/scratch.sh; not a test itself. MPIRUN starts 2 ranks; `mpi_demo_run DEVICE`
# makes the demo data and the run.yaml both tests train, on DEVICE (cpu or cuda),
# writing into runs/single unless --set output.dir says otherwise.
# CI runs as root; Open MPI refuses root without both of these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)

mpi_demo_run() {
  demo_data --size 192 --classes 2,7 --train 10 --val 5 --test 3 --tile 64
  # 10 images, 4 per step: steps of 4, 4, 2 images; with 2 ranks, 2+2, 2+2, 1+1.
  # SGD with momentum, so a wrong gradient in one step shows in all later weights.
  cat > run.yaml <<YAML
data: {train: data/train.csv, val: data/val.csv, test: data/test.csv, mean: [0.05], std: [0.2]}
tiler: {tile: 64, overlap: 0, border: shift}
model: {preset: small, in_channels: 1, width: 0.25, stem: {kernel: 5, stride: 2, maxpool: false}}
aggregator: {kind: attention, hidden: 8}
train: {epochs: 2, images_per_step: 4, tile_batch: 5, optimizer: sgd, lr: 0.05, momentum: 0.9, seed: 3, freeze_bn: true}
device: {type: $1, threads: 1}
output: {dir: runs/single}
YAML
}
