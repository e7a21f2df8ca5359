#!/usr/bin/env python3
"""Plots GFLOP/s against size for every implementation in bench_matmul's CSV (square shapes),
one panel per thread count. Usage: plot_matmul.py matmul.csv out.png"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
square = [r for r in rows if r["shape"].endswith("^3")]
impls = sorted({r["impl"] for r in square}, key=lambda s: (not s.startswith("xtpu"), s))
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
for ax, threads in zip(axes, ("1", "2")):
    for impl in impls:
        pts = sorted((int(r["shape"].split("^")[0]), float(r["gflops"])) for r in square
                     if r["impl"] == impl and r["threads"] == threads)
        if pts:
            style = "-o" if impl.startswith("xtpu") else "--."
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=impl)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M = N = K")
    ax.set_title(f"{threads} thread{'s' if threads != '1' else ''}")
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("GFLOP/s")
axes[1].legend(fontsize=8, loc="lower right")
fig.suptitle("matmul: xtpu's MXU emulator vs oneDNN, OpenBLAS, Eigen (same run)")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print("wrote", sys.argv[2])
