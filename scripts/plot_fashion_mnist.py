#!/usr/bin/env python3
"""Draws README's demo run: the training loss every 10 steps (and its running mean over 100
steps) and each run's test accuracy, from the JSON-lines log examples/fashion_mnist.cpp writes
(one object a line: {"step", "epoch", "loss", "lr"} or {"step", "test_accuracy"}; a --resume run
appends to it).

Usage: plot_fashion_mnist.py LOG.jsonl OUT.png   (Debian's python3-matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_fashion_mnist.py LOG.jsonl OUT.png")
    losses, accuracies = [], []
    with open(sys.argv[1]) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{sys.argv[1]}:{n}: not JSON: {e}")
            if "loss" in r:
                losses.append((r["step"], r["loss"]))
            elif "test_accuracy" in r:
                accuracies.append((r["step"], 100 * r["test_accuracy"]))
    if not losses:
        sys.exit(f"{sys.argv[1]}: no loss records")
    steps, values = zip(*losses)
    window = 10  # records: 100 steps
    mean = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, values, color="#9ecae1", linewidth=0.8, label="training loss (every 10 steps)")
    ax.plot(steps, mean, color="#08519c", linewidth=1.8, label="mean over 100 steps")
    ax.set_xlabel("step (batch of 128)")
    ax.set_ylabel("cross-entropy")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if accuracies:
        acc = ax.twinx()
        a_steps, a_values = zip(*accuracies)
        acc.plot(a_steps, a_values, "o", color="#d94801", label="test accuracy")
        for s, v in accuracies:
            acc.annotate(f"{v:.2f} %", (s, v), textcoords="offset points", xytext=(-40, 8), color="#d94801")
        acc.set_ylabel("test accuracy (%)")
        acc.set_ylim(80, 92)
        lines = ax.get_legend_handles_labels()[0] + acc.get_legend_handles_labels()[0]
        ax.legend(lines, [l.get_label() for l in lines], loc="upper right")
    else:
        ax.legend(loc="upper right")
    ax.set_title("xtpu: MLP 784-512-512-10 on Fashion-MNIST (AdamW, batch 128)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"plot_fashion_mnist: wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
