#!/usr/bin/env bash
# Builds every test with g++ 12 and clang++ 14 (warnings are errors) and runs them with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
for preset in gcc clang; do
  echo "=== xtpu tests with the '$preset' preset"
  cmake --preset "$preset" -DXTPU_WERROR=ON >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done
