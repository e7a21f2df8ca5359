"""The timing rule the training benchmarks' PyTorch twins share (their C++ sides: windows.hpp):
`warmup` calls of step(), then `windows` windows of `window` calls each, timed.
median_window(step, warmup, window, windows) -> (median seconds per window, the last result)."""
import time


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
