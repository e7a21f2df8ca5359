#!/usr/bin/env bash
# Runs xtpu's benchmarks next to their peers and plots the matmul suite:
#   build/gcc/benchmarks/matmul.csv, docs/img/matmul.png, and the tables on stdout;
# the loop suite against a hand loop, op by op, xtensor + xsimd and PyTorch (the table and
# docs/img/loops.png of docs/benchmarks.md, from build/gcc/benchmarks/loops.json and torch_loops.json);
# the ulp table of docs/numerics.md (every 16th float); and, when the seeds' workload is
# beside the project (../shared/workloads/mlp), xtpu vs PyTorch vs LibTorch on it; the training
# workload (gradients by autodiff, SGD and AdamW) against PyTorch (benchmarks/training/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# the peers: matplotlib for the plot; PyTorch, LibTorch and Fashion-MNIST for the workload
bash scripts/setup.sh python3-matplotlib python3-torch python3-numpy libtorch-dev dataset-fashion-mnist
cmake --preset gcc >/dev/null
cmake --build --preset gcc --target bench_mark_step bench_loops bench_matmul ulp_sweep
./build/gcc/benchmarks/bench_mark_step
./build/gcc/benchmarks/bench_loops --benchmark_min_time=0.2 --benchmark_out=build/gcc/benchmarks/loops.json \
  --benchmark_out_format=json
/usr/bin/python3 benchmarks/peers/torch_loops.py build/gcc/benchmarks/torch_loops.json
/usr/bin/python3 scripts/loops_table.py build/gcc/benchmarks/loops.json build/gcc/benchmarks/torch_loops.json
/usr/bin/python3 scripts/plot_loops.py docs/img/loops.png build/gcc/benchmarks/loops.json build/gcc/benchmarks/torch_loops.json
./build/gcc/benchmarks/bench_matmul --benchmark_color=false --csv=build/gcc/benchmarks/matmul.csv
/usr/bin/python3 scripts/plot_matmul.py build/gcc/benchmarks/matmul.csv docs/img/matmul.png
bash benchmarks/compile_time.sh
./build/gcc/benchmarks/ulp_sweep 16
if [ -f ../shared/workloads/mlp/run.sh ]; then bash ../shared/workloads/mlp/run.sh 1 2; fi
bash benchmarks/training/run.sh 1 2
