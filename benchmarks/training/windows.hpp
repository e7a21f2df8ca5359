// The timing rule the training benchmarks share (their PyTorch twins: windows.py): `warmup`
// calls of step() (the first compiles), then `windows` windows of `window` calls each, timed;
// median_window gives the median seconds per window.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

template <class Step>
double median_window(Step&& step, std::size_t warmup, std::size_t window, int windows) {
  for (std::size_t i = 0; i < warmup; ++i) step();
  std::vector<double> seconds;
  for (int w = 0; w < windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < window; ++i) step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}
