#!/usr/bin/env python3
"""The table of docs/benchmarks.md from bench_loops' and torch_loops.py's JSON files.

Usage: loops_table.py FILE.json [FILE.json ...]
Each cell is peer time / xtpu time: above 1, xtpu is faster. The issue's targets are marked:
>= 0.9x the hand loop, >= 3x op by op at DRAM size, ahead of PyTorch (a * after a miss).
"""
import json
import sys

UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
PEERS = [("hand", 0.9), ("xtensor", None), ("op_by_op", 3.0), ("torch", 1.0)]


def load(paths):
    times = {}
    for path in paths:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("run_type", "iteration") != "iteration":
                    continue
                times[b["name"].removesuffix("/real_time")] = b["real_time"] * UNIT[b.get("time_unit", "ns")]
    return times


def main():
    times = load(sys.argv[1:])
    keys = []
    for name in times:
        op, size, _, threads = name.split("/")
        if (op, size, threads) not in keys:
            keys.append((op, size, threads))
    print("| workload | size | threads | xtpu | vs hand | vs xtensor+xsimd | vs op by op | vs PyTorch |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for op, size, threads in keys:
        x = times.get(f"{op}/{size}/xtpu/{threads}")
        if x is None:
            continue
        cells = []
        for peer, target in PEERS:
            t = times.get(f"{op}/{size}/{peer}/{threads}")
            if t is None:
                cells.append("–")
                continue
            r = t / x
            miss = target is not None and (peer != "op_by_op" or size == "DRAM") and r < target
            cells.append(f"{r:.2f}×" + (" *" if miss else ""))
        us = f"{x / 1e3:.2f} µs" if x < 1e6 else f"{x / 1e6:.2f} ms"
        print(f"| {op} | {size} | {threads.split(':')[1]} | {us} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
