// xtpu/lazy/step.hpp — the pending step, its key, the plan cache, and mark_step().
//
// Provides: xtpu::mark_step(), xtpu::discard_step(), xtpu::no_recompile_after(n), xtpu::allow_recompiles(),
// xtpu::check_indices() / set_check_indices(on) (XTPU_CHECK_INDICES: lazy/index_check.hpp),
// xtpu::lazy::{pending_statements, explain, plan_cache_entries, plan_cache_capacity,
// set_plan_cache_capacity, clear_plan_cache}, and in detail the step that records statements,
// keys them and runs them (the plan and its passes: lazy/plan.hpp), and site_scope /
// recording_site (the caller's line for statements a library call records on its behalf).
//
// Model (docs/lazy.md, docs/devices.md): every thread has one pending step per device (chip)
// it uses. Assigning an expression to a tensor records a statement in the step of the chip its
// tensors live on (the current device if it reads none): its compile-time kernel table and
// fingerprint, its captured leaves and scalars, and the wiring of each leaf (an external
// tensor, numbered by first appearance, or the output of an earlier statement of this step).
// mark_step() runs each of the thread's steps as one unit (a sync runs the step of the chip it
// reads): its key is the fingerprints + wiring + which outputs are still alive + which inputs
// may be overwritten in place + XTPU_USE_BF16 + the chip; a
// miss builds the plan once (lazy/plan.hpp's passes: dead statements dropped, common
// subexpressions computed once across statements, matmul epilogues fused, temps packed into
// one arena by lifetime) and times it as CompileTime; a hit only binds buffers and scalars.
// All output memory is allocated on the step's chip before any kernel runs, so an
// out_of_memory leaves the step pending and nothing lost; discard_step() then drops it, every
// assigned tensor back at its value before the step (an assignment's result keeps the value it
// replaced until its step runs: detail::replace).
// A compile is reported at XTPU_DEBUG >= 1 (metrics/debug.hpp), with how its graph differs from
// the closest cached one (lazy/recompile.hpp).
// Errors: sync_error (reading a tensor pending in another thread's step, or one discard_step
// dropped); out_of_memory from discard_step (a copy that does not fit); device_mismatch (an
// expression reading tensors of two chips); compilation_error (a compile after
// no_recompile_after took effect: the step stays pending); config_error for a bad XTPU_* setting
// (settings::check_environment, run by the first step or tensor); index_error from mark_step or
// a sync point under XTPU_CHECK_INDICES, for an index a take or gather met out of range as the
// step ran — after it ran to its end (every chip's step, under mark_step: the first chip's error
// is thrown, unless a later chip's step throws another error, which is then thrown instead).
// Entry points (defined in one file under XTPU_SEPARATE_RUNTIME, xtpu/config.hpp): step::run,
// explain, discard, record_erased and run_all; thread_steps::make and find_or_add; end_step;
// settings::detail::check_every_variable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/device/device.hpp"
#include "xtpu/error.hpp"
#include "xtpu/fingerprint/hash.hpp"
#include "xtpu/eval/program.hpp"
#include "xtpu/kernels/thread_pool.hpp"
#include "xtpu/lazy/plan.hpp"
#include "xtpu/lazy/recompile.hpp"
#include "xtpu/metrics/debug.hpp"
#include "xtpu/metrics/metrics.hpp"
#include "xtpu/metrics/trace.hpp"
#include "xtpu/settings.hpp"
#include "xtpu/source_location.hpp"
#include "xtpu/spin_mutex.hpp"

namespace xtpu::detail {

/// A tensor value on a device: the chip it lives on, its buffer there, and while pending,
/// the step that computes it.
struct grad_slot;

struct storage {
  explicit storage(chip& c) noexcept : dev(&c) {}
  chip* dev;
  device_buffer buffer;
  std::atomic<const void*> owner{nullptr};  // the pending step computing it, else null
  std::uint32_t producer = 0;               // its statement in that step
  std::weak_ptr<grad_slot> param;           // the nn::parameter whose value this is (lazy/grad.hpp)
  std::shared_ptr<storage> previous;        // while pending: the value an assignment replaced (discard)
};

/// The allocator of storages: make_shared's one block (count and storage) from a free list of
/// this thread's, up to 1024 blocks (~110 bytes each), else the heap — a step makes a storage
/// per statement and frees as many, and malloc with free was ~5 % of a cached 10-statement
/// step. A block freed on another thread joins that thread's list if it has one (memory is
/// memory); a thread's list is freed when the thread ends, and a block freed after that (by a
/// later thread_local's destructor) goes straight back to the heap. Under ASan nothing is
/// recycled, so that a storage used after its free is found.
#if defined(__SANITIZE_ADDRESS__)
#define XTPU_RECYCLE_STORAGES 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang before 15 does not define __SANITIZE_ADDRESS__
#define XTPU_RECYCLE_STORAGES 0
#endif
#endif
#ifndef XTPU_RECYCLE_STORAGES
#define XTPU_RECYCLE_STORAGES 1
#endif
template <class T>
struct recycled {
  using value_type = T;
  recycled() noexcept = default;
  template <class U>
  recycled(const recycled<U>&) noexcept {}  // NOLINT: rebinding, as allocators are
  T* allocate(std::size_t n) {
    if (n == 1)
      if (auto* l = list(); l != nullptr && !l->blocks.empty()) {
        void* p = l->blocks.back();
        l->blocks.pop_back();
        return static_cast<T*>(p);
      }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1)
      if (auto* l = current(); l != nullptr && l->blocks.size() < l->blocks.capacity()) {
        l->blocks.push_back(p);  // no throw: within the capacity reserved
        return;
      }
    ::operator delete(p);
  }
  friend bool operator==(const recycled&, const recycled&) noexcept { return true; }

 private:
  struct free_list {
    std::vector<void*> blocks;
    free_list() noexcept {
      try {
        blocks.reserve(1024);
      } catch (...) {  // no room for the list: every block goes to the heap
      }
      current() = this;
    }
    ~free_list() {
      current() = nullptr;
      ended() = true;
      for (void* p : blocks) ::operator delete(p);
    }
  };
  static bool& ended() noexcept {
    thread_local bool e = false;  // trivial: readable while other thread_locals are destroyed
    return e;
  }
  static free_list* list() noexcept {
#if XTPU_RECYCLE_STORAGES
    if (free_list* l = current()) return l;
    if (ended()) return nullptr;
    thread_local free_list l;
    return &l;
#else
    return nullptr;
#endif
  }
  /// This thread's list if it exists (deallocate never makes one: a block freed while the
  /// thread ends goes to the heap, and a list made then could be left unfreed).
  static free_list*& current() noexcept {
    thread_local free_list* l = nullptr;  // trivial, as ended()
    return l;
  }
};

/// A new storage on chip c (the one way storages are made: recycled blocks).
inline std::shared_ptr<storage> new_storage(chip& c) { return std::allocate_shared<storage>(recycled<storage>{}, c); }

/// A thread's share of a job split over the thread pool, in the trace: "pool work" on its
/// job's tag's track (execute() tags its jobs with the chip's trace_pid).
inline void trace_pool_work(const kernels::detail::work_report& w) {
  auto& r = trace::detail::recorder::get();
  r.add(trace::detail::event{"pool work", "pool", 'X', r.since_start_us(w.begin),
                             std::chrono::duration<double, std::micro>(w.end - w.begin).count(), w.tag, r.thread_id(),
                             "\"pieces\": " + std::to_string(w.ran) + ", \"of\": " + std::to_string(w.n) +
                                 ", \"thread\": \"" + (w.caller ? "the caller" : "a pool worker") + "\""});
}
/// The trace recorder's listener: the pool reports to trace_pool_work while a trace records;
/// when it stops, the reports of the jobs already done are recorded before it writes the file.
inline void follow_trace(bool on) noexcept {
  kernels::detail::work_observer().store(on ? &trace_pool_work : nullptr, std::memory_order_release);
  if (!on) kernels::detail::settle_reports();
}

/// Chip c's process in a trace (pid 0 is the host), named on first use.
inline int trace_pid(const chip& c) {
  const int pid = static_cast<int>(c.serial()) + 1;
  if (trace::enabled()) trace::detail::recorder::get().name_process(pid, c.name());
  return pid;
}

/// The one message for tensors of two devices in one expression.
[[noreturn]] inline void throw_device_mismatch(const chip& step_chip, const chip& leaf_chip) {
  throw device_mismatch("xtpu: an expression reads tensors on two devices, " + step_chip.name() + " and " +
                        leaf_chip.name() + "; move one to the other first with t.to(device) (an explicit transfer)");
}

/// The owner of values whose thread ended before running them, and of values a discarded
/// step would have computed (xtpu::discard_step): they never get a value.
inline constexpr char abandoned_marker = 0, discarded_marker = 0;
inline const void* const abandoned = &abandoned_marker;
inline const void* const discarded = &discarded_marker;

/// What a storage's owner says of its value: it has it, a step will compute it, or it never
/// gets one (abandoned, discarded). The one reading of the owner markers.
enum class value_state { ready, pending, none };
inline value_state state_of(const storage& s) noexcept {
  const void* o = s.owner.load(std::memory_order_acquire);
  if (o == nullptr) return value_state::ready;
  return o == abandoned || o == discarded ? value_state::none : value_state::pending;
}
/// Whether s holds a value or will get one (null, abandoned and discarded values will not).
inline bool has_value(const std::shared_ptr<storage>& s) noexcept { return s && state_of(*s) != value_state::none; }

inline void throw_not_readable(const void* owner) {
  if (owner == abandoned)
    throw sync_error("xtpu: this tensor was recorded by a thread that ended without xtpu::mark_step(); "
                     "it has no value");
  if (owner == discarded)
    throw sync_error("xtpu: this tensor was made by a step that xtpu::discard_step() dropped; it has no value "
                     "(record it again)");
  throw sync_error("xtpu: this tensor is pending in another thread's step; call xtpu::mark_step() in "
                   "that thread before reading it here (one pending step per thread)");
}

/// A step's bookkeeping map from nonzero 64-bit keys (a storage's address, a scalar's origin)
/// to 32-bit values given in increasing order: open addressing in a power-of-two table that
/// stays allocated across steps, cleared in time proportional to its entries — a step looks up
/// every leaf and scalar it records, and a node-based map allocated and freed one node each.
class slot_map {
 public:
  /// The value of `key`, after inserting `value` for it if it had none; and whether it did.
  std::pair<std::uint32_t, bool> try_emplace(std::uint64_t key, std::uint32_t value) {
    if (2 * (used_.size() + 1) > table_.size()) grow();
    for (std::size_t i = home(key);; i = (i + 1) & (table_.size() - 1)) {
      cell& c = table_[i];
      if (c.key == key) return {c.value, false};
      if (c.key == 0) {
        used_.push_back(static_cast<std::uint32_t>(i));  // may throw: nothing is changed yet
        c = cell{key, value};
        return {value, true};
      }
    }
  }
  /// The value of `key`, or `none`.
  static constexpr std::uint32_t none = UINT32_MAX;
  std::uint32_t find(std::uint64_t key) const noexcept {
    if (table_.empty()) return none;
    for (std::size_t i = home(key);; i = (i + 1) & (table_.size() - 1)) {
      if (table_[i].key == key) return table_[i].value;
      if (table_[i].key == 0) return none;
    }
  }
  void clear() noexcept {
    for (std::uint32_t i : used_) table_[i].key = 0;
    used_.clear();
  }
  /// Removes the entries whose value is `value` or more: the latest inserted (a failed record's).
  /// No probe path of an earlier entry crosses a later one's cell (linear probing, no deletions,
  /// growth re-places in insertion order), so emptying those cells keeps every other entry found.
  void drop_from(std::uint32_t value) noexcept {
    while (!used_.empty() && table_[used_.back()].value >= value) {
      table_[used_.back()].key = 0;
      used_.pop_back();
    }
  }

 private:
  struct cell {
    std::uint64_t key = 0;
    std::uint32_t value = 0;
  };
  std::size_t home(std::uint64_t key) const noexcept { return fibonacci_home(key, table_.size()); }
  void place(const cell& c) noexcept {  // c.key absent, room reserved
    std::size_t i = home(c.key);
    while (table_[i].key != 0) i = (i + 1) & (table_.size() - 1);
    table_[i] = c;
    used_.push_back(static_cast<std::uint32_t>(i));
  }
  void grow() {
    const std::size_t n = table_.empty() ? 64 : 2 * table_.size();
    std::vector<cell> old;
    old.reserve(used_.size());
    for (std::uint32_t i : used_) old.push_back(table_[i]);
    std::vector<cell> table(n);
    std::vector<std::uint32_t> used;
    used.reserve(n / 2);
    table_.swap(table);
    used_.swap(used);
    for (const cell& c : old) place(c);
  }
  std::vector<cell> table_;
  std::vector<std::uint32_t> used_;  // the cells in use, in insertion order
};

/// LRU cache of compiled plans, shared by all threads. XTPU_CACHE_SIZE entries (default 1024).
class plan_cache {
 public:
  static plan_cache& instance() {
    static plan_cache c;
    return c;
  }
  std::shared_ptr<const plan> find(std::uint64_t key, const std::vector<std::uint64_t>& sig) {
    std::lock_guard lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end() || it->second->signature != sig) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->compiled;
  }
  void insert(std::uint64_t key, std::vector<std::uint64_t> sig, std::shared_ptr<const plan> p, graph_sketch sketch) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.erase(it->second);
      index_.erase(it);
    }
    lru_.push_front(entry{key, std::move(sig), std::move(p), std::move(sketch)});
    index_[key] = lru_.begin();
    trim();
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return lru_.size();
  }
  /// The graph hash of the cached step closest to (sketch, sig) and how they differ; an
  /// empty hash when nothing is cached.
  std::pair<std::string, graph_diff> nearest(const graph_sketch& sketch, const std::vector<std::uint64_t>& sig) const {
    std::lock_guard lock(mu_);
    const entry* best = nullptr;
    std::pair<std::size_t, std::size_t> best_score{};
    for (const auto& e : lru_) {
      const auto score = closeness(sketch, sig, e.sketch, e.signature);
      if (best == nullptr || score > best_score) best = &e, best_score = score;
    }
    if (best == nullptr) return {};
    const auto h = graph_hash(best->signature);
    return {debug::hash_text(h.first, h.second), differences(best->sketch, best->signature, sketch, sig)};
  }
  /// config_error unless n is in cache_setting's range.
  std::size_t capacity() const {
    std::lock_guard lock(mu_);
    return capacity_;
  }
  void set_capacity(std::size_t n) {
    const std::size_t checked = settings::integer(cache_setting, n);
    std::lock_guard lock(mu_);
    capacity_ = checked;
    trim();
  }
  static constexpr settings::setting cache_setting{.name = "plan_cache_capacity", .env = "XTPU_CACHE_SIZE", .lo = 1,
                                                   .hi = 1'000'000, .setter = "xtpu::lazy::set_plan_cache_capacity"};
  void clear() {
    std::lock_guard lock(mu_);
    lru_.clear();
    index_.clear();
  }

 private:
  struct entry {
    std::uint64_t key;
    std::vector<std::uint64_t> signature;
    std::shared_ptr<const plan> compiled;
    graph_sketch sketch;  // to explain a later recompile
  };
  plan_cache() {
    const auto e = settings::from_env(cache_setting);
    capacity_ = e ? static_cast<std::size_t>(settings::integer(cache_setting, *e)) : 1024;
  }
  void trim() {
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
  }
  mutable spin_mutex mu_;  // taken by every step's lookup
  std::list<entry> lru_;
  std::unordered_map<std::uint64_t, std::list<entry>::iterator> index_;
  std::size_t capacity_ = 1024;
};

/// XTPU_CHECK_INDICES (lazy/index_check.hpp reads it): whether a statement's int32 indices and
/// labels are checked against their range when it is recorded, and a step's take and gather
/// indices (cross_entropy's labels among them) when it runs (step::execute).
inline constexpr settings::setting check_indices_setting{
    .name = "check_indices", .env = "XTPU_CHECK_INDICES", .lo = 0, .hi = 1, .setter = "xtpu::set_check_indices"};
inline std::atomic<bool>& check_indices_cell() {
  static std::atomic<bool> cell{settings::switch_from_env(check_indices_setting).value_or(false)};
  return cell;
}

/// The one message of an index out of range (index_error), when recorded or when run:
/// "xtpu: take<0> at f (a.cpp:3): index 9 at [1, 2] of the indices (2, 4) is outside [0, 8)
/// (XTPU_CHECK_INDICES is on; " + what_then + ")". k at flat position `at` of `dims`;
/// `allowed`: a value outside the range that is not an error (cross_entropy's ignore_index).
inline std::string index_error_text(std::int64_t k, std::size_t at, std::span<const std::size_t> dims, std::int64_t n,
                                    std::optional<std::int32_t> allowed, std::string_view op, std::string_view noun,
                                    std::string_view nouns, const xtpu::source_location& where, std::string_view what_then) {
  std::string place;
  for (std::size_t d = dims.size(), rest = at; d-- > 0; rest /= dims[d])
    place = std::to_string(rest % dims[d]) + (place.empty() ? "" : ", ") + place;
  std::string msg = "xtpu: " + std::string(op) + " at " + debug::detail::frame_text(where) + ": " + std::string(noun) + " " +
                    std::to_string(k) + " at [" + place + "] of the " + std::string(nouns) + " " + shape_text(dims) + " is outside [0, " +
                    std::to_string(n) + ")";
  if (allowed) msg += " and is not ignore_index (" + std::to_string(*allowed) + ")";
  return msg + " (" + std::string(check_indices_setting.env) + " is on; " + std::string(what_then) + ")";
}

}  // namespace xtpu::detail

namespace xtpu::settings {
namespace detail {
XTPU_RUNTIME_INLINE bool check_every_variable();
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE bool check_every_variable() {
  (void)device::default_device();  // XTPU_DEVICE, XTPU_MEMORY_FRACTION
  (void)kernels::detail::isa_cell();
  (void)kernels::detail::threads_cell();
  (void)kernels::detail::spin_cell();          // XTPU_SPIN_US
  (void)xtpu::detail::plan_cache::instance();  // XTPU_CACHE_SIZE
  (void)xtpu::detail::use_bf16_cell();         // XTPU_USE_BF16
  (void)xtpu::detail::check_indices_cell();    // XTPU_CHECK_INDICES
  (void)debug::detail::level_cell();           // XTPU_DEBUG
  (void)trace::detail::recorder::get();        // XTPU_TRACE: recording starts here
  trace::detail::recorder::listener().store(&xtpu::detail::follow_trace, std::memory_order_release);
  xtpu::detail::follow_trace(trace::enabled());  // the pool reports to a trace while one records
  return true;
}
#endif
}  // namespace detail
/// Reads and checks every XTPU_* variable (settings.hpp's rule); the first bad one throws, and
/// keeps throwing until it is fixed. The first tensor or step of a program calls it, so a bad
/// setting fails at start-up, not inside the first matmul.
inline void check_environment() {
  static const bool checked = detail::check_every_variable();
  (void)checked;
}
}  // namespace xtpu::settings

namespace xtpu::detail {

/// After a step of this thread ran: once nothing is pending, no host state is left to undo.
inline void settle_thread() noexcept;

/// The line this thread's statements are recorded for while a library call records them on
/// the user's behalf (xtpu::backward, an optimizer's step): that call's, not the library's own.
inline const xtpu::source_location*& recording_site() noexcept {
  thread_local const xtpu::source_location* site = nullptr;
  return site;
}
/// Statements recorded in this scope (on this thread) show `where` as their line; the outermost
/// scope wins (optimizer_step's line, not its step()'s).
class site_scope {
 public:
  explicit site_scope(const xtpu::source_location& where) noexcept : saved_(recording_site()), where_(where) {
    if (saved_ == nullptr) recording_site() = &where_;
  }
  site_scope(const site_scope&) = delete;
  site_scope& operator=(const site_scope&) = delete;
  ~site_scope() { recording_site() = saved_; }

 private:
  const xtpu::source_location* saved_;
  xtpu::source_location where_;
};

/// One thread's pending work on one chip. Every buffer it allocates is on that chip, and its
/// plans are compiled for it (the chip is part of the key).
class step {
 public:
  explicit step(chip& c) noexcept : chip_(&c) {}
  step(const step&) = delete;
  step& operator=(const step&) = delete;
  ~step() { abandon(); }

  /// This thread's step on chip c (one pending step per thread and device).
  static step& of(chip& c);
  /// Runs every step this thread has pending, on every device, in the order the devices were
  /// first used by this thread.
  static void run_all(const debug::trigger& why);

  chip& on() const noexcept { return *chip_; }
  /// Whether s is computed by this step or read by one of its statements.
  bool holds(const storage* s) const noexcept {
    return s->owner.load(std::memory_order_relaxed) == this ||
           externals_.find(reinterpret_cast<std::uintptr_t>(s)) != slot_map::none;
  }

  std::size_t size() const noexcept { return stmts_.size(); }

  /// Records `out = e` with its reverse-mode rule (null: none), written at `where` (the
  /// recording_site() instead, when one is set); returns the (pending) storage of the result.
  /// Strong guarantee.
  template <class E>
  std::shared_ptr<storage> record(const E& e, vjp_fn vjp = nullptr, const xtpu::source_location& where = {}) {
    constexpr const auto& table = program<E>::kernels;
    constexpr const auto& fused = program<E>::fused;
    return record_erased(&e, &collect_of<E>, E::fingerprint, table.data(), static_cast<std::uint32_t>(table.size()),
                         program<E>::has_fused ? fused.data() : nullptr, vjp, where);
  }

  /// Statement i as recorded, and the leaves and scalars it captured (post-order, as
  /// detail::collect hands them over). Recording another statement may move both arrays.
  const statement& statement_at(std::size_t i) const noexcept { return stmts_[i]; }
  const std::shared_ptr<storage>* leaves_of(const statement& st) const noexcept { return leaves_.data() + st.leaf_begin; }
  const double* scalars_of(const statement& st) const noexcept { return scalars_.data() + st.scalar_begin; }
  const std::uint64_t* origins_of(const statement& st) const noexcept { return origins_.data() + st.scalar_begin; }

  /// The plan of what is pending, as text (lazy/plan.hpp's dump), compiling it if it is not
  /// cached — so the next mark_step() of the same step is a cache hit. Runs nothing.
  std::string explain();

  /// Drops everything pending (xtpu::discard_step). A result that someone outside the step
  /// holds gets back the value its assignment replaced (the first value before this step, down
  /// the chain of assignments within it); other results get no value (discarded). Strong
  /// guarantee: out_of_memory only when a replaced value is held twice and its copy does not fit.
  void discard();

  /// Compiles (or finds) and runs everything pending. On an exception the step stays pending
  /// as it was recorded: the run holds no tensor alive afterwards and every buffer it allocated
  /// is freed, so it can be retried any number of times, after dropping pending tensors or
  /// freeing memory.
  void run(const debug::trigger& why);

 private:
  /// Undoes compiled(): forgets the live outputs and drops the liveness words appended after g0.
  void undo_compiled(std::size_t g0) noexcept {
    outputs_.clear();
    signature_.resize(g0);
  }

  /// The plan of what is pending, from the cache or built now (listing the live outputs in
  /// outputs_ and appending the liveness and donation words and the trailer — bf16 storage,
  /// the chip — to signature_; the caller undoes both). `why`: what runs the step (null: explain(), which runs nothing) —
  /// a compile is then reported (XTPU_DEBUG) and checked against no_recompile_after.
  std::shared_ptr<const plan> compiled(counters& c, const debug::trigger* why) {
    hold_live_outputs();
    find_donatable();
    const std::size_t tail = signature_.size();  // the statements' words end here
    append_bits(stmts_.size(), [&](std::size_t i) { return outputs_[i] != nullptr; });
    const std::size_t donation = signature_.size();
    append_bits(n_external_, [&](std::size_t x) { return donatable_[x] != 0; });
    append_trailer(signature_, xtpu::use_bf16(), chip_->serial());
    const std::uint64_t key = plan_key(signature_);

    auto& cache = plan_cache::instance();
    std::shared_ptr<const plan> p = cache.find(key, signature_);
    if (p) {
      c.cached.add();
      return p;
    }
    graph_sketch sketch = graph_sketch::of(stmts_, tail, donation, n_external_);
    const bool strict = why != nullptr && debug::detail::strict_now();
    const bool report = why != nullptr && debug::level() >= 1;
    debug::graph_info g;
    if (strict || report) {
      g = graph_info(*why);
      auto [closest, diff] = cache.nearest(sketch, signature_);
      g.closest = std::move(closest);
      g.kin = diff.kin;
      g.differs = std::move(diff.lines);
    }
    if (strict) throw compilation_error(late_compile_message(g));
    {
      time_sample t{c.compile_time};
      trace::detail::span traced("compile", "compile", trace_pid());
      live_.assign(outputs_.size(), 0);
      for (std::size_t i = 0; i < outputs_.size(); ++i) live_[i] = outputs_[i] != nullptr;
      p = std::make_shared<const plan>(
          planner(step_view<statement>{stmts_, signature_, live_, donatable_, external_bytes_, chip_->spec()}).build());
    }
    c.dead.add(static_cast<std::int64_t>(p->n_statements - p->stmts.size()));
    c.cse.add(static_cast<std::int64_t>(p->cse_eliminated));
    cache.insert(key, signature_, p, std::move(sketch));
    c.uncached.add();
    if (why != nullptr) {
      debug::detail::note_compile(g.differs.empty() ? std::string() : g.differs.front());
      if (report) debug::detail::emit(debug::analysis("Compilation", g));
    }
    return p;
  }

  /// This step as the debug blocks show it (outputs: the results a tensor outside the step
  /// holds — what it hands back, torch_xla's graph outputs —, not the live statements a kept
  /// one reads; call after compiled()).
  debug::graph_info graph_info(const debug::trigger& why) const {
    debug::graph_info g;
    std::tie(g.hash_hi, g.hash_lo) = graph_hash(signature_);
    g.inputs = n_external_;
    for (std::size_t i = 0; i < outputs_.size(); ++i) g.outputs += outputs_[i] != nullptr && held_outside(i);
    g.by = why;
    g.recorded = recorded_at(stmts_);
    return g;
  }

  /// The compilation_error of a compile after no_recompile_after took effect.
  static std::string late_compile_message(const debug::graph_info& g) {
    std::string m = "xtpu: a step compiled after xtpu::no_recompile_after took effect (step " +
                    std::to_string(debug::detail::clock::get().steps.load()) + ", run by " +
                    debug::detail::frame_text(g.by.where) + "): its graph " + debug::hash_text(g.hash_hi, g.hash_lo) + " is new";
    if (g.closest.empty()) {
      m += "; no graph is cached to compare it with (nothing compiled yet, or the cache was cleared)";
    } else {
      m += "; it differs from the closest cached graph " + g.closest + ":";
      if (g.kin.kind != debug::kinship::related) m += "\n  " + debug::kinship_text(g.kin);
      for (const auto& d : g.differs) m += "\n  " + d;
    }
    return m + "\nThe step stays pending and nothing is lost: call xtpu::allow_recompiles() to let it compile, or "
               "record the same statements (shapes, dtypes, wiring, kept results) every step";
  }

  /// outputs_[i] = the output of statement i if it is live, else null (the statement holds it
  /// for the whole run, so that the key's liveness and what runs agree). A statement is live
  /// when someone outside the step holds its result (more references than the statement's and
  /// the step's own leaves and links), or when a live later statement reads it: dropping every
  /// tensor of a chain drops the chain.
  void hold_live_outputs() {
    const std::size_t n = stmts_.size();
    drop_unseen_links();
    outputs_.resize(n);
    for (std::size_t i = 0; i < n; ++i) outputs_[i] = stmts_[i].out.get();
    inner_refs_.assign(n, 0);
    for (const auto& l : leaves_)
      if (l->owner.load(std::memory_order_relaxed) == this) ++inner_refs_[l->producer];
    prev_links_.clear();  // an assignment's result holds the value it replaced (replace()): a reference of the step's own
    for (std::size_t i = 0; i < n; ++i)
      if (const storage* p = stmts_[i].out->previous.get()) {
        if (p->owner.load(std::memory_order_relaxed) == this) ++inner_refs_[p->producer];
        else prev_links_.push_back(p);
      }
    read_by_live_.assign(n, 0);
    for (std::size_t i = n; i-- > 0;) {
      if (!read_by_live_[i] && !held_outside(i)) outputs_[i] = nullptr;
      if (!outputs_[i]) continue;
      const statement& st = stmts_[i];
      for (std::uint32_t l = 0; l < st.n_leaves; ++l) {
        const storage& leaf = *leaves_[st.leaf_begin + l];
        if (leaf.owner.load(std::memory_order_relaxed) == this) read_by_live_[leaf.producer] = 1;
      }
    }
  }

  /// Whether someone outside the step holds statement i's result: more references than the
  /// statement's own and the step's leaves and links (inner_refs_, as hold_live_outputs counts them).
  bool held_outside(std::size_t i) const noexcept {
    return stmts_[i].out.use_count() > 1 + static_cast<long>(inner_refs_[i]);
  }

  /// A result nobody can see (statement::seen) lets go of the value its assignment replaced, as
  /// it did when results were freed with their last tensor: that link may have been the last
  /// holder of another result, latest first (a link to a later result, `a = c` after `c = x;
  /// a = y`, takes another pass).
  void drop_unseen_links() noexcept {
    for (bool again = true; again;) {
      again = false;
      for (std::size_t i = stmts_.size(); i-- > 0;) {
        auto& out = stmts_[i].out;
        if (out.use_count() != 1 || !out->previous) continue;
        const storage& p = *out->previous;
        again |= p.owner.load(std::memory_order_relaxed) == this && p.producer > i && out->previous.use_count() == 2;
        out->previous.reset();
      }
    }
  }

  /// record's body, which does not depend on the expression's type: one copy per program, not
  /// one per statement type. collect(e, r) hands e's leaves and scalars to r.
  /// (not inlined: one copy per program)
  std::shared_ptr<storage> record_erased(const void* e, void (*collect)(const void*, recorder&), std::uint64_t fingerprint,
                                         const kernel_desc* kernels, std::uint32_t n_kernels, const kernel_desc* fused,
                                         vjp_fn vjp, const xtpu::source_location& where);
  template <class E>
  static void collect_of(const void* e, recorder& r) {
    static_cast<const E*>(e)->collect(r);
  }

  /// The slot code of step scalar i: the first scalar of this step with the same origin (a
  /// copy of the same scalar node), else i itself. It keys common subexpressions by slot, not
  /// value: a new value never recompiles, and equal values from different nodes stay apart.
  std::uint64_t scalar_slot(std::size_t i) {
    const std::uint64_t o = origins_[i];
    if (o == 0) return i;
    return scalar_slots_.try_emplace(o, static_cast<std::uint32_t>(i)).first;
  }

  /// Appends n bits (bit(i)) to the signature, 64 to a word: the key sees them exactly.
  template <class F>
  void append_bits(std::size_t n, F bit) {
    std::uint64_t word = 0;
    for (std::size_t i = 0; i < n; ++i) {
      word |= std::uint64_t{bit(i)} << (i % 64);
      if (i % 64 == 63 || i + 1 == n) {
        signature_.push_back(word);
        word = 0;
      }
    }
  }

  /// donatable_[x]: only the step's own leaves still refer to external tensor x, so its buffer
  /// may become an output (plan.hpp's donate_buffers decides where); external_bytes_[x]: its size.
  /// Every leaf of x holds the same storage, so its first leaf (ext_leaves_, counted with the
  /// others as they were recorded) speaks for them all.
  void find_donatable() {
    ext_refs_.resize(n_external_);
    external_bytes_.resize(n_external_);
    donatable_.resize(n_external_);
    for (std::uint32_t x = 0; x < n_external_; ++x) ext_refs_[x] = ext_leaves_[x].refs;
    for (const storage* p : prev_links_)  // a replaced value the step reads may still give its buffer
      if (const std::uint32_t x = externals_.find(reinterpret_cast<std::uintptr_t>(p)); x != slot_map::none) ++ext_refs_[x];
    for (std::uint32_t x = 0; x < n_external_; ++x) {
      const auto& leaf = leaves_[ext_leaves_[x].first];
      external_bytes_[x] = leaf->buffer.bytes();
      donatable_[x] = leaf.use_count() == static_cast<long>(ext_refs_[x]);
    }
  }

  std::uint64_t wire(const storage& s) {
    if (s.dev != chip_) throw_device_mismatch(*chip_, *s.dev);
    const void* o = s.owner.load(std::memory_order_acquire);
    if (o == this) return step_output_code(s.producer);
    if (o != nullptr) throw_not_readable(o);
    const auto [x, inserted] = externals_.try_emplace(reinterpret_cast<std::uintptr_t>(&s), n_external_);
    if (inserted) ++n_external_;
    return external_code(x);
  }

  void execute(const plan& p) {
    auto& c = counters::get();
    time_sample t{c.execute_time};
    const int pid = trace_pid();
    trace::detail::span traced("execute", "execute", pid);
    const kernels::detail::job_tag_scope tag(pid);  // pool work is traced on this chip's track
    // 1. every allocation first: a throw here leaves the step pending and intact (run() takes
    // back what the outputs got)
    req_of_.clear();
    req_bytes_.clear();
    req_charged_.clear();
    for (const auto& sp : p.stmts) {
      const statement& st = stmts_[sp.stmt];
      const kernel_desc& kd = st.kernels[st.n_kernels - 1];
      // an input's buffer is taken when the loop runs — if it carries the charge this output
      // would (a float buffer made under use_bf16 does not become an int32 output's)
      const std::size_t donor_charged =
          sp.donor >= 0 ? leaves_[st.leaf_begin + static_cast<std::uint32_t>(sp.donor)]->buffer.charged() : 0;
      const std::size_t charge = p.output_charge(kd, sp, donor_charged);
      if (charge == 0 && sp.donor >= 0) {
        req_of_.push_back(-1);
      } else {
        req_of_.push_back(static_cast<std::int32_t>(req_bytes_.size()));
        req_bytes_.push_back(kd.bytes);
        req_charged_.push_back(charge);
      }
    }
    req_ptrs_.assign(req_bytes_.size(), nullptr);
    chip_->allocate_n(req_bytes_.size(), req_bytes_.data(), req_charged_.data(), "step output", req_ptrs_.data());
    for (std::size_t i = 0; i < p.stmts.size(); ++i)  // no throw: adopting a block takes nothing
      if (const std::int32_t r = req_of_[i]; r >= 0) {
        const auto k = static_cast<std::size_t>(r);
        output(p, i).buffer = device_buffer(device_buffer::adopt_t{}, *chip_, req_ptrs_[k], req_bytes_[k], req_charged_[k]);
      }
    if (arena_.bytes() < p.arena_bytes) {
      arena_grown_ = true;
      arena_ = device_buffer();
      arena_ = device_buffer(*chip_, p.arena_bytes, "step arena (temporaries)");
    }
    // 2. run, statement by statement (a multi-output loop: its statements block by block); a
    // take or gather notes an index out of range in faults_ when the check is on
    checking_ = check_indices_cell().load(std::memory_order_relaxed) ? &faults_ : nullptr;
    if (checking_) faults_.clear();
    leaf_ptrs_.resize(p.leaf_slots);
    leaf_versions_.resize(p.leaf_slots);
    temp_ptrs_.resize(p.temps.size());
    bounds_.resize(p.stmts.size());
    for (std::size_t i = 0; i < p.stmts.size(); ++i) {
      const auto& sp = p.stmts[i];
      const statement& st = stmts_[sp.stmt];
      if (sp.op_begin < sp.op_end && p.ops[sp.op_begin].in_group) continue;  // ran in its group's loop
      if (sp.op_begin < sp.op_end && p.ops[sp.op_end - 1].group > 1) {
        trace::detail::span kernel("kernel", "loop", pid);
        if (kernel.active()) {
          kernel.rename("loop of " + std::to_string(p.ops[sp.op_end - 1].group) + " outputs");
          kernel.add_args("\"first statement\": " + std::to_string(sp.stmt) + ", \"elements\": " +
                          std::to_string(st.kernels[st.n_kernels - 1].elements));
        }
        run_group(p, i, p.ops[sp.op_end - 1].group);
        c.kernels.add();
        continue;
      }
      bind(p, i);
      for (std::uint32_t o = sp.op_begin; o < sp.op_end; ++o) {
        const plan::op& op = p.ops[o];
        const kernel_desc& kd = planner::kernel(op, st);
        const bool to_output = planner::writes_output(op, st);
        if (to_output) donate(p, i);
        void* dst = to_output ? output(p, i).buffer.data() : const_cast<void*>(temp_ptrs_[sp.temp_begin + op.kernel]);
        if (op.copy) {
          std::memcpy(dst, where(p, op.src), kd.bytes);
        } else {
          trace::detail::span kernel("kernel", kd.kind, pid);
          if (kernel.active()) trace_kernel(kernel, kd, sp.stmt);
          kd.run(bounds_[i], dst);
          c.kernels.add();
        }
        if (to_output && p.rounds(kd)) {  // a float tensor stored as bf16, before anything reads it
          auto* f = static_cast<float*>(dst);
          detail::for_ranges(kd.elements, detail::loop_grain, [f](std::size_t b0, std::size_t b1) { round_to_bf16(f, b0, b1); });
        }
      }
    }
    if (p.mxu.cycles) {
      c.mxu_cycles.add(static_cast<std::int64_t>(p.mxu.cycles));
      c.mxu_utilization.add_sample(100.0 * p.mxu.utilization());
    }
    for (const auto& sp : p.stmts) {
      storage& out = *outputs_[sp.stmt];
      out.previous.reset();  // computed: nothing to give back any more
      out.owner.store(nullptr, std::memory_order_release);
    }
    if (checking_ && faults_.seen()) fault_at_ = stmts_[p.stmts[faults_.statement()].stmt].where;
    checking_ = nullptr;
    forget();
  }

  /// Where a plan location is now: the arena, a live statement's output, or nowhere.
  /// This chip's process in a trace (pid 0 is the host), named on first use.
  int trace_pid() const {
    return xtpu::detail::trace_pid(*chip_);
  }
  /// A kernel's trace event: its kind, and for a matmul its shape and the cycle model's MXU
  /// utilization on this chip.
  void trace_kernel(trace::detail::span& s, const kernel_desc& kd, std::uint32_t stmt) const {
    std::string args = "\"statement\": " + std::to_string(stmt) + ", \"result\": " + trace::detail::json_string(describe(kd));
    if (kd.mm_passes) {
      s.rename(std::string(kd.kind) + " " + matmul_text(kd));
      const auto cost = mxu::estimate(kd.mm_m, kd.mm_k, kd.mm_n, kd.mm_batch, kd.mm_passes, chip_->spec());
      char u[32];
      std::snprintf(u, sizeof u, "%.2f", 100.0 * cost.utilization());
      args += ", \"m\": " + std::to_string(kd.mm_m) + ", \"k\": " + std::to_string(kd.mm_k) + ", \"n\": " +
              std::to_string(kd.mm_n) + ", \"batch\": " + std::to_string(kd.mm_batch) + ", \"passes\": " +
              std::to_string(kd.mm_passes) + ", \"mxu_cycles\": " + std::to_string(cost.cycles) +
              ", \"mxu_utilization_percent\": " + u;
    } else {
      args += ", \"elements\": " + std::to_string(kd.elements);
    }
    s.add_args(args);
  }

  void* where(const plan& p, const plan::loc& l) const {
    if (l.arena >= 0) return static_cast<std::byte*>(arena_.data()) + l.arena;
    return l.output >= 0 ? output(p, static_cast<std::size_t>(l.output)).buffer.data() : nullptr;
  }
  /// The pointers live statement i reads (its leaves, scalars and temps), as bounds_[i].
  void bind(const plan& p, std::size_t i) {
    const auto& sp = p.stmts[i];
    const statement& st = stmts_[sp.stmt];
    for (std::uint32_t l = 0; l < st.n_leaves; ++l) {
      leaf_ptrs_[sp.leaf_slot + l] = leaves_[st.leaf_begin + l]->buffer.data();
      leaf_versions_[sp.leaf_slot + l] = leaves_[st.leaf_begin + l]->buffer.version();
    }
    for (std::uint32_t k = 0; k + 1 < st.n_kernels; ++k) temp_ptrs_[sp.temp_begin + k] = where(p, p.temps[sp.temp_begin + k]);
    bounds_[i] = bound{leaf_ptrs_.data() + sp.leaf_slot, scalars_.data() + st.scalar_begin, temp_ptrs_.data() + sp.temp_begin,
                       leaf_versions_.data() + sp.leaf_slot, p.round_bf16, sp.ready_temps, checking_,
                       static_cast<std::uint32_t>(i)};
  }
  /// Live statement i's output takes its donor input's buffer (after bind: the loop still
  /// reads the input through the pointer bind took).
  void donate(const plan& p, std::size_t i) {
    const auto& sp = p.stmts[i];
    if (sp.donor < 0) return;
    auto& out = output(p, i).buffer;
    if (!out) {
      out = std::move(leaves_[stmts_[sp.stmt].leaf_begin + static_cast<std::uint32_t>(sp.donor)]->buffer);
      out.touch();  // written in place: new values
    }
  }
  /// Live statements [first, first + n): one loop, block by block, each writing its output.
  void run_group(const plan& p, std::size_t first, std::size_t n) {
    for (std::size_t j = first; j < first + n; ++j) {
      bind(p, j);
      donate(p, j);
    }
    group_out_.resize(n);
    group_run_.resize(n);
    group_round_.resize(n);
    for (std::size_t j = 0; j < n; ++j) {
      const statement& st = stmts_[p.stmts[first + j].stmt];
      group_out_[j] = output(p, first + j).buffer.data();
      group_run_[j] = st.kernels[st.n_kernels - 1].run_range;
      group_round_[j] = p.rounds(st.kernels[st.n_kernels - 1]);
    }
    const std::size_t elements = stmts_[p.stmts[first].stmt].kernels[0].elements;
    constexpr std::size_t block = 2048;  // elements: every stream of the group stays in L1/L2 between statements
    // threads take ranges of blocks; an element's value depends on no other, so the split changes no bit
    detail::for_ranges(elements, detail::loop_grain / n, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t b0 = r0; b0 < r1; b0 += block) {
        const std::size_t b1 = std::min(r1, b0 + block);
        for (std::size_t j = 0; j < n; ++j) {  // a later statement of the group reads this block as stored
          group_run_[j](bounds_[first + j], group_out_[j], b0, b1);
          if (group_round_[j]) round_to_bf16(static_cast<float*>(group_out_[j]), b0, b1);
        }
      }
    });
  }
  /// The output of the plan's i-th live statement (listed in outputs_ by hold_live_outputs).
  storage& output(const plan& p, std::size_t i) const noexcept { return *outputs_[p.stmts[i].stmt]; }

  /// The thread ends with statements pending: their values will never exist.
  void abandon() noexcept {
    for (auto& st : stmts_) {
      st.out->owner.store(abandoned, std::memory_order_release);
      st.out->previous.reset();
    }
    forget();
  }
  void forget() noexcept {
    stmts_.clear();
    leaves_.clear();
    scalars_.clear();
    origins_.clear();
    scalar_slots_.clear();
    signature_.clear();
    externals_.clear();
    n_external_ = 0;
    ext_leaves_.clear();
    outputs_.clear();
  }

  chip* chip_;
  std::vector<statement> stmts_;
  std::vector<std::shared_ptr<storage>> leaves_;
  std::vector<double> scalars_;
  std::vector<std::uint64_t> origins_;                          // per scalar (recorder)
  slot_map scalar_slots_;  // origin -> its first scalar
  std::vector<std::uint64_t> signature_;
  slot_map externals_;  // storage address -> its external number
  std::uint32_t n_external_ = 0;
  struct external_leaves {
    std::uint32_t first;  // the first leaf (leaves_) that reads it
    std::uint32_t refs;   // the step's leaves holding it
  };
  std::vector<external_leaves> ext_leaves_;  // per external tensor, as recorded
  // scratch, reused across steps
  std::vector<storage*> outputs_;  // per statement, while a run is under way (null: dead; stmts_ holds them)
  std::vector<const void*> leaf_ptrs_, temp_ptrs_;  // over all live statements (plan::stmt_plan slots)
  std::vector<std::uint64_t> leaf_versions_;       // parallel to leaf_ptrs_
  std::vector<bound> bounds_;                        // per live statement
  std::vector<void*> group_out_;
  std::vector<char> group_round_;  // group statement j's float output is rounded to bf16 block by block
  std::vector<void (*)(const bound&, void*, std::size_t, std::size_t)> group_run_;
  std::vector<std::uint32_t> ext_refs_;            // per external tensor: its leaves' count plus the replaced values linking to it
  std::vector<std::uint64_t> external_bytes_;      // per external tensor
  std::vector<char> donatable_;                    // per external tensor
  std::vector<char> live_;                         // per statement, for the planner: outputs_[i] != null
  std::vector<std::uint32_t> inner_refs_;  // per statement: the step's own leaves and links holding its output
  std::vector<const storage*> prev_links_;  // values of earlier steps that this step's results replaced
  std::vector<char> read_by_live_;         // per statement: a live later statement reads it
  std::vector<std::int32_t> req_of_;                   // per live statement: its allocation request, -1 if donated
  std::vector<std::size_t> req_bytes_, req_charged_;  // the step's output allocations (chip::allocate_n)
  std::vector<void*> req_ptrs_;
  device_buffer arena_;
  bool arena_grown_ = false;  // this run replaced the arena
  // XTPU_CHECK_INDICES while a run is under way: the loops' record (checking_: &faults_), and
  // the line of the statement whose index out of range it kept, for run() to throw (stmts_ is
  // forgotten at the end of execute)
  index_faults faults_;
  index_faults* checking_ = nullptr;
  std::optional<xtpu::source_location> fault_at_;
};

/// This thread's steps, one per chip it has recorded on, in the order first used.
class thread_steps {
 public:
  /// This thread's steps: a read of a thread_local pointer once made (inline, so that recording
  /// a statement calls nothing out of line), make() the first time on a thread.
  static thread_steps& get() {
    if (thread_steps* t = this_thread_) [[likely]]
      return *t;
    return make();
  }
  step& of(chip& c) {
    if (last_ != nullptr && &last_->on() == &c) return *last_;
    return find_or_add(c);
  }
  template <class F>
  void for_each(F f) {
    for (std::size_t i = 0; i < steps_.size(); ++i) f(*steps_[i]);
  }
  /// Every step discarded (step::discard), then the host state recorded with them undone,
  /// latest first.
  void discard() {
    for (auto& s : steps_) s->discard();
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
    clear_undo();
  }
  /// undo() runs if the pending work is discarded (it checks that what it restores still lives).
  void on_discard(std::function<void()> undo) { undo_.push_back(std::move(undo)); }
  /// Names the undo list until it is next cleared, unique across threads: a value kept once in
  /// it needs no second snapshot (undone latest first, the first snapshot is what stays).
  std::uint64_t undo_list() const noexcept { return undo_list_; }
  /// Once nothing is pending, nothing is left to undo — unless held: batch_fallback keeps what
  /// its micro-batches' steps changed undoable until the whole step is done.
  void settle() noexcept {
    if (undo_.empty() || holds_ != 0) return;
    for (const auto& s : steps_)
      if (s->size() != 0) return;
    clear_undo();
  }

 private:
  static constinit inline thread_local thread_steps* this_thread_ = nullptr;
  static thread_steps& make();
  step& find_or_add(chip& c);
  std::vector<std::unique_ptr<step>> steps_;
  step* last_ = nullptr;
  std::vector<std::function<void()>> undo_;
  std::uint64_t undo_list_ = next_list();
  static std::uint64_t next_list() noexcept {
    static std::atomic<std::uint64_t> n{1};
    return n.fetch_add(1, std::memory_order_relaxed);
  }
  void clear_undo() noexcept {
    undo_.clear();
    undo_list_ = next_list();
  }

 public:
  void hold() noexcept { ++holds_; }
  void release() noexcept {
    --holds_;
    settle();
  }
  /// Whether o is one of this thread's steps.
  bool owns(const void* o) const noexcept {
    for (const auto& s : steps_)
      if (s.get() == o) return true;
    return false;
  }

 private:
  std::size_t holds_ = 0;
};

inline void settle_thread() noexcept { thread_steps::get().settle(); }

/// handle = next for an assignment: when this thread's pending step computes next, and that
/// step holds the value handle had (reads it, or computes it too), next keeps that value until
/// the step runs, so that xtpu::discard_step() can give it back. A value the step does not hold
/// is not kept — it is freed here, as before the step, costing no memory; a parameter or an
/// optimizer's state is always read by its update. A value has one link: the first assignment
/// of it to a tensor (or slot) that held another value; a later copy of it elsewhere shares it,
/// and its fate (docs/lazy.md#dropping-a-step). A value already in handle's chain (`a = c`
/// after `c = a; a = e`) is not linked again: no cycle. A value only `next` and its statement
/// hold is in no chain (a link holds its value): `t = e`, a statement recorded just now, links
/// without a walk (a walk each time would make k assignments to one tensor in a step O(k^2)).
inline void replace(std::shared_ptr<storage>& handle, std::shared_ptr<storage> next) noexcept {
  if (next && !next->previous && handle) {
    const void* o = next->owner.load(std::memory_order_relaxed);
    if (thread_steps::get().owns(o) && static_cast<const step*>(o)->holds(handle.get())) {
      bool in_chain = false;
      if (next.use_count() > 2)  // next pends in this thread's step: its statement holds it too
        for (const storage* p = handle.get(); p != nullptr && !in_chain; p = p->previous.get()) in_chain = p == next.get();
      if (!in_chain) next->previous = std::move(handle);
    }
  }
  handle = std::move(next);
}
/// replace() for a result this thread recorded just now (linked to nothing, in no chain).
inline void replace_fresh(std::shared_ptr<storage>& handle, std::shared_ptr<storage> next) noexcept {
  if (handle && static_cast<const step*>(next->owner.load(std::memory_order_relaxed))->holds(handle.get()))
    next->previous = std::move(handle);
  handle = std::move(next);
}
/// Statements this thread has pending, on every device.
inline std::size_t thread_pending() {
  std::size_t n = 0;
  thread_steps::get().for_each([&](const step& s) { n += s.size(); });
  return n;
}

/// A value of the host that belongs to the pending work, as an optimizer's step counts do:
/// keep_for_discard() before changing it, and xtpu::discard_step() gives that value back (one
/// snapshot per pending step: the value before it). Copies (and moves) copy the value.
template <class T>
class undoable {
 public:
  explicit undoable(T v) : cell_(std::make_shared<T>(std::move(v))) {}
  undoable(const undoable& o) : cell_(std::make_shared<T>(*o.cell_)) {}  // kept in no list
  undoable& operator=(const undoable& o) {
    *cell_ = *o.cell_;
    return *this;
  }
  ~undoable() = default;
  T& operator*() noexcept { return *cell_; }
  const T& operator*() const noexcept { return *cell_; }
  T* operator->() noexcept { return cell_.get(); }
  const T* operator->() const noexcept { return cell_.get(); }
  void keep_for_discard() {
    auto& t = thread_steps::get();
    if (kept_in_ == t.undo_list()) return;  // the value before the step is kept already
    t.on_discard([weak = std::weak_ptr<T>(cell_), before = *cell_] {
      if (const auto c = weak.lock()) *c = before;
    });
    kept_in_ = t.undo_list();
  }

 private:
  std::shared_ptr<T> cell_;
  std::uint64_t kept_in_ = 0;  // the undo list holding its snapshot (thread_steps::undo_list)
};

#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE std::string step::explain() {
  if (stmts_.empty()) return "plan: nothing pending\n";
  struct guard {  // the step stays as recorded, whatever happens
    step& s;
    std::size_t g0 = s.signature_.size();
    ~guard() { s.undo_compiled(g0); }
  } undo{*this};
  return dump(*compiled(counters::get(), nullptr), stmts_, signature_);
}

XTPU_RUNTIME_INLINE void step::discard() {
  if (stmts_.empty()) return;
  const std::size_t n = stmts_.size();
  drop_unseen_links();
  std::vector<std::shared_ptr<storage>> outs(n);
  for (std::size_t i = 0; i < n; ++i) outs[i] = stmts_[i].seen();
  std::unordered_map<const storage*, long> internal;  // references the step itself holds
  for (const auto& o : outs)
    if (o) {
      internal[o.get()] += 2;  // outs and the statement
      if (o->previous) ++internal[o->previous.get()];
    }
  for (const auto& l : leaves_) ++internal[l.get()];
  struct restore {
    storage* to;
    std::shared_ptr<storage> from;  // the value replaced: computed before this step
    device_buffer copy;             // empty: `to` takes from's buffer
  };
  std::vector<restore> restores;
  struct replaced {
    long wanted = 0;     // the results that get it
    bool taken = false;  // its buffer went to one of them
  };
  std::unordered_map<const storage*, replaced> values;
  for (const auto& o : outs) {
    if (!o || o.use_count() <= internal[o.get()]) continue;  // only the step holds it: no one reads it
    std::shared_ptr<storage> r = o->previous;
    while (r && r->owner.load(std::memory_order_acquire) == this) r = r->previous;
    if (!r || r->owner.load(std::memory_order_acquire) != nullptr || !r->buffer) continue;
    ++values[r.get()].wanted;
    restores.push_back(restore{o.get(), std::move(r), {}});
  }
  // a replaced value no one else holds goes to its first result; every other one gets a copy
  for (auto& re : restores) {
    replaced& v = values[re.from.get()];
    const bool held = re.from.use_count() > internal[re.from.get()] + v.wanted;
    if (!held && !v.taken) {
      v.taken = true;
      continue;
    }
    re.copy = device_buffer(*re.from->dev, re.from->buffer.bytes(), "value restored by discard_step",
                            re.from->buffer.charged());
    std::memcpy(re.copy.data(), re.from->buffer.data(), re.from->buffer.bytes());
  }
  // nothing throws from here (every copy is made: a taken buffer can move)
  for (const auto& o : outs)
    if (o) o->owner.store(discarded, std::memory_order_release);
  for (auto& re : restores) {
    re.to->buffer = re.copy ? std::move(re.copy) : std::move(re.from->buffer);
    if (re.to->dev != re.from->dev) re.to->dev = re.from->dev;  // a chain across devices
    re.to->owner.store(nullptr, std::memory_order_release);
  }
  restores.clear();
  for (const auto& o : outs)
    if (o) o->previous.reset();
  outs.clear();
  forget();
}

XTPU_RUNTIME_INLINE void step::run(const debug::trigger& why) {
  if (stmts_.empty()) {
    settle_thread();
    return;
  }
  auto& c = counters::get();
  const std::size_t g0 = signature_.size();
  arena_grown_ = false;
  trace::detail::span traced("step", "step", trace_pid());
  if (traced.active())
    traced.add_args("\"cause\": " + trace::detail::json_string(debug::cause_text(why.why)) + ", \"called from\": " +
                    trace::detail::json_string(debug::detail::frame_text(why.where)) +
                    ", \"statements\": " + std::to_string(stmts_.size()));
  try {
    const auto p = compiled(c, &why);
    if (debug::level() >= 2) debug::detail::emit(debug::analysis("Execution", graph_info(why)));
    execute(*p);
  } catch (...) {
    for (auto& o : outputs_)  // outputs are fresh storages: nothing but this run gave them memory
      if (o) o->buffer = device_buffer();
    if (arena_grown_) arena_ = device_buffer();  // grown for this run: give it back
    undo_compiled(g0);
    throw;
  }
  settle_thread();
  if (fault_at_) {  // the step ran to its end; the index read 0
    const xtpu::source_location where = *std::exchange(fault_at_, std::nullopt);
    const index_site& site = faults_.site();
    throw index_error(index_error_text(faults_.value(), faults_.position(), site.dims, site.n, std::nullopt, site.text(),
                                       site.noun, site.nouns, where,
                                       "found when the step ran, which it did to its end " + std::string(site.outcome)));
  }
}

[[gnu::noinline]] XTPU_RUNTIME_INLINE std::shared_ptr<storage> step::record_erased(
    const void* e, void (*collect)(const void*, recorder&), std::uint64_t fingerprint, const kernel_desc* kernels,
    std::uint32_t n_kernels, const kernel_desc* fused, vjp_fn vjp, const xtpu::source_location& where) {
  const std::size_t l0 = leaves_.size(), s0 = scalars_.size(), g0 = signature_.size();
  const std::uint32_t x0 = n_external_;
  std::size_t counted = 0;  // leaves of external tensors counted in ext_leaves_
  std::shared_ptr<storage> out;
  try {
    out = new_storage(*chip_);
    recorder r{&leaves_, &scalars_, &origins_};
    collect(e, r);
    signature_.push_back(fingerprint);
    for (std::size_t i = l0; i < leaves_.size(); ++i) {
      const std::uint64_t code = wire(*leaves_[i]);
      signature_.push_back(code);
      if (is_step_output(code)) continue;
      const std::uint32_t x = code_index(code);
      if (x == ext_leaves_.size()) ext_leaves_.push_back({static_cast<std::uint32_t>(i), 0});
      ++ext_leaves_[x].refs;
      ++counted;
    }
    for (std::size_t i = s0; i < scalars_.size(); ++i) signature_.push_back(scalar_slot(i));
    // filled in place, field by field: a statement built aside and copied in was read back
    // wider than it was written (a store-forwarding stall, a quarter of recording's time)
    statement& st = stmts_.emplace_back();
    st.kernels = kernels;
    st.n_kernels = n_kernels;
    st.fused = fused;
    st.leaf_begin = static_cast<std::uint32_t>(l0);
    st.n_leaves = static_cast<std::uint32_t>(leaves_.size() - l0);
    st.scalar_begin = static_cast<std::uint32_t>(s0);
    st.sig_begin = static_cast<std::uint32_t>(g0);
    st.fusable = fused != nullptr;
    st.out = out;
    st.vjp = vjp;
    st.where = recording_site() != nullptr ? *recording_site() : where;
  } catch (...) {
    for (std::size_t g = g0 + 1; counted > 0; ++g)  // the counts this statement's leaves added
      if (!is_step_output(signature_[g])) --counted, --ext_leaves_[code_index(signature_[g])].refs;
    ext_leaves_.resize(x0);
    leaves_.resize(l0);
    scalars_.resize(s0);
    origins_.resize(s0);
    signature_.resize(g0);
    externals_.drop_from(x0);
    scalar_slots_.drop_from(static_cast<std::uint32_t>(s0));
    n_external_ = x0;
    throw;
  }
  out->producer = static_cast<std::uint32_t>(stmts_.size() - 1);
  out->owner.store(this, std::memory_order_release);
  return out;
}

XTPU_RUNTIME_INLINE thread_steps& thread_steps::make() {
  thread_local thread_steps t;
  return *(this_thread_ = &t);
}

XTPU_RUNTIME_INLINE step& thread_steps::find_or_add(chip& c) {
  for (auto& s : steps_)
    if (&s->on() == &c) return *(last_ = s.get());
  steps_.push_back(std::make_unique<step>(c));
  return *(last_ = steps_.back().get());
}

XTPU_RUNTIME_INLINE void step::run_all(const debug::trigger& why) {
  settings::check_environment();
  std::exception_ptr fault;  // an index out of range (XTPU_CHECK_INDICES): the other chips' steps run too
  thread_steps::get().for_each([&](step& s) {
    try {
      s.run(why);
    } catch (const index_error&) {
      if (!fault) fault = std::current_exception();
    }
  });
  if (fault) std::rethrow_exception(fault);
}
#endif  // XTPU_RUNTIME_BODIES

inline step& step::of(chip& c) { return thread_steps::get().of(c); }

/// The chip a leaf-free expression (zeros, random, a scalar) or the first tensor of an
/// expression lives on — where the statement `t = e` is recorded (step::wire checks the rest).
template <class N>
chip* first_chip(const N& n) {
  if constexpr (requires { n.storage(); }) {
    return n.storage()->dev;
  } else if constexpr (N::n_leaves == 0) {
    return nullptr;
  } else {  // the first child with a tensor under it (found by the compiler: one path is walked)
    constexpr std::size_t k = [] {
      return []<std::size_t... I>(std::index_sequence<I...>) {
        std::size_t first = sizeof...(I);
        ((first = first == sizeof...(I) && std::tuple_element_t<I, typename N::children>::n_leaves > 0 ? I : first), ...);
        return first;
      }(std::make_index_sequence<arity_v<N>>{});
    }();
    return first_chip(arg<k>(n));
  }
}
/// The step that records `t = e` in this thread: on the device of e's tensors, or this
/// thread's current device when e reads none.
template <class E>
step& step_for(const E& e) {
  settings::check_environment();
  chip* c = first_chip(e);
  return step::of(c ? *c : device::current().chip());
}

}  // namespace xtpu::detail

namespace xtpu {

/// Whether indices and labels are checked as statements are recorded and steps run
/// (XTPU_CHECK_INDICES=1; off by default: lazy/index_check.hpp says what is checked).
inline bool check_indices() { return detail::check_indices_cell().load(std::memory_order_relaxed); }
/// Turns the check on or off for the statements recorded and the steps run after it (on this
/// and every thread).
inline void set_check_indices(bool on) { detail::check_indices_cell().store(on, std::memory_order_relaxed); }

/// Runs everything pending in this thread as one step per device (compiled once per distinct
/// step, then reused). The torch_xla `xm.mark_step()`.
namespace detail {
/// mark_step's body, for the calls that run a step at a step's end (optimizer_step too).
XTPU_RUNTIME_INLINE void end_step(const debug::trigger& why);
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE void end_step(const debug::trigger& why) {
  counters::get().mark_step.add();
  try {
    step::run_all(why);
  } catch (const index_error&) {  // found as the steps ran (XTPU_CHECK_INDICES), which they did to their end
    debug::detail::note_step();
    throw;
  }
  debug::detail::note_step();
}
#endif
}  // namespace detail

/// Runs everything this thread has pending, on every device, as one step per device.
/// `where`: the caller (XTPU_DEBUG's "C++ Frame Triggered Execution").
inline void mark_step(xtpu::source_location where = xtpu::source_location::current()) {
  detail::end_step(debug::trigger{debug::cause::mark_step, where});
}

/// Drops everything this thread has pending, on every device, as if it had not been recorded —
/// after an out_of_memory, to go on with a smaller batch (docs/lazy.md#dropping-a-step). Each
/// value an assignment of the dropped work replaced is given back: a tensor assigned an
/// expression, a parameter, an optimizer's state (and its step counts, its master weights'
/// bookkeeping), a dropout stream. A tensor assigned another tensor shares that value and its
/// fate; a value the work made and no assignment linked has none (reading it is a sync_error).
/// Not undone: transfers (from_host: done when it returns) and zero_grad() — a dropped optimizer
/// step leaves the gradients cleared: a retried step recomputes them. A chain of assignments
/// across two devices goes back as far as the device discarded first allows.
/// out_of_memory if a value that two tensors hold needs a copy that does not fit: the devices
/// before it are dropped, the host values not yet given back — call it again after freeing memory.
inline void discard_step() { detail::thread_steps::get().discard(); }

/// After the next `steps` mark_step() calls, a step that needs a new plan throws
/// compilation_error (the step stays pending) with how its graph differs from the closest
/// cached one: a guard against a late recompile (torch_xla's "is CompileTime still growing?").
/// no_recompile_after(0): from now on. The steps are the process's (metrics/debug.hpp's clock:
/// every mark_step() of every thread), and so is the guard: it holds in every thread.
inline void no_recompile_after(std::size_t steps) {
  auto& c = debug::detail::clock::get();
  c.strict_from.store(c.steps.load() + static_cast<std::int64_t>(steps));
}
/// Lets every step compile again (undoes no_recompile_after).
inline void allow_recompiles() { debug::detail::clock::get().strict_from.store(-1); }

namespace lazy {
/// Statements recorded in this thread on device d (by default the current one) and not yet run.
inline std::size_t pending_statements(const device& d = device::current()) { return detail::step::of(d.chip()).size(); }
/// The plan mark_step() would run for this thread's pending statements on device d (by
/// default the current one), as text: dead statements, each op (matmul dims, reductions,
/// fused loops, epilogue fusion, copies of common subexpressions) and where its value goes.
/// Compiles the step if it is not cached (so the next mark_step() is a hit); runs nothing.
inline std::string explain(const device& d = device::current()) {
  settings::check_environment();
  return detail::step::of(d.chip()).explain();
}
/// Compiled plans held by the cache (all threads).
inline std::size_t plan_cache_entries() { return detail::plan_cache::instance().size(); }
/// Sets how many plans the LRU cache keeps (XTPU_CACHE_SIZE sets the initial value).
inline void set_plan_cache_capacity(std::size_t n) { detail::plan_cache::instance().set_capacity(n); }
inline std::size_t plan_cache_capacity() { return detail::plan_cache::instance().capacity(); }
/// Drops every compiled plan (the next steps compile again).
inline void clear_plan_cache() { detail::plan_cache::instance().clear(); }
}  // namespace lazy

}  // namespace xtpu
