// xtpu/bench/steps.hpp — the step-timing harness: seed 001's "Expected Timing" table, measured.
//
// Provides: xtpu::bench::steps(fn, n, device = current) -> bench::step_timing, which runs the
// user's step `fn()` followed by mark_step() n times (n >= 4) and measures each run's wall
// time (the debug output names the caller of steps() as the line that ran each step); step_timing::table() (a Markdown table: phase, time, notes) and ::json()
// (nlohmann-json). Phases: step 1 (record, compile, run), steps 2-3, steps 4+ (the steady
// state: median, 10th and 90th percentile, min, max). Counted over the whole run, from the
// metrics (docs/debugging.md): plan compiles (and those after step 1: recompiles), reads to the
// host, the sync points among them that ran pending statements, the CompileTime of step 1, the mean MXU utilization of
// the steady steps, and the device's HBM peak during the run.
// Not in xtpu.hpp (nlohmann-json costs every translation unit ~2 s of g++ time): include
// <xtpu/bench/steps.hpp>.
// The counts are the process's: work of other threads during the run is counted too.
// Errors: xtpu::error for n < 4 (the table has three phases); whatever fn or its step throws
// (the exception propagates; nothing is returned).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "xtpu/device/device.hpp"
#include "xtpu/error.hpp"
#include "xtpu/lazy/step.hpp"
#include "xtpu/metrics/metrics.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::bench {

/// What steps() measured; times in milliseconds.
struct step_timing {
  std::size_t steps = 0;
  double first_ms = 0;           // step 1: record + compile + run
  double first_compile_ms = 0;   // of which CompileTime
  double second_third_ms = 0;    // steps 2-3, mean
  double median_ms = 0, p10_ms = 0, p90_ms = 0, min_ms = 0, max_ms = 0;  // steps 4..n
  std::int64_t compiles = 0;     // plans compiled in the run
  std::int64_t recompiles = 0;   // of which after step 1
  std::int64_t late_recompiles = 0;  // of which in steps 4+ (a stable step has none)
  std::int64_t transfers = 0;    // reads to the host (item(), to_host())
  std::int64_t sync_points = 0;  // reads while statements were pending (each ran them)
  double mxu_utilization = 0;    // percent, mean over the steady steps' matmuls (0: none)
  std::uint64_t hbm_peak_bytes = 0;
  std::string device;
  std::vector<double> step_ms;   // every step, in order

  /// seed 001's table: | Phase | Time | Notes |.
  std::string table() const {
    auto ms = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, v < 10 ? "%.3f ms" : v < 1000 ? "%.1f ms" : "%.2f s", v < 1000 ? v : v / 1000);
      return std::string(b);
    };
    auto n = [](std::int64_t v, const char* one, const char* many) { return std::to_string(v) + " " + (v == 1 ? one : many); };
    std::string t = "| Phase | Time | Notes |\n|-------|------|-------|\n";
    t += "| Step 1 | " + ms(first_ms) + " | " + n(compiles - recompiles, "plan compiled", "plans compiled") +
         " (CompileTime " + ms(first_compile_ms) + ") |\n";
    t += "| Steps 2-3 | " + ms(second_third_ms) + " each | " +
         (recompiles - late_recompiles == 0 ? std::string("no recompiles")
                                            : n(recompiles - late_recompiles, "recompile", "recompiles")) + " |\n";
    t += "| Steps 4+ | " + ms(median_ms) + "/step (median of " + std::to_string(steps - 3) + "; p10 " + ms(p10_ms) +
         ", p90 " + ms(p90_ms) + ") | " +
         (late_recompiles == 0 ? std::string("stable, no recompiles") : n(late_recompiles, "RECOMPILE", "RECOMPILES")) +
         " |\n";
    char util[32];
    std::snprintf(util, sizeof util, mxu_utilization < 1 ? "%.3f %%" : "%.1f %%", mxu_utilization);
    const std::string hbm = xtpu::detail::format_bytes(hbm_peak_bytes);
    t += "| Reads | " + n(transfers, "to the host", "to the host") + " | " +
         n(sync_points, "sync point (a read that ran pending statements)", "sync points (reads that ran pending statements)") +
         " |\n";
    t += "| MXU utilization | " + std::string(util) + " | steady steps, cycle model of " + device + " |\n";
    t += "| HBM peak | " + hbm + " | " + device + ", during the run |\n";
    return t;
  }

  /// The same as JSON: every field, times in milliseconds.
  std::string json() const {
    nlohmann::json j = {{"steps", steps},
                        {"device", device},
                        {"first_ms", first_ms},
                        {"first_compile_ms", first_compile_ms},
                        {"second_third_ms", second_third_ms},
                        {"steady", {{"median_ms", median_ms}, {"p10_ms", p10_ms}, {"p90_ms", p90_ms},
                                    {"min_ms", min_ms}, {"max_ms", max_ms}}},
                        {"compiles", compiles},
                        {"recompiles", recompiles},
                        {"late_recompiles", late_recompiles},
                        {"transfers", transfers},
                        {"sync_points", sync_points},
                        {"mxu_utilization_percent", mxu_utilization},
                        {"hbm_peak_bytes", hbm_peak_bytes},
                        {"step_ms", step_ms}};
    return j.dump(2);
  }
};

namespace detail {
/// A metric's total samples and accumulator now (0, 0 when it has none).
inline std::pair<std::int64_t, double> metric_totals(const char* name) {
  const auto m = metrics::metric(name);
  return m ? std::pair{m->total_samples, m->accumulator} : std::pair<std::int64_t, double>{0, 0.0};
}
/// The q-quantile of sorted v (nearest rank).
inline double quantile(const std::vector<double>& v, double q) {
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}
}  // namespace detail

/// Runs `fn(); mark_step();` n times on this thread and measures it (see the header comment).
/// fn may call mark_step() or optimizer_step() itself: the harness's mark_step then finds
/// nothing pending (and the debug clock counts two steps per run).
template <class F>
step_timing steps(F&& fn, std::size_t n, const device& d = device::current(),
                  xtpu::source_location where = xtpu::source_location::current()) {
  if (n < 4) throw error("xtpu: bench::steps: n = " + std::to_string(n) + "; the table needs at least 4 steps");
  using clock = std::chrono::steady_clock;
  step_timing r;
  r.steps = n;
  r.device = d.name();
  r.step_ms.reserve(n);
  const auto compiles0 = metrics::counter("UncachedCompile"), syncs0 = metrics::counter("SyncPointExecutions");
  const auto transfers0 = detail::metric_totals("TransferFromDeviceTime").first;
  const auto compile_time0 = detail::metric_totals("CompileTime").second;
  std::int64_t compiles_after_1 = 0, compiles_after_3 = 0;
  std::pair<std::int64_t, double> mxu3{};
  d.reset_peak();
  for (std::size_t i = 0; i < n; ++i) {
    const auto t0 = clock::now();
    fn();
    mark_step(where);
    r.step_ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    if (i == 0) {
      compiles_after_1 = metrics::counter("UncachedCompile");
      r.first_compile_ms = (detail::metric_totals("CompileTime").second - compile_time0) / 1e6;
    }
    if (i == 2) {
      compiles_after_3 = metrics::counter("UncachedCompile");
      mxu3 = detail::metric_totals("MxuUtilization");
    }
  }
  const auto compiles = metrics::counter("UncachedCompile");
  r.compiles = compiles - compiles0;
  r.recompiles = compiles - compiles_after_1;
  r.late_recompiles = compiles - compiles_after_3;
  r.transfers = detail::metric_totals("TransferFromDeviceTime").first - transfers0;
  r.sync_points = metrics::counter("SyncPointExecutions") - syncs0;
  const auto mxu = detail::metric_totals("MxuUtilization");
  if (mxu.first > mxu3.first) r.mxu_utilization = (mxu.second - mxu3.second) / static_cast<double>(mxu.first - mxu3.first);
  r.hbm_peak_bytes = d.peak_bytes_in_use();
  r.first_ms = r.step_ms[0];
  r.second_third_ms = (r.step_ms[1] + r.step_ms[2]) / 2;
  std::vector<double> steady(r.step_ms.begin() + 3, r.step_ms.end());
  std::sort(steady.begin(), steady.end());
  r.median_ms = detail::quantile(steady, 0.5);
  r.p10_ms = detail::quantile(steady, 0.1);
  r.p90_ms = detail::quantile(steady, 0.9);
  r.min_ms = steady.front();
  r.max_ms = steady.back();
  return r;
}

}  // namespace xtpu::bench
