#!/usr/bin/env bash
# Builds and runs the quickstart demo on the default emulated device (v5e).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset gcc -DXTPU_BUILD_TESTS=OFF -DXTPU_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build --preset gcc --target quickstart
./build/gcc/examples/quickstart
