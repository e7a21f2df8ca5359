#!/usr/bin/env bash
# Builds and runs the demo — the seeds' MLP trained on Fashion-MNIST for one epoch on the default
# emulated device (v5e), then its test accuracy and metrics report — in its own build tree
# (build/demo), so it never changes what the test command builds. Arguments go to the program
# (e.g. --epochs 3; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset demo >/dev/null
cmake --build --preset demo --target fashion_mnist
./build/demo/examples/fashion_mnist "$@"
