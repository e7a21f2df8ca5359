#!/usr/bin/env bash
# The cost of compiling examples with g++ -O2, best of 3, no ccache: examples/quickstart.cpp
# (target: <= 10 s on the 2-core CI machine) next to its peer measured in the same run — the
# same loop written eagerly with xtensor alone (benchmarks/peers/quickstart_xtensor.cpp) — and
# the training examples (issue 10's targets, -march=native as the presets build them):
# examples/train_mlp.cpp <= 20 s, examples/transformer.cpp <= 60 s. Each example twice: header
# only (the default: the file compiles the runtime too) and with XTPU_SEPARATE_RUNTIME, as
# xtpu's CMake build compiles it (the runtime once, in its own file: timed on its own line).
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
best() {
  local best_s=999999
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    "$cxx" -std=c++20 -O2 ${2:-} -Iinclude -c "$1" -o "$out/o.o"
    t1=$(date +%s.%N)
    best_s=$(awk -v a="$t0" -v b="$t1" -v m="$best_s" 'BEGIN { d = b - a; print (d < m) ? d : m }')
  done
  echo "$best_s"
}
sep=-DXTPU_SEPARATE_RUNTIME
echo '#include <xtpu/runtime.hpp>' > "$out/runtime.cpp"
xtpu_s=$(best examples/quickstart.cpp)
sep_s=$(best examples/quickstart.cpp "$sep")
peer_s=$(best benchmarks/peers/quickstart_xtensor.cpp)
printf '%-58s %8.2f s\n' "xtpu   examples/quickstart.cpp ($cxx -O2)" "$xtpu_s"
printf '%-58s %8.2f s\n' "xtpu   examples/quickstart.cpp, XTPU_SEPARATE_RUNTIME" "$sep_s"
printf '%-58s %8.2f s\n' "peer   xtensor-only quickstart ($cxx -O2)" "$peer_s"
printf '%-58s %8.2f x   (target: xtpu <= 10 s)\n' "ratio  xtpu / xtensor-only" "$(awk -v a="$xtpu_s" -v b="$peer_s" 'BEGIN { print a / b }')"
for ex in train_mlp:20 transformer:60; do
  name=${ex%%:*}
  s=$(best "examples/$name.cpp" -march=native)
  printf '%-58s %8.2f s   (target: <= %s s)\n' "xtpu   examples/$name.cpp ($cxx -O2)" "$s" "${ex##*:}"
  s=$(best "examples/$name.cpp" "-march=native $sep")
  printf '%-58s %8.2f s   (target: <= %s s)\n' "xtpu   examples/$name.cpp, XTPU_SEPARATE_RUNTIME" "$s" "${ex##*:}"
done
printf '%-58s %8.2f s   (once per program)\n' "xtpu   the runtime's file (xtpu/runtime.hpp, -march=native)" \
  "$(best "$out/runtime.cpp" "-march=native $sep")"
