#!/usr/bin/env python3
"""PyTorch CPU on bench_loops' workloads (same names, same shapes, same thread counts).

Usage: torch_loops.py OUT.json [--threads 1 2] [--filter SUBSTRING]
Writes Google Benchmark's JSON layout (benchmarks[].name/real_time/time_unit) so
scripts/loops_table.py reads it as it reads bench_loops' own output. Each figure is the
median of 7 timed batches of at least 0.1 s each, after a warm-up.
"""
import argparse
import json
import statistics
import time

import torch

LN_EPS, LR, B1, B2, ADAM_EPS, WD = 1e-5, 1e-3, 0.9, 0.999, 1e-8, 0.01


def gen(k, shape, scale=1.0):
    g = torch.Generator().manual_seed(1000 + k)
    return torch.randn(*shape, generator=g) * scale


def chain(rows, cols, bcast):
    a, b, d = gen(0, (rows, cols)), gen(1, (rows, cols)), gen(3, (rows, cols))
    c = gen(2, (cols,)) if bcast else gen(2, (rows, cols))
    return lambda: torch.relu(a * b + c) * d


def softmax(rows, cols):
    x = gen(0, (rows, cols))
    return lambda: torch.softmax(x, dim=1)


def layer_norm(rows, cols):
    x, g, b = gen(0, (rows, cols)), gen(1, (cols,)), gen(2, (cols,))
    return lambda: torch.nn.functional.layer_norm(x, (cols,), g, b, LN_EPS)


def adamw(rows, cols):
    p = torch.nn.Parameter(gen(0, (rows, cols), 0.02))
    p.grad = gen(1, (rows, cols), 0.001)
    opt = torch.optim.AdamW([p], lr=LR, betas=(B1, B2), eps=ADAM_EPS, weight_decay=WD)
    return opt.step


WORKLOADS = [(op, size, r, c, make) for size, r, c in [("L1", 4, 256), ("L2", 32, 512), ("DRAM", 4096, 1024)]
             for op, make in [("chain", lambda r, c: chain(r, c, False)), ("chain_bcast", lambda r, c: chain(r, c, True))]]
WORKLOADS += [("softmax", "128x1000", 128, 1000, softmax), ("softmax", "1024x4096", 1024, 4096, softmax),
              ("layer_norm", "1024x4096", 1024, 4096, layer_norm), ("adamw", "4M", 4096, 1024, adamw)]


def measure(fn):
    with torch.no_grad():
        for _ in range(3):
            fn()
        n, t = 1, 0.0
        while t < 0.1:
            n *= 2
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t = time.perf_counter() - t0
        batches = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            batches.append((time.perf_counter() - t0) / n)
    return statistics.median(batches) * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    rows = []
    for op, size, r, c, make in WORKLOADS:
        for threads in args.threads:
            name = f"{op}/{size}/torch/threads:{threads}"
            if args.filter not in name:
                continue
            torch.set_num_threads(threads)
            ns = measure(make(r, c))
            rows.append({"name": name, "real_time": ns, "time_unit": "ns"})
            print(f"{name:40s} {ns / 1e3:12.2f} us", flush=True)
    with open(args.out, "w") as f:
        json.dump({"context": {"torch": torch.__version__}, "benchmarks": rows}, f, indent=1)


if __name__ == "__main__":
    main()
