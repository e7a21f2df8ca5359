#!/usr/bin/env bash
# Installs what xtpu needs to build, test and run its demo on Debian 12, and nothing that
# is already there. Used by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail

packages=(
  g++ clang cmake ninja-build ccache pkg-config   # toolchains (g++ 12, clang++ 14)
  libxtensor-dev libxsimd-dev libboost-dev zlib1g-dev  # the library's own dependencies
  nlohmann-json3-dev                                # checkpoints' safetensors headers
  libcli11-dev dataset-fashion-mnist                # the examples' command lines; the demo's data
  python-matplotlib-data                            # examples/csv_trends.cpp's table (a CSV file)
  python3                                           # the checkpoint test's independent safetensors peer
  libgtest-dev libbenchmark-dev                     # tests and benchmarks
  libopenmpi-dev openmpi-bin                         # xtpu/dist/mpi.hpp's test and example (mpirun)
  libdnnl-dev libopenblas-dev libeigen3-dev          # the peers benchmarks/bench_matmul runs next to xtpu
  ocl-icd-opencl-dev opencl-c-headers                # what Debian's dnnl CMake config loads (only Recommended)
  "$@"                                              # extra packages a caller asks for
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "xtpu setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
