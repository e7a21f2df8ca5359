#!/usr/bin/env python3
"""Plots the loop suite of docs/benchmarks.md: for every workload, peer time / xtpu time against
each peer (above 1, xtpu is faster), one panel per thread count; lines at 1 and at 0.9 (the
hand-loop target).

Usage: plot_loops.py OUT.png FILE.json [FILE.json ...]   (bench_loops' and torch_loops.py's JSON)
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from loops_table import PEERS, load  # noqa: E402  the one reader of the JSON files

LABEL = {"hand": "hand loop (-O3 -march=native)", "xtensor": "xtensor 0.24 + xsimd",
         "op_by_op": "op by op (temporaries)", "torch": "PyTorch CPU"}


def main():
    out, times = sys.argv[1], load(sys.argv[2:])
    rows = []  # (workload label, threads, {peer: ratio})
    for name in times:
        op, size, impl, threads = name.split("/")
        if impl != "xtpu":
            continue
        ratios = {p: times[f"{op}/{size}/{p}/{threads}"] / times[name]
                  for p, _ in PEERS if f"{op}/{size}/{p}/{threads}" in times}
        rows.append((f"{op}\n{size}", threads.split(":")[1], ratios))
    thread_counts = sorted({t for _, t, _ in rows})
    fig, axes = plt.subplots(len(thread_counts), 1, figsize=(13, 4.2 * len(thread_counts)), squeeze=False)
    width = 0.8 / len(PEERS)
    for ax, t in zip(axes[:, 0], thread_counts):
        mine = [r for r in rows if r[1] == t]
        for k, (peer, _) in enumerate(PEERS):
            xs = [i + (k - (len(PEERS) - 1) / 2) * width for i, r in enumerate(mine) if peer in r[2]]
            ys = [r[2][peer] for r in mine if peer in r[2]]
            ax.bar(xs, ys, width, label=LABEL[peer])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(0.9, color="gray", linewidth=0.8, linestyle="--")
        ax.set_yscale("log")
        ax.set_xticks(range(len(mine)), [r[0] for r in mine], fontsize=8)
        ax.set_ylabel("peer time / xtpu time")
        ax.set_title(f"{t} thread{'s' if t != '1' else ''} (above 1: xtpu faster; dashed: 0.9, the hand-loop target)")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8, ncol=4, loc="upper left")
    fig.suptitle("fused loops: xtpu against a hand loop, xtensor + xsimd, op by op and PyTorch (same machine)")
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main()
