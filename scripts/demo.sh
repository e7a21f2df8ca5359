#!/usr/bin/env bash
# Builds and runs the quickstart demo on the default emulated device (v5e), in its own build
# tree (build/demo), so it never changes what the test command builds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset demo >/dev/null
cmake --build --preset demo --target quickstart
./build/demo/examples/quickstart
