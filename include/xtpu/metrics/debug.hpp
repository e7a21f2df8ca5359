// xtpu/metrics/debug.hpp — XTPU_DEBUG: what ran a step and why a step compiled, in torch_xla's
// PT_XLA_DEBUG layout; sync points by source location; the recompile warnings.
//
// Provides: xtpu::debug::{level, set_level, set_file, reset, cause, cause_text, trigger,
// graph_info, hash_text, analysis, sync_report}, and in xtpu::debug::detail the hooks the
// runtime calls (note_step, note_sync, note_compile, note_transfer, strict_now, emit).
// Settings (docs/debugging.md): XTPU_DEBUG = 0 (off, the default), 1 (a Compilation Analysis
// block for every plan compile, the recompile warnings, the sync-point summary at exit), 2 (also
// an Execution Analysis block for every step run); XTPU_DEBUG_FILE = a path the output is
// appended to (else standard error).
// Layout (each line prefixed with the block's title, as torch_xla prints it):
//   Compilation Analysis: ================================================================================
//   Compilation Analysis: Compilation Cause
//   Compilation Analysis:   user mark_step
//   Compilation Analysis: Graph Info:
//   Compilation Analysis:   Graph Hash: 2a0c5e1b94d37f08c1d2e3f405162738
//   Compilation Analysis:   Number of Graph Inputs: 3
//   Compilation Analysis:   Number of Graph Outputs: 2
//   Compilation Analysis: C++ Frame Triggered Execution:
//   Compilation Analysis:   main (train.cpp:42)
//   Compilation Analysis: Statements Recorded At:
//   Compilation Analysis:   statements 0-1: main (train.cpp:38)
//   Compilation Analysis:   statement 2: main (train.cpp:40)
//   Compilation Analysis: --------------------------------------------------------------------------------
//   Compilation Analysis: ================================================================================
// A recompile adds, before the frame, "Differs from the closest cached graph <hash>:" and one
// line per difference (lazy/step.hpp finds them). Recompile warnings (torch_xla's profiler
// thresholds: after 10 warm-up steps, more events than half the steps since), checked every
// 10 steps:
//   xtpu-profiler: CompileTime too frequent: 10 counts during 10 steps
//   xtpu-profiler: TransferFromDeviceTime too frequent: 10 counts during 10 steps
// The clock is the process's: every mark_step() call of every thread is a step (one that finds
// nothing pending too), and no_recompile_after (lazy/step.hpp) counts the same steps.
// Errors: config_error for XTPU_DEBUG outside 0..2 (settings.hpp's rule).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/settings.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::debug {

/// What made a step run (torch_xla's "Compilation Cause" / "Execution Cause").
enum class cause { mark_step, optimizer_step, sync_point };

/// The cause as the analysis blocks print it.
constexpr const char* cause_text(cause c) noexcept {
  switch (c) {
    case cause::mark_step: return "user mark_step";
    case cause::optimizer_step: return "optimizer_step (the update, then mark_step)";
    case cause::sync_point: return "a sync point: a read (item()/to_host()/printing/to(device)) while statements were pending (it runs them first)";
  }
  return "";
}

/// Why a step runs now and which call of the user's ran it.
struct trigger {
  cause why = cause::mark_step;
  xtpu::source_location where{};
};

/// How a new graph stands to the closest cached one. unrelated: no statement is shared;
/// other_kind: one has twice the statements of the other or more and the fewer are not the
/// same statements at both ends (an evaluation beside training, most likely) — `equal` of its
/// `statements` equal the cached graph's at the same number, of `cached`.
struct kinship {
  enum kind_t { related, unrelated, other_kind } kind = related;
  std::size_t equal = 0, statements = 0, cached = 0;
};

/// One step as an analysis block shows it.
struct graph_info {
  std::uint64_t hash_hi = 0, hash_lo = 0;  // 32 hex digits
  std::size_t inputs = 0, outputs = 0;
  trigger by;
  std::string closest;                 // the hash of the closest cached graph (a recompile), else empty
  kinship kin;                         // how it stands to the closest (kinship_text: the line said first)
  std::vector<std::string> differs;    // how this graph differs from the closest (the first lines only, if not kin)
  std::vector<std::string> recorded;   // where its statements were recorded ("statements 0-8: main (train.cpp:42)")
};

namespace detail {

inline constexpr settings::setting level_setting{
    .name = "debug_level", .env = "XTPU_DEBUG", .lo = 0, .hi = 2, .setter = "xtpu::debug::set_level"};

inline std::atomic<int>& level_cell() {
  static std::atomic<int> cell{[] {
    const auto e = settings::from_env(level_setting);
    return e ? static_cast<int>(settings::integer(level_setting, *e)) : 0;
  }()};
  return cell;
}

/// Where the output goes: XTPU_DEBUG_FILE (appended), or standard error.
struct sink {
  std::mutex mu;
  std::string path = [] {
    const char* p = std::getenv("XTPU_DEBUG_FILE");
    return std::string(p != nullptr ? p : "");
  }();
  static sink& get() {
    static sink s;
    return s;
  }
};

/// Writes one block of text (whole lines) to the debug output.
inline void emit(std::string_view text) {
  sink& s = sink::get();
  std::lock_guard lock(s.mu);
  std::FILE* f = s.path.empty() ? stderr : std::fopen(s.path.c_str(), "a");
  if (f == nullptr) {  // the file cannot be opened: say so once per block, on stderr
    std::fprintf(stderr, "xtpu: cannot open XTPU_DEBUG_FILE '%s'; debug output follows here\n", s.path.c_str());
    f = stderr;
  }
  std::fwrite(text.data(), 1, text.size(), f);
  if (f != stderr) std::fclose(f);
  else std::fflush(f);
}

/// "function (file:line)", as the analysis blocks and the sync report print a caller: the
/// function without its template arguments (g++ spells them out), a file of xtpu's own headers
/// from its "xtpu/" folder on ("xtpu/nn/loss.hpp").
inline std::string frame_text(const xtpu::source_location& l) {
  if (l.line() == 0) return "(no source location)";
  std::string_view function = l.function_name(), file = l.file_name();
  if (const auto angle = function.find('<'); angle != std::string_view::npos && !function.starts_with("operator<"))
    function = function.substr(0, angle);
  static const std::string_view own_root = [] {  // this header's path up to (without) "xtpu/metrics/debug.hpp"
    const std::string_view self = __FILE__, tail = "xtpu/metrics/debug.hpp";
    return self.ends_with(tail) ? self.substr(0, self.size() - tail.size()) : std::string_view();
  }();
  if (!own_root.empty() && file.starts_with(own_root) && file.substr(own_root.size()).starts_with("xtpu/"))
    file.remove_prefix(own_root.size());
  return std::string(function) + " (" + std::string(file) + ":" + std::to_string(l.line()) + ")";
}

/// Counts of sync points by source location, printed at exit (level >= 1).
struct sync_tally {
  std::mutex mu;
  std::map<std::string, std::int64_t> by_frame;
  sync_tally() { (void)sink::get(); }  // the sink outlives the tally, which prints at exit
  static sync_tally& get() {
    static sync_tally t;
    return t;
  }
  /// "  <count>  <function> (<file>:<line>)" per line, most frequent first.
  std::string report() {
    std::vector<std::pair<std::int64_t, std::string>> rows;
    {
      std::lock_guard lock(mu);
      for (const auto& [frame, n] : by_frame) rows.emplace_back(n, frame);
    }
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string out;
    for (const auto& [n, frame] : rows) out += "  " + std::to_string(n) + "  " + frame + "\n";
    return out;
  }
  ~sync_tally();
};

/// Steps, compiles and reads since the process started (never reset by metrics::reset):
/// the recompile warnings' and the strict mode's clock.
struct clock {
  std::atomic<std::int64_t> steps{0}, compiles{0}, transfers{0};
  std::atomic<std::int64_t> base_steps{-1}, base_compiles{0}, base_transfers{0};  // at the end of warm-up
  std::atomic<std::int64_t> strict_from{-1};  // compiles at this step count or later throw; -1: off
  static clock& get() {
    static clock c;
    return c;
  }
};

inline constexpr std::int64_t warm_up_steps = 10, warning_every = 10;

/// no_recompile_after (lazy/step.hpp) has taken effect: a compile now throws.
inline bool strict_now() noexcept {
  const auto& c = clock::get();
  const std::int64_t from = c.strict_from.load(std::memory_order_relaxed);
  return from >= 0 && c.steps.load(std::memory_order_relaxed) >= from;
}

/// "1 statement", "5 statements": a count of statements as the explanations say it.
inline std::string statements_text(std::size_t k) { return std::to_string(k) + (k == 1 ? " statement" : " statements"); }

}  // namespace detail

/// The debug level (XTPU_DEBUG: 0, 1 or 2); its first call reads XTPU_DEBUG (config_error if bad).
inline int level() { return detail::level_cell().load(std::memory_order_relaxed); }
/// Sets the debug level; config_error outside 0..2.
inline void set_level(int l) {
  detail::level_cell().store(static_cast<int>(settings::integer(detail::level_setting, l)));
}
/// Sends debug output to `path` (appended; empty: standard error), as XTPU_DEBUG_FILE does.
inline void set_file(std::string path) {
  auto& s = detail::sink::get();
  std::lock_guard lock(s.mu);
  s.path = std::move(path);
}

/// Starts the debug statistics again: the step clock (warm-up restarts), the compile and read
/// counts, the sync-point tally; no_recompile_after is cancelled.
inline void reset() {
  auto& c = detail::clock::get();
  c.steps = 0, c.compiles = 0, c.transfers = 0;
  c.base_steps = -1, c.base_compiles = 0, c.base_transfers = 0, c.strict_from = -1;
  auto& t = detail::sync_tally::get();
  std::lock_guard lock(t.mu);
  t.by_frame.clear();
}

/// A 128-bit graph hash as the blocks print it: 32 hex digits.
inline std::string hash_text(std::uint64_t hi, std::uint64_t lo) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi), static_cast<unsigned long long>(lo));
  return buf;
}

/// The line said first under "Differs from the closest cached graph" for a graph that is not
/// kin to it ("" for a related one); the first differences follow it.
inline std::string kinship_text(const kinship& k) {
  const std::string tail = "; if it should have matched, the first differences are";
  switch (k.kind) {
    case kinship::unrelated:
      return "it shares no statement with any cached graph: a step of another kind (each kind compiles once)" + tail;
    case kinship::other_kind:
      return "a step of another kind, it seems (an evaluation beside the training step? each kind compiles once): " +
             std::to_string(k.equal) + " of its " + detail::statements_text(k.statements) +
             " equal the cached graph's at the same number, of " +
             std::to_string(k.cached) + tail;
    case kinship::related: break;
  }
  return {};
}

/// The block titled `title` ("Compilation" or "Execution") for graph g, in torch_xla's layout.
inline std::string analysis(std::string_view title, const graph_info& g) {
  const std::string p = std::string(title) + " Analysis: ";
  const std::string rule(80, '=');
  const std::string hash = hash_text(g.hash_hi, g.hash_lo);
  std::string out = p + rule + "\n" + p + std::string(title) + " Cause\n" + p + "  " + cause_text(g.by.why) + "\n";
  out += p + "Graph Info:\n" + p + "  Graph Hash: " + hash + "\n";
  out += p + "  Number of Graph Inputs: " + std::to_string(g.inputs) + "\n";
  out += p + "  Number of Graph Outputs: " + std::to_string(g.outputs) + "\n";
  if (!g.closest.empty()) {
    out += p + "Differs from the closest cached graph " + g.closest + ":\n";
    if (g.kin.kind != kinship::related) out += p + "  " + kinship_text(g.kin) + "\n";
    for (const auto& d : g.differs) out += p + "  " + d + "\n";
  }
  out += p + "C++ Frame Triggered Execution:\n" + p + "  " + detail::frame_text(g.by.where) + "\n";
  if (!g.recorded.empty()) {
    out += p + "Statements Recorded At:\n";
    for (const auto& r : g.recorded) out += p + "  " + r + "\n";
  }
  out += p + std::string(80, '-') + "\n" + p + rule + "\n";
  return out;
}

/// The sync points counted so far, most frequent first: "  <count>  <function> (<file>:<line>)".
inline std::string sync_report() { return detail::sync_tally::get().report(); }

namespace detail {

inline sync_tally::~sync_tally() {
  if (by_frame.empty() || level_cell().load(std::memory_order_relaxed) < 1) return;  // filled only at level >= 1
  emit("xtpu: sync points (a read that ran pending statements), most frequent first:\n" + report());
}

/// A read ran pending statements (level >= 1 counts it by where it was called).
XTPU_RUNTIME_INLINE void note_sync(const xtpu::source_location& where);
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE void note_sync(const xtpu::source_location& where) {
  if (level() < 1) return;
  auto& t = sync_tally::get();
  std::lock_guard lock(t.mu);
  ++t.by_frame[frame_text(where)];
}
#endif

/// Why the latest plan compiled (one line; the CompileTime warning repeats it).
struct latest_compile {
  std::mutex mu;
  std::string why;
  static latest_compile& get() {
    static latest_compile l;
    return l;
  }
};

/// A step compiled a plan; `why`: how it differs from the closest cached graph (may be empty).
inline void note_compile(std::string why) {
  clock::get().compiles.fetch_add(1, std::memory_order_relaxed);
  if (why.empty()) return;
  auto& l = latest_compile::get();
  std::lock_guard lock(l.mu);
  l.why = std::move(why);
}
inline void note_transfer() noexcept { clock::get().transfers.fetch_add(1, std::memory_order_relaxed); }

/// The warning for `events` counts of `metric` during `steps` steps past warm-up, if they are
/// more than half of them ("" if not).
inline std::string frequent(std::string_view metric, std::int64_t events, std::int64_t steps) {
  if (steps <= 0 || 2 * events <= steps) return "";
  return "xtpu-profiler: " + std::string(metric) + " too frequent: " + std::to_string(events) + " counts during " +
         std::to_string(steps) + " steps\n";
}

/// A mark_step ran: advances the clock and, at level >= 1, checks the recompile thresholds.
inline void note_step() {
  auto& c = clock::get();
  const std::int64_t s = c.steps.fetch_add(1, std::memory_order_relaxed) + 1;
  if (s == warm_up_steps) {
    c.base_compiles = c.compiles.load();
    c.base_transfers = c.transfers.load();
    c.base_steps = s;
  }
  const std::int64_t steps = s - c.base_steps;  // since the end of warm-up
  if (level() < 1 || c.base_steps < 0 || steps == 0 || steps % warning_every != 0) return;
  std::string w = frequent("CompileTime", c.compiles - c.base_compiles, steps);
  if (!w.empty()) {
    auto& l = latest_compile::get();
    std::lock_guard lock(l.mu);
    if (!l.why.empty()) w += "xtpu-profiler:   the latest compile: " + l.why + "\n";
  }
  w += frequent("TransferFromDeviceTime", c.transfers - c.base_transfers, steps);
  if (!w.empty()) emit(w);
}

}  // namespace detail
}  // namespace xtpu::debug
