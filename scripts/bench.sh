#!/usr/bin/env bash
# Runs xtpu's benchmarks next to their peers and plots the matmul suite:
#   build/gcc/benchmarks/matmul.csv, docs/img/matmul.png, and the tables on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh python3-matplotlib
cmake --preset gcc >/dev/null
cmake --build --preset gcc --target bench_mark_step bench_matmul
./build/gcc/benchmarks/bench_mark_step
./build/gcc/benchmarks/bench_matmul --benchmark_color=false --csv=build/gcc/benchmarks/matmul.csv
/usr/bin/python3 scripts/plot_matmul.py build/gcc/benchmarks/matmul.csv docs/img/matmul.png
bash benchmarks/compile_time.sh
