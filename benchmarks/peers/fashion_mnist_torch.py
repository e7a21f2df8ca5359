#!/usr/bin/env python3
"""examples/fashion_mnist.cpp's twin in PyTorch eager (Debian's python3-torch, fp32): the MLP
784-512-512-10 (ReLU), AdamW (lr 2e-3, weight decay 0.01) with the rate falling to 0 by a cosine
over the run, batch 128, shuffled, the short last batch dropped, for one epoch of Fashion-MNIST;
then the test accuracy. Prints the same summary line as the C++ program:
  fashion_mnist_torch: 468 steps, N samples/s after warm-up; test accuracy A %
Usage: fashion_mnist_torch.py [THREADS] [SEED]   (data: $XTPU_FASHION_MNIST or Debian's folder)
"""
import gzip
import os
import sys
import time

import numpy as np
import torch


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load(split, folder):
    stem = "train" if split == "train" else "t10k"
    x = idx(f"{folder}/{stem}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    y = idx(f"{folder}/{stem}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    folder = os.environ.get("XTPU_FASHION_MNIST") or "/usr/share/datasets/fashion-mnist"
    x, y = load("train", folder)
    tx, ty = load("test", folder)
    batch = 128
    steps = x.shape[0] // batch
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))
    t0 = None
    for s in range(steps):
        idxs = order[s * batch:(s + 1) * batch]
        loss = torch.nn.functional.cross_entropy(model(x[idxs]), y[idxs])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if s == 1:
            t0 = time.perf_counter()
    rate = (steps - 2) * batch / (time.perf_counter() - t0)
    with torch.no_grad():
        accuracy = (model(tx).argmax(1) == ty).float().mean().item()
    print(f"fashion_mnist_torch: {steps} steps, {rate:.0f} samples/s after warm-up; test accuracy {100 * accuracy:.2f} %")


if __name__ == "__main__":
    main()
