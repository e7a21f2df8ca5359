#!/usr/bin/env bash
# Builds every test with g++ 12 and clang++ 14 (warnings are errors) and runs them with CTest,
# then the run-time tests under ASan+UBSan (threaded ones at 1, 2, 4, 8, 16 threads; the gradient
# tests but the checkpoint one without UBSan's alignment, null and vptr checks,
# tests/CMakeLists.txt) and the
# threaded ones under TSan (at those counts). Each preset has its own build tree and sets every
# option itself, so whatever an earlier demo, benchmark or hand configure left in build/ cannot
# change what runs here.
# Fails when a preset ran fewer tests than the source tree defines.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
# ccache (CMakeLists.txt uses it when installed) keys on paths relative to the checkout, so a
# second clone or a moved checkout reuses the first one's objects instead of compiling again
# (debug info of a sanitizer build hit from another clone names that clone's folder)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd -P)}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

count() { find "$1" -maxdepth 1 -name "$2" | wc -l; }
runtime=$(count tests/runtime 'test_*.cpp')
# the sanitizer presets run each threaded test at 5 thread counts (tests/CMakeLists.txt)
threaded=$(sed -n 's/^set(xtpu_threaded_tests \(.*\))$/\1/p' tests/CMakeLists.txt | wc -w)
# and TSan runs these once each
tsan_once=$(sed -n 's/^set(xtpu_tsan_once_tests \(.*\))$/\1/p' tests/CMakeLists.txt | wc -w)
# run-time tests + compile-fail twins (one ko per file, one ok for them all) + examples + the
# cross-compiler, build-flag, package and layer-rule tests + the MPI tests (2 and 3 ranks, and
# the group made before MPI_Init)
full=$((runtime + $(count tests/compile_fail '*.cpp') + 1 + $(count examples '*.cpp') + 4 + 3))

run_preset() {  # preset, the fewest tests it must run, [a command to run ctest under]
  local preset=$1 floor=$2 wrap=${3:-} log="build/$1.ctest.log"
  echo "=== xtpu tests with the '$preset' preset"
  cmake --preset "$preset" -DXTPU_WERROR=ON >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  mkdir -p build
  $wrap ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$log"
  local ran
  ran=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  if [ -z "$ran" ] || [ "$ran" -lt "$floor" ]; then
    echo "xtpu tests: the '$preset' preset ran ${ran:-no} tests; the source tree defines at least $floor" >&2
    exit 1
  fi
  echo "=== '$preset': $ran tests passed (at least $floor expected)"
}

run_preset gcc "$full"
run_preset clang "$full"
run_preset asan $((runtime + 4 * threaded))
# GCC 12's TSan cannot map its shadow memory when the kernel randomises mmap with more than
# 28 bits (newer kernels' default): run its tests with address randomisation off
run_preset tsan $((5 * threaded + tsan_once)) "setarch $(uname -m) -R"
