"""The timing rule the training benchmarks' PyTorch twins share (their C++ sides: windows.hpp):
`warmup` calls of step(), then `windows` windows of `window` calls each, timed.
median_window(step, warmup, window, windows) -> (median seconds per window, the last result).
twin_arguments(argv) -> (windows, bf16) from THREADS [windows] [fp32|bf16], torch set to THREADS
threads and seed 0."""
import time

import torch


def twin_arguments(argv):
    threads = int(argv[1]) if len(argv) > 1 else 1
    windows = int(argv[2]) if len(argv) > 2 else 7
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return windows, len(argv) > 3 and argv[3] == "bf16"


def median_window(step, warmup, window, windows):
    for _ in range(warmup):
        step()
    seconds = []
    result = None
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(window):
            result = step()
        seconds.append(time.perf_counter() - t0)
    seconds.sort()
    return seconds[len(seconds) // 2], result
