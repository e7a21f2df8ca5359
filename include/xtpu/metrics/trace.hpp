// xtpu/metrics/trace.hpp — XTPU_TRACE: a Chrome trace-event JSON file that Perfetto
// (ui.perfetto.dev) and chrome://tracing load.
//
// Provides: xtpu::trace::{enabled, start, stop}, and in xtpu::trace::detail the span the
// runtime records with (lazy/step.hpp: step, compile, execute, each kernel — a matmul with its
// shape and the cycle model's MXU utilization, a fused loop with its outputs —; lazy/tensor.hpp:
// transfers and sync points; data/loader.hpp: the loader's batches; lazy/step.hpp, told by
// recorder::listener() when recording starts and stops: each thread's share of a job split
// over the thread pool, as "pool work" on the track of the device whose step started it).
// Setting: XTPU_TRACE = a path; recording starts with the process (the first step or tensor)
// and the file is written at exit — or between xtpu::trace::start(path) and stop().
// Layout: {"traceEvents": [...], "displayTimeUnit": "ms"} with complete events
// {"name", "cat", "ph": "X", "ts", "dur", "pid", "tid", "args"} (microseconds since the trace
// started), instant events ("ph": "i", "s": "t") for sync points, and metadata events naming
// each process — one per device ("v5e:0"), pid 0 "host" — and each thread ("thread 0" is the
// first to record). Spans on one thread nest: an event lies inside its parent or after it.
// Errors: none thrown — a file that cannot be written is reported on standard error at stop().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xtpu/config.hpp"

namespace xtpu::trace {

namespace detail {

using clock = std::chrono::steady_clock;

/// A JSON string literal of s ("" quoted, control characters escaped).
inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      out += b;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

struct event {
  std::string name;
  const char* cat;
  char ph;  // 'X' complete, 'i' instant
  double ts_us, dur_us;
  int pid, tid;
  std::string args;  // a JSON object's members ("\"m\": 128, ..."), or empty
};

class recorder {
 public:
  static recorder& get();
  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  void start(std::string path) {
    const bool on = !path.empty();
    {
      std::lock_guard lock(mu_);
      events_.clear();
      path_ = std::move(path);
      t0_ = clock::now();
      on_.store(on, std::memory_order_relaxed);
    }
    // unlocked, as in stop(): a listener told false may wait for events still to be added
    if (const listener_fn f = listener().load(std::memory_order_acquire)) f(on);
  }
  /// Stops recording and writes the file; returns its path ("" when nothing was recording).
  std::string stop() {
    // the listener first, unlocked: what it waits for may still add events
    if (const listener_fn f = listener().load(std::memory_order_acquire)) f(false);
    std::lock_guard lock(mu_);
    if (!on_.load(std::memory_order_relaxed)) return "";
    on_.store(false, std::memory_order_relaxed);
    write_locked();
    return path_;
  }
  void add(event e) {
    std::lock_guard lock(mu_);
    if (on_.load(std::memory_order_relaxed)) events_.push_back(std::move(e));
  }
  double since_start_us(clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - t0_).count();
  }
  /// A small number for this thread (0: the first thread that recorded).
  int thread_id() {
    thread_local int id = next_tid_.fetch_add(1, std::memory_order_relaxed);
    return id;
  }
  /// Names process pid ("v5e:0"); pid 0 is "host".
  void name_process(int pid, std::string name) {
    std::lock_guard lock(mu_);
    processes_[pid] = std::move(name);
  }
  ~recorder() { (void)stop(); }
  /// Told when recording starts (true) or stops (false: before the file is written, and
  /// whether or not a trace was recording); null: nobody listens. A listener set later reads
  /// on() once itself.
  using listener_fn = void (*)(bool on);
  static std::atomic<listener_fn>& listener() noexcept {
    static std::atomic<listener_fn> f{nullptr};
    return f;
  }

 private:
  recorder() {
    if (const char* p = std::getenv("XTPU_TRACE"); p != nullptr && *p != '\0') start(p);
    processes_[0] = "host";
  }
  void write_locked() {
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "xtpu: cannot write the trace file '%s'\n", path_.c_str());
      return;
    }
    std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
    bool first = true;
    auto line = [&](const std::string& s) {
      std::fputs(first ? "  " : ",\n  ", f);
      std::fputs(s.c_str(), f);
      first = false;
    };
    for (const auto& [pid, name] : processes_)
      line("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) + ", \"args\": {\"name\": " +
           json_string(name) + "}}");
    std::map<std::pair<int, int>, bool> threads;
    for (const auto& e : events_) threads[{e.pid, e.tid}] = true;
    for (const auto& [key, unused] : threads)
      line("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + std::to_string(key.first) + ", \"tid\": " +
           std::to_string(key.second) + ", \"args\": {\"name\": \"thread " + std::to_string(key.second) + "\"}}");
    char num[64];
    for (const auto& e : events_) {
      std::string s = "{\"name\": " + json_string(e.name) + ", \"cat\": " + json_string(e.cat) + ", \"ph\": \"" + e.ph + "\"";
      std::snprintf(num, sizeof num, ", \"ts\": %.3f", e.ts_us);
      s += num;
      if (e.ph == 'X') {
        std::snprintf(num, sizeof num, ", \"dur\": %.3f", e.dur_us);
        s += num;
      } else {
        s += ", \"s\": \"t\"";
      }
      s += ", \"pid\": " + std::to_string(e.pid) + ", \"tid\": " + std::to_string(e.tid);
      if (!e.args.empty()) s += ", \"args\": {" + e.args + "}";
      line(s + "}");
    }
    std::fputs("\n]}\n", f);
    std::fclose(f);
  }

  std::mutex mu_;
  std::atomic<bool> on_{false};
  std::atomic<int> next_tid_{0};
  std::string path_;
  clock::time_point t0_ = clock::now();
  std::vector<event> events_;
  std::map<int, std::string> processes_;
};
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE recorder& recorder::get() {
  static recorder r;
  return r;
}
#endif

/// A complete event from construction to destruction, when tracing was on at construction
/// (else it costs one relaxed load). Arguments, JSON object members such as
/// "\"m\": 128, \"k\": 784", are added with add_args — build them only when active().
class span {
 public:
  span(const char* cat, const char* name, int pid) {  // name read only when tracing (no strlen per kernel)
    if (recorder::get().on()) on_.emplace(open{cat, name, {}, pid, clock::now()});
  }
  span(const span&) = delete;
  span& operator=(const span&) = delete;
  bool active() const noexcept { return on_.has_value(); }
  void rename(std::string name) {
    if (on_) on_->name = std::move(name);
  }
  void add_args(const std::string& more) {
    if (on_) on_->args += (on_->args.empty() ? "" : ", ") + more;
  }
  ~span() {
    if (on_) end();
  }

 private:
  void end();  // adds the event
  struct open {  // while tracing (a span that is not costs a flag: no strings made or freed)
    const char* cat;
    std::string name, args;
    int pid;
    clock::time_point t0;
  };
  std::optional<open> on_;
};
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE void span::end() {
  auto& r = recorder::get();
  const auto t1 = clock::now();
  open& o = *on_;
  r.add(event{std::move(o.name), o.cat, 'X', r.since_start_us(o.t0), std::chrono::duration<double, std::micro>(t1 - o.t0).count(),
              o.pid, r.thread_id(), std::move(o.args)});
}
#endif

/// An instant event (a sync point).
inline void instant(const char* cat, std::string name, int pid, std::string args = {}) {
  auto& r = recorder::get();
  if (!r.on()) return;
  r.add(event{std::move(name), cat, 'i', r.since_start_us(clock::now()), 0, pid, r.thread_id(), std::move(args)});
}

}  // namespace detail

/// True while a trace is recording (XTPU_TRACE, or start()).
inline bool enabled() noexcept { return detail::recorder::get().on(); }
/// Starts recording a new trace, to be written to `path` at stop() (or at exit).
inline void start(std::string path) { detail::recorder::get().start(std::move(path)); }
/// Stops recording and writes the file; returns its path ("" if nothing was recording).
inline std::string stop() { return detail::recorder::get().stop(); }

}  // namespace xtpu::trace
