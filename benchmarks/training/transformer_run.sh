#!/usr/bin/env bash
# The transformer workload of docs/training.md, one run, peers side by side: transformer_train
# (xtpu: one causal pre-norm block, d 256, 4 heads, batch 8 x 128, forward + backward + AdamW)
# against its PyTorch eager twin (transformer_train_torch.py), fp32 and — where the CPU has
# native bf16 (avx512_bf16 or amx_bf16) — bf16 autocast, at each thread count given (default:
# 1 2). Prints ms per step and the ratio xtpu / PyTorch (target: <= 0.7). Then the same for
# transformer_infer (a 12-block stack's inference, 1 x 128 tokens: the packed-operand cache's
# case) against transformer_infer_torch.py.
# Usage (from anywhere): bash benchmarks/training/transformer_run.sh [THREADS...]   Environment: WINDOWS (7).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh python3-torch
cmake --preset gcc >/dev/null
cmake --build --preset gcc --target transformer_train transformer_infer >/dev/null
export OMP_WAIT_POLICY=PASSIVE  # (Debian's torch spins in libgomp on 2 cores without it)
windows=${WINDOWS:-7}
median() { grep -o 'median [0-9.]*' | awk '{print $2}'; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
kinds=fp32
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && kinds="fp32 bf16"
for bench in train infer; do
  for T in ${@:-1 2}; do
    export XTPU_NUM_THREADS=$T OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T
    x=$(build/gcc/benchmarks/training/transformer_$bench "$windows" | median)
    for kind in $kinds; do
      p=$(/usr/bin/python3 benchmarks/training/transformer_${bench}_torch.py "$T" "$windows" "$kind" | median)
      printf '%s threads %s  ms per step: xtpu %s  torch %s %s  ratio %.3f%s\n' \
        "$bench" "$T" "$x" "$kind" "$p" "$(awk -v x="$x" -v p="$p" 'BEGIN{print x/p}')" "$([ $bench = train ] && echo ' (target <= 0.7)')"
    done
  done
done
