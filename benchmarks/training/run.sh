#!/usr/bin/env bash
# The training workload of docs/training.md, one run, peers side by side: mlp_train (xtpu,
# gradients by xtpu::backward) against its PyTorch eager twin (mlp_train_torch.py, fp32), with
# SGD and with AdamW, at each thread count given (default: 1 2). Prints samples/s and the ratio
# xtpu / PyTorch (target: >= 1.3). The seeds' hand-written step and LibTorch (SGD) are in
# ../shared/workloads/mlp/run.sh, which scripts/bench.sh runs when it is beside the project.
# Usage (from anywhere): bash benchmarks/training/run.sh [THREADS...]   Environment: WINDOWS (7).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh python3-torch python3-numpy dataset-fashion-mnist
cmake --preset gcc >/dev/null
cmake --build --preset gcc --target mlp_train >/dev/null
data=$PWD/build/gcc/benchmarks/fashion-mnist
mkdir -p "$data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do
  [ -s "$data/$f" ] || zcat "/usr/share/datasets/fashion-mnist/$f.gz" > "$data/$f"
done
export FASHION_DIR=$data OMP_WAIT_POLICY=PASSIVE  # (Debian's torch spins in libgomp on 2 cores without it)
windows=${WINDOWS:-7}
median() { grep -o 'median [0-9.]*' | awk '{print $2}'; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
for T in ${@:-1 2}; do
  export XTPU_NUM_THREADS=$T OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T
  for opt in sgd adamw; do
    x=$(build/gcc/benchmarks/training/mlp_train "$opt" "$windows" | median)
    p=$(/usr/bin/python3 benchmarks/training/mlp_train_torch.py "$opt" "$T" "$windows" | median)
    printf 'threads %s  %-5s  train samples/s: xtpu %s  torch %s  ratio %.3f (target >= 1.3)\n' \
      "$T" "$opt" "$x" "$p" "$(awk -v x="$x" -v p="$p" 'BEGIN{print x/p}')"
  done
done
