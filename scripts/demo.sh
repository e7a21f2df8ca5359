#!/usr/bin/env bash
# Builds and runs the demo — the seeds' MLP trained on Fashion-MNIST for one epoch on the default
# emulated device (v5e), then its test accuracy and metrics report — in its own build tree
# (build/demo), so it never changes what the test command builds. Arguments go to the program
# (e.g. --epochs 3, --resume; --help lists them). Then it draws the loss curve and the test
# accuracy into build/demo/fashion_mnist.png (Debian's python3-matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh python3-matplotlib
cmake --preset demo >/dev/null
cmake --build --preset demo --target fashion_mnist
./build/demo/examples/fashion_mnist "$@"
case " $* " in *" --help "*|*" -h "*) exit 0 ;; esac
# the loss curve and the test accuracy of every run so far, from the log the program wrote
/usr/bin/python3 scripts/plot_fashion_mnist.py build/demo/examples/fashion_mnist.jsonl build/demo/fashion_mnist.png
