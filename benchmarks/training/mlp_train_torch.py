"""PyTorch eager twin of mlp_train.cpp: the same MLP 784-512-512-10 (ReLU), batch 128, the
first 32 batches of Fashion-MNIST's training set as tensors before timing, cross_entropy,
loss.backward() and optimizer.step() per batch — SGD (lr 0.05) or AdamW (lr 1e-3, weight
decay 0.01), fp32.
Usage: python3 mlp_train_torch.py sgd|adamw THREADS [windows]
Prints "median <samples/s>" over `windows` windows of 50 steps after 20 warm-up steps."""
import os
import sys

import numpy as np
import torch

from windows import median_window

BATCH, IN, HIDDEN, CLASSES, BATCHES, WINDOW, WARMUP = 128, 784, 512, 10, 32, 50, 20


def read_idx(path, header):
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "sgd"
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    windows = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d = os.environ.get("FASHION_DIR", ".")
    images = read_idx(d + "/train-images-idx3-ubyte", 16)[: BATCHES * BATCH * IN]
    labels = read_idx(d + "/train-labels-idx1-ubyte", 8)[: BATCHES * BATCH]
    xs = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(BATCHES, BATCH, IN)
    ys = torch.from_numpy(labels.astype(np.int64)).reshape(BATCHES, BATCH)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                                torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
    if which == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
    elif which == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        sys.exit("usage: mlp_train_torch.py sgd|adamw THREADS [windows]")
    step = 0

    def train():
        nonlocal step
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xs[step % BATCHES]), ys[step % BATCHES])
        loss.backward()
        opt.step()
        step += 1
        return loss

    seconds, loss = median_window(train, WARMUP, WINDOW, windows)
    print(f"torch {which}: {step} steps, loss {loss.item():.4f}, median {WINDOW * BATCH / seconds:.1f} samples/s")


if __name__ == "__main__":
    main()
