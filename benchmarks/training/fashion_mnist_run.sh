#!/usr/bin/env bash
# README's demo next to its PyTorch twin, one run: examples/fashion_mnist.cpp (xtpu) and
# benchmarks/peers/fashion_mnist_torch.py (PyTorch eager, fp32) train the same MLP with the same
# recipe for one epoch of Fashion-MNIST, at each thread count given (default: 1 2). Prints each
# one's test accuracy and samples/s after warm-up, and the ratio of the rates.
# Usage (from anywhere): bash benchmarks/training/fashion_mnist_run.sh [THREADS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh python3-torch python3-numpy
cmake --preset gcc >/dev/null
cmake --build --preset gcc --target fashion_mnist >/dev/null
export OMP_WAIT_POLICY=PASSIVE  # (Debian's torch spins in libgomp on 2 cores without it)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for T in ${@:-1 2}; do
  export XTPU_NUM_THREADS=$T OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T
  x=$(build/gcc/examples/fashion_mnist --checkpoint "$work/x.safetensors" | grep -m1 'samples/s after warm-up')
  p=$(/usr/bin/python3 benchmarks/peers/fashion_mnist_torch.py "$T")
  xr=$(sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' <<<"$x"); xa=$(sed -n 's/.*accuracy \([0-9.]*\) %.*/\1/p' <<<"$x")
  pr=$(sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' <<<"$p"); pa=$(sed -n 's/.*accuracy \([0-9.]*\) %.*/\1/p' <<<"$p")
  printf 'threads %s  samples/s: xtpu %s  torch %s  ratio %.2f   test accuracy: xtpu %s %%  torch %s %%\n' \
    "$T" "$xr" "$pr" "$(awk -v x="$xr" -v p="$pr" 'BEGIN{print x/p}')" "$xa" "$pa"
done
