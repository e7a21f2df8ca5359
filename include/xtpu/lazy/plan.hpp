// xtpu/lazy/plan.hpp — compiling a step: the plan and the passes that build it.
//
// Provides: detail::statement_core / statement (what recording a statement leaves: what the
// passes read, and the step's bookkeeping besides), detail::plan (what to run, where every
// value lives, plan::output_charge: what a run allocates for an output), detail::step_view<Stmt>
// and detail::basic_planner<Stmt> (the passes, in order; constexpr, so memory::tape runs them at
// compile time over statement_core, and detail::planner is the step's), detail::dump(plan) (a
// readable listing; xtpu::lazy::explain() prints the pending step's).
// The passes, each a function of its own over the state the earlier ones left:
//   1. live_statements  — a statement runs only if its output is live (step_view::live; step.hpp
//                         decides that, and counts the rest as DeadStatements)
//   2. number_values    — every kernel's value gets a number from its structure and inputs, so a
//                         value computed before (in this statement or an earlier one) is not
//                         computed again (plan::cse_eliminated, step.hpp's CseEliminated); with
//                         its first and last use
//   3. fuse_epilogues   — `t = f(matmul(a, b), ...)` becomes one kernel where the matmul's value
//                         is not shared
//   4. group_loops      — consecutive statements that are each one elementwise loop over the
//                         same number of elements, reading each other's results only at the
//                         element being computed, run as one loop with several outputs (block
//                         by block: an AdamW update of p, m and v is one pass over memory)
//   5. schedule         — the ops in program order and each statement's temp slots, marking
//                         those an earlier statement computed (ready_temps: a row loop reads
//                         such a reduction instead of reducing again)
//   6. donate_buffers   — a loop whose input tensor is read by nothing after it and held by
//                         nobody outside the step writes its result into that tensor's buffer
//                         (XLA's input/output aliasing); only where nothing that can throw runs
//                         after it, so a failed step never loses a value
//   7. cost             — the cycle model of every matmul the plan runs, on the device
//   8. place_buffers    — temporaries packed into one arena by lifetime (first fit, 64-byte
//                         aligned); each other statement's result has a buffer of its own
// Signature of a statement: its fingerprint, a wiring code per leaf (an external tensor is its
// number; the output of statement p of this step is (1 << 32) | p — made and read only by the
// four functions below), then a slot code per scalar (step.hpp's scalar_slot). A step's
// signature ends in its trailer (append_trailer / trailer: bf16 storage, then the chip).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "xtpu/config.hpp"
#include "xtpu/device/device.hpp"
#include "xtpu/eval/program.hpp"
#include "xtpu/metrics/metrics.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::detail {

class step;
struct backward_state;
/// The reverse-mode rule of a recorded statement (lazy/grad.hpp's vjp_entry<E>: given the
/// statement's number and the gradient of its result), or null for a statement gradients do not
/// flow through (no floating leaf, recorded under no_grad, or itself a gradient statement).
using vjp_fn = void (*)(step&, std::uint32_t, const std::shared_ptr<storage>&, backward_state&);

/// What the passes read of a recorded statement: its kernel table and where its captures and
/// signature words start (a literal type: memory::tape builds these at compile time).
struct statement_core {
  const kernel_desc* kernels;
  std::uint32_t n_kernels;
  const kernel_desc* fused;  // the one-kernel matmul+epilogue alternative, or null
  std::uint32_t leaf_begin, n_leaves, scalar_begin, sig_begin;
  bool fusable;              // fused is set (the planner asks this, not the pointer: kernel_desc::ranged says why)
};

/// What recording `t = e` leaves in the step.
struct statement : statement_core {
  // the result, held by the step until it runs, is discarded or its thread ends (a count of
  // one: nobody else can see it; a strong reference, so that finding the live results takes
  // no atomic read-modify-write)
  std::shared_ptr<storage> out;
  vjp_fn vjp = nullptr;
  xtpu::source_location where{};  // the user's line that recorded it (step.hpp's record_erased says which)
  /// The result if anyone besides this statement holds it (a tensor, a later statement's leaf, a
  /// link), else null: a result nobody can see. Exact after step::drop_unseen_links (before it,
  /// a link from a result nobody can see still counts).
  std::shared_ptr<storage> seen() const noexcept { return out.use_count() > 1 ? out : nullptr; }
};

/// The wiring code of a leaf: external tensor `n`, or the output of statement `p` of the step.
constexpr std::uint64_t external_code(std::uint32_t n) noexcept { return n; }
constexpr std::uint64_t step_output_code(std::uint32_t p) noexcept { return (std::uint64_t{1} << 32) | p; }
constexpr bool is_step_output(std::uint64_t code) noexcept { return (code >> 32) != 0; }
constexpr std::uint32_t code_index(std::uint64_t code) noexcept { return static_cast<std::uint32_t>(code); }

/// The words a signature ends with, after the donation bits: whether float results are stored
/// as bf16, then the chip. append_trailer writes them (step.hpp's compiled()), trailer reads one.
enum class trailer_word : std::size_t { bf16_storage, chip, count };
constexpr void append_trailer(std::vector<std::uint64_t>& sig, bool bf16_storage, std::uint64_t chip) {
  sig.push_back(bf16_storage);  // stored f32 values rounded: other values, another plan
  sig.push_back(chip);          // a plan is compiled for one device, as XLA's are
}
constexpr std::uint64_t trailer(const std::vector<std::uint64_t>& sig, trailer_word w) {
  return sig[sig.size() - static_cast<std::size_t>(trailer_word::count) + static_cast<std::size_t>(w)];
}

/// A compiled step: what to run, where every intermediate lives.
struct plan {
  struct loc {
    std::int64_t arena = -1;   // offset in the step arena, or
    std::int32_t output = -1;  // the output of this live statement (its position in stmts)
  };
  struct op {
    std::uint32_t kernel;
    bool copy;   // the value exists already: copy it from src (a root that CSE found)
    loc src;
    bool fused;  // run the statement's fused matmul+epilogue kernel instead of its table
    std::uint32_t group = 0;  // > 1: one loop computing this and the next group - 1 live statements
    bool in_group = false;    // computed by an earlier statement's group op
  };
  struct stmt_plan {
    std::uint32_t stmt, temp_begin, op_begin, op_end;
    std::uint32_t leaf_slot = 0;  // where its leaf pointers start in one array over all live statements
    std::int32_t donor = -1;      // its leaf whose buffer becomes its output, or -1
    std::uint64_t ready_temps = 0;  // ready_bit(k): temp k holds its value before the statement runs (CSE)
  };
  std::vector<stmt_plan> stmts;  // live statements, program order
  std::vector<loc> temps;        // per live statement, per temp slot
  std::vector<op> ops;
  std::size_t leaf_slots = 0;    // leaves of all live statements
  std::size_t arena_bytes = 0;
  std::size_t n_statements = 0;  // recorded, dead ones included
  bool round_bf16 = false;       // XTPU_USE_BF16 when compiled: a float output is stored rounded to bf16
  mxu::cost mxu;                 // the cycle model of every matmul the plan runs, on the device's generation
  /// Whether a statement whose root is `root` stores its result rounded to bf16 — the one rule
  /// the passes (common subexpressions) and the run (the stores, their HBM charge) follow.
  constexpr bool rounds(const kernel_desc& root) const noexcept { return round_bf16 && root.f32; }
  std::size_t cse_eliminated = 0;  // kernels number_values found computed already
  /// The HBM a run charges, before any kernel runs, for the output of live statement `sp`
  /// whose root kernel is `root`: its charge (a float output's halved under round_bf16), or 0
  /// when it takes its donor's buffer, which carries `donor_charged` (an output is never 0
  /// bytes) — the one rule step.hpp's run allocates by and memory::tape adds up.
  constexpr std::size_t output_charge(const kernel_desc& root, const stmt_plan& sp, std::size_t donor_charged) const noexcept {
    const std::size_t charge = hbm_charge(root.bytes, root.f32, round_bf16);
    return sp.donor >= 0 && donor_charged == charge ? 0 : charge;
  }
};

using metrics::detail::time_sample;

struct counters {
  metrics::detail::counter_cell &mark_step, &cached, &uncached, &sync_points, &sync_runs, &kernels, &cse, &dead, &mxu_cycles;
  metrics::detail::metric_cell &compile_time, &execute_time, &to_device, &from_device, &between_devices, &mxu_utilization;
  static counters& get();
};
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
XTPU_RUNTIME_INLINE counters& counters::get() {
  auto& r = metrics::detail::registry::instance();
  static counters c{r.counter("MarkStep"), r.counter("CachedCompile"), r.counter("UncachedCompile"),
                    r.counter("SyncPoints"), r.counter("SyncPointExecutions"), r.counter("KernelLaunch"), r.counter("CseEliminated"),
                    r.counter("DeadStatements"), r.counter("MxuCycles"), r.metric("CompileTime"),
                    r.metric("ExecuteTime"), r.metric("TransferToDeviceTime"), r.metric("TransferFromDeviceTime"),
                    r.metric("TransferDeviceToDeviceTime"),
                    r.metric("MxuUtilization", metrics::unit::percent)};
  return c;
}
#endif

/// What the passes read: the step as recorded, which outputs are live, and which external
/// tensors only the step still refers to (their buffers may be reused; step.hpp decides).
/// Stmt: statement (a step's) or statement_core (memory::tape's, at compile time).
template <class Stmt>
struct step_view {
  const std::vector<Stmt>& stmts;
  const std::vector<std::uint64_t>& signature;
  const std::vector<char>& live;                     // per statement
  const std::vector<char>& donatable;                // per external tensor
  const std::vector<std::uint64_t>& external_bytes;  // per external tensor
  const generation& device;
};

/// The value numbers of number_values: a key's first number, in a hash table with open
/// addressing (constexpr, so memory::tape numbers values as a step's compile does).
class value_numbering {
 public:
  using key = std::vector<std::uint64_t>;
  /// {the number of k, and whether it is new}: v if k is new (then added), else k's number.
  constexpr std::pair<std::uint32_t, bool> find_or_add(key k, std::uint32_t v) {
    if (2 * (entries_.size() + 1) > slots_.size()) grow();
    std::size_t i = slot_of(k);
    if (slots_[i] != 0) return {entries_[slots_[i] - 1].second, false};
    entries_.emplace_back(std::move(k), v);
    slots_[i] = static_cast<std::uint32_t>(entries_.size());
    return {v, true};
  }

 private:
  static constexpr std::uint64_t hash(const key& k) noexcept {
    std::uint64_t h = 0x9E3779B97F4A7C15ull;
    for (const std::uint64_t w : k) h = (h ^ w) * 0xBF58476D1CE4E5B9ull, h ^= h >> 31;
    return h;
  }
  /// k's slot, or the empty one where it would go.
  constexpr std::size_t slot_of(const key& k) const noexcept {
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash(k) & mask;; i = (i + 1) & mask)
      if (slots_[i] == 0 || entries_[slots_[i] - 1].first == k) return i;
  }
  constexpr void grow() {
    slots_.assign(slots_.empty() ? 64 : 2 * slots_.size(), 0);
    for (std::size_t e = 0; e < entries_.size(); ++e) slots_[slot_of(entries_[e].first)] = static_cast<std::uint32_t>(e + 1);
  }
  std::vector<std::uint32_t> slots_;  // 0: empty, else 1 + an entry
  std::vector<std::pair<key, std::uint32_t>> entries_;
};

/// Builds a plan from a step, one named pass after the other (see the top of this file);
/// constexpr, so that memory::tape runs the very passes a step's compile runs.
template <class Stmt>
class basic_planner {
 public:
  constexpr explicit basic_planner(const step_view<Stmt>& in)
      : in_(in), root_value_(in.stmts.size(), 0), kv_(in.stmts.size()), external_last_(in.donatable.size(), 0) {
    p_.n_statements = in.stmts.size();
    p_.round_bf16 = trailer(in.signature, trailer_word::bf16_storage) != 0;  // XTPU_USE_BF16 when recorded
  }

  constexpr plan build() {
    live_statements();
    number_values();
    fuse_epilogues();
    group_loops();
    schedule();
    donate_buffers();
    cost();
    place_buffers();
    return std::move(p_);
  }

  /// 1. Positions of the live statements, program order.
  constexpr void live_statements() {
    for (std::size_t s = 0; s < in_.stmts.size(); ++s) {
      if (in_.live[s]) live_.push_back(s);
    }
  }

  /// 2. Common subexpressions and lifetimes. A value is keyed by its structure, its inputs and
  /// its scalars' slots (never their values): a new learning rate reuses the plan. Under
  /// XTPU_USE_BF16 a float statement's result is stored rounded: keyed as such, it stands in
  /// for the same result of a later statement (rounded alike), never for a temporary (f32).
  constexpr void number_values() {
    constexpr std::uint64_t ext_tag = std::uint64_t{2} << 60, val_tag = std::uint64_t{1} << 60,
                            scalar_tag = std::uint64_t{3} << 60, stored_bf16_tag = std::uint64_t{4} << 60;
    value_numbering numbering;  // structure + inputs -> value
    for (std::size_t pos = 0; pos < live_.size(); ++pos) {
      const std::size_t s = live_[pos];
      const Stmt& st = in_.stmts[s];
      kv_[s].resize(st.n_kernels, kernel_value{});  // a fill: clang 14 rejects libstdc++'s constexpr default-init
      for (std::uint32_t k = 0; k < st.n_kernels; ++k) {
        const kernel_desc& kd = st.kernels[k];
        const bool root = k + 1 == st.n_kernels;
        std::uint32_t v = static_cast<std::uint32_t>(values_.size());
        bool fresh = true;
        {
          std::vector<std::uint64_t> key{kd.fingerprint};
          for (std::uint32_t l = kd.leaf_begin; l < kd.leaf_end; ++l) {
            const std::uint64_t code = leaf_code(st, l);
            key.push_back(is_step_output(code) ? val_tag | root_value_[code_index(code)] : ext_tag | code);
          }
          for (std::uint32_t t = kd.temp_begin; t < kd.temp_end; ++t) key.push_back(val_tag | kv_[s][t].v);
          for (std::uint32_t c = kd.scalar_begin; c < kd.scalar_end; ++c) key.push_back(scalar_tag | scalar_code(st, c));
          if (root && p_.rounds(kd)) key.push_back(stored_bf16_tag);
          std::tie(v, fresh) = numbering.find_or_add(std::move(key), v);
        }
        if (fresh) {
          plan::loc where;
          if (root) where.output = static_cast<std::int32_t>(pos);
          values_.push_back(value{where, kd.bytes, pos, pos, !root, 1});
        } else {
          ++p_.cse_eliminated;
          values_[v].last = pos;
          ++values_[v].uses;
        }
        kv_[s][k] = {v, fresh};
        if (root) root_value_[s] = v;
      }
      // a leaf read from an earlier statement keeps that value alive until here
      for (std::uint32_t l = 0; l < st.n_leaves; ++l) {
        const std::uint64_t code = leaf_code(st, l);
        if (is_step_output(code)) values_[root_value_[code_index(code)]].last = pos;
        else external_last_[code_index(code)] = pos;
      }
    }
  }

  /// 3. `t = f(matmul(...))` as one kernel where the matmul's value is not shared.
  constexpr void fuse_epilogues() {
    fused_.assign(in_.stmts.size(), 0);
    for (std::size_t s : live_) {
      const Stmt& st = in_.stmts[s];
      if (st.fusable && kv_[s][0].fresh && values_[kv_[s][0].v].uses == 1 && kv_[s][1].fresh) {
        fused_[s] = 1;
        values_[kv_[s][0].v].in_arena = false;
      }
    }
  }

  /// 4. Multi-output loops: runs of consecutive live statements that are each one fresh
  /// elementwise loop over the same number of elements, a later one reading an earlier one's
  /// result only at the element it computes.
  constexpr void group_loops() {
    group_.assign(live_.size(), 0);
    for (std::size_t pos = 0; pos < live_.size();) {
      std::size_t end = pos + 1;
      if (loop_only(pos))
        while (end < live_.size() && end - pos < max_group && loop_only(end) &&
               root(end).elements == root(pos).elements && reads_group_in_place(pos, end))
          ++end;
      group_[pos] = static_cast<std::uint32_t>(end - pos);
      pos = end;
    }
  }

  /// 5. Ops and temp slots, program order.
  constexpr void schedule() {
    std::uint32_t group_left = 0;
    for (std::size_t pos = 0; pos < live_.size(); ++pos) {
      const std::size_t s = live_[pos];
      const Stmt& st = in_.stmts[s];
      plan::stmt_plan sp{static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(p_.temps.size()),
                         static_cast<std::uint32_t>(p_.ops.size()), 0, static_cast<std::uint32_t>(p_.leaf_slots), -1};
      p_.leaf_slots += st.n_leaves;
      if (fused_[s]) {
        p_.ops.push_back(plan::op{0, false, {}, true});
      } else {
        for (std::uint32_t k = 0; k < st.n_kernels; ++k) {
          const bool root = k + 1 == st.n_kernels;
          if (kv_[s][k].fresh) p_.ops.push_back(plan::op{k, false, {}, false});
          else if (root) p_.ops.push_back(plan::op{k, true, {}, false});  // src set by place_buffers
        }
      }
      if (group_left > 0) {
        p_.ops.back().in_group = true;
        --group_left;
      } else if (group_[pos] > 1) {
        p_.ops.back().group = group_[pos];
        group_left = group_[pos] - 1;
      }
      for (std::uint32_t k = 0; k + 1 < st.n_kernels; ++k) {
        p_.temps.push_back({});
        temp_value_.push_back(fused_[s] ? UINT32_MAX : kv_[s][k].v);
        // an earlier statement computed it: a row loop reads it instead of reducing again (only
        // in a statement that runs its root: a common subexpression's copy reads no temp)
        if (!fused_[s] && kv_[s][st.n_kernels - 1].fresh && !kv_[s][k].fresh && values_[kv_[s][k].v].first < pos)
          sp.ready_temps |= ready_bit(k);
      }
      sp.op_end = static_cast<std::uint32_t>(p_.ops.size());
      p_.stmts.push_back(sp);
    }
  }

  /// 6. In place: a loop's result takes the buffer of an input tensor that nobody outside the
  /// step holds and nothing after the loop reads, read by the loop (and by the loops before it
  /// in its group) only at the element being written; and only where every op from there on
  /// cannot throw (loops, reductions, copies), so a step that fails has overwritten nothing.
  constexpr void donate_buffers() {
    std::size_t first_safe = p_.ops.size();  // ops from here on cannot throw
    while (first_safe > 0 && !may_throw(first_safe - 1)) --first_safe;
    std::vector<char> taken(in_.donatable.size(), 0);
    std::size_t group_start = 0;
    for (std::size_t pos = 0; pos < live_.size(); ++pos) {
      if (group_[pos] > 0) group_start = pos;
      plan::stmt_plan& sp = p_.stmts[pos];
      const Stmt& st = in_.stmts[sp.stmt];
      const plan::op& last = p_.ops[sp.op_end - 1];
      const std::size_t at = last.in_group ? p_.stmts[group_start].op_end - 1 : sp.op_end - 1;  // where it runs
      if (fused_[sp.stmt] || last.copy || !st.kernels[st.n_kernels - 1].ranged || at < first_safe) continue;
      const kernel_desc& kd = st.kernels[st.n_kernels - 1];
      for (std::uint32_t l = 0; l < st.n_leaves && l < 64; ++l) {
        const std::uint64_t code = leaf_code(st, l);
        if (is_step_output(code)) continue;
        const std::uint32_t x = code_index(code);
        if (taken[x] || !in_.donatable[x] || in_.external_bytes[x] != kd.bytes || external_last_[x] != pos ||
            !reads_in_place(pos, x) || !group_reads_in_place(group_start, pos, x))
          continue;
        taken[x] = 1;
        sp.donor = static_cast<std::int32_t>(l);
        break;
      }
    }
  }

  /// 7. The cycle model of every matmul that runs.
  constexpr void cost() {
    for (const auto& sp : p_.stmts)
      for (std::uint32_t o = sp.op_begin; o < sp.op_end; ++o) {
        const kernel_desc& kd = kernel(p_.ops[o], in_.stmts[sp.stmt]);
        if (!p_.ops[o].copy && kd.mm_passes)
          p_.mxu += mxu::estimate(kd.mm_m, kd.mm_k, kd.mm_n, kd.mm_batch, kd.mm_passes, in_.device);
      }
  }

  /// 8. The arena: first fit by lifetime, 64-byte aligned; then every temp and copy source.
  constexpr void place_buffers() {
    struct placed {
      std::size_t offset, end, last;
    };
    std::vector<placed> active;
    for (auto& v : values_) {
      if (!v.in_arena) continue;
      std::erase_if(active, [&](const placed& a) { return a.last < v.first; });
      std::sort(active.begin(), active.end(), [](const placed& a, const placed& b) { return a.offset < b.offset; });
      const std::size_t need = (v.bytes + 63) / 64 * 64;
      std::size_t off = 0;
      for (const auto& a : active) {
        if (off + need <= a.offset) break;
        off = std::max(off, a.end);
      }
      v.where.arena = static_cast<std::int64_t>(off);
      active.push_back({off, off + need, v.last});
      p_.arena_bytes = std::max(p_.arena_bytes, off + need);
    }
    for (std::size_t t = 0; t < p_.temps.size(); ++t)
      p_.temps[t] = temp_value_[t] == UINT32_MAX ? plan::loc{} : values_[temp_value_[t]].where;
    for (const auto& sp : p_.stmts)
      for (std::uint32_t o = sp.op_begin; o < sp.op_end; ++o)
        if (p_.ops[o].copy) p_.ops[o].src = values_[root_value_[sp.stmt]].where;
  }

  /// The kernel an op of statement st runs.
  static constexpr const kernel_desc& kernel(const plan::op& op, const statement_core& st) noexcept {
    return op.fused ? st.fused[0] : st.kernels[op.kernel];
  }
  /// Whether an op of statement st writes the statement's output (else its temp slot).
  static constexpr bool writes_output(const plan::op& op, const statement_core& st) noexcept {
    return op.fused || op.kernel + 1 == st.n_kernels;
  }

 private:
  struct value {
    plan::loc where;
    std::uint64_t bytes;
    std::size_t first, last;  // positions (live statement index) of definition and last use
    bool in_arena;
    std::uint32_t uses;       // kernels that compute this value (more than one: CSE shares it)
  };
  struct kernel_value {
    std::uint32_t v;
    bool fresh;
  };
  static constexpr std::size_t max_group = 16;  // statements in one multi-output loop

  constexpr std::uint64_t leaf_code(const Stmt& st, std::uint32_t l) const { return in_.signature[st.sig_begin + 1 + l]; }
  constexpr std::uint64_t scalar_code(const Stmt& st, std::uint32_t c) const {
    return in_.signature[st.sig_begin + 1 + st.n_leaves + c];
  }
  constexpr const kernel_desc& root(std::size_t pos) const {
    const Stmt& st = in_.stmts[live_[pos]];
    return st.kernels[st.n_kernels - 1];
  }
  /// The live statement at pos is one fresh elementwise loop and nothing else.
  constexpr bool loop_only(std::size_t pos) const {
    const std::size_t s = live_[pos];
    return in_.stmts[s].n_kernels == 1 && !fused_[s] && kv_[s][0].fresh && root(pos).ranged;
  }
  /// Every leaf of the statement at pos that is the result of a statement in [first, pos) is
  /// read only at the element being computed.
  constexpr bool reads_group_in_place(std::size_t first, std::size_t pos) const {
    const Stmt& st = in_.stmts[live_[pos]];
    for (std::uint32_t l = 0; l < st.n_leaves; ++l) {
      const std::uint64_t code = leaf_code(st, l);
      if (!is_step_output(code)) continue;
      const std::size_t producer = code_index(code);
      const bool in_group = std::find(live_.begin() + static_cast<std::ptrdiff_t>(first),
                                      live_.begin() + static_cast<std::ptrdiff_t>(pos), producer) !=
                            live_.begin() + static_cast<std::ptrdiff_t>(pos);
      if (in_group && (l >= 64 || !(root(pos).same_index_leaves >> l & 1))) return false;
    }
    return true;
  }
  /// The root loop of the statement at pos reads external tensor x only at the element it writes.
  constexpr bool reads_in_place(std::size_t pos, std::uint32_t x) const {
    const Stmt& st = in_.stmts[live_[pos]];
    for (std::uint32_t l = 0; l < st.n_leaves; ++l) {
      const std::uint64_t code = leaf_code(st, l);
      if (!is_step_output(code) && code_index(code) == x && (l >= 64 || !(root(pos).same_index_leaves >> l & 1)))
        return false;
    }
    return true;
  }
  /// So do the statements of its multi-output loop that run before it, block by block.
  constexpr bool group_reads_in_place(std::size_t group_start, std::size_t pos, std::uint32_t x) const {
    if (!p_.ops[p_.stmts[pos].op_end - 1].in_group) return true;
    for (std::size_t q = group_start; q < pos; ++q)
      if (!reads_in_place(q, x)) return false;
    return true;
  }
  /// Op o can throw: a matmul (its operand buffers); loops, reductions and copies cannot —
  /// they allocate nothing, and the thread pool throws only what their (noexcept) pieces throw.
  constexpr bool may_throw(std::size_t o) const {
    const auto it = std::upper_bound(p_.stmts.begin(), p_.stmts.end(), o,
                                     [](std::size_t v, const plan::stmt_plan& sp) { return v < sp.op_end; });
    const plan::op& op = p_.ops[o];
    return !op.copy && kernel(op, in_.stmts[it->stmt]).mm_passes != 0;
  }

  const step_view<Stmt>& in_;
  plan p_;
  std::vector<std::size_t> live_;          // statement index of each live position
  std::vector<value> values_;
  std::vector<std::uint32_t> root_value_;  // per statement: the value of its result
  std::vector<std::vector<kernel_value>> kv_;
  std::vector<char> fused_;
  std::vector<std::uint32_t> temp_value_;  // parallel to plan temps (UINT32_MAX: unused slot)
  std::vector<std::size_t> external_last_;  // per external tensor: the last live position reading it
  std::vector<std::uint32_t> group_;        // per live position: the size of the group it starts (0: inside one)
};
/// A step's planner (lazy/step.hpp).
using planner = basic_planner<statement>;

/// A matmul kernel's shape as dumps and traces name it: "128x784x512", "8x64x64 x12" (batched).
inline std::string matmul_text(const kernel_desc& kd) {
  return std::to_string(kd.mm_m) + "x" + std::to_string(kd.mm_k) + "x" + std::to_string(kd.mm_n) +
         (kd.mm_batch > 1 ? " x" + std::to_string(kd.mm_batch) : "");
}

/// A readable listing of a plan, e.g. one SGD step of a layer:
///   plan: 3 statements, 3 live, 0 dead; 3 ops; arena 0 B; MXU 18944 cycles, 33.1 % utilization
///     s0 -> out (256.00 KiB): matmul+epilogue 128x784x512 (1 pass) -> out
///     s1 -> out (1.53 MiB): matmul 784x128x512 (1 pass) -> out
///     s2 -> out (1.53 MiB, in place of input 1): loop -> out
/// and an AdamW update of one parameter, one pass over memory:
///     s0 -> out (1.00 MiB, in place of input 0): loop of 3 outputs (s0, s1, s2) -> out
///     s1 -> out (1.00 MiB, in place of input 2): in the loop of s0
///     s2 -> out (1.00 MiB, in place of input 3): in the loop of s0
/// "input n": the n-th external tensor the step reads, by first appearance.
inline std::string dump(const plan& p, const std::vector<statement>& stmts, const std::vector<std::uint64_t>& signature) {
  std::ostringstream os;
  const std::size_t live = p.stmts.size();
  os << "plan: " << p.n_statements << " statements, " << live << " live, " << p.n_statements - live << " dead; "
     << p.ops.size() << " ops; arena " << format_bytes(p.arena_bytes);
  if (p.round_bf16) os << "; float results stored as bf16";
  if (p.mxu.cycles) {
    std::ostringstream u;
    u.setf(std::ios::fixed);
    u.precision(1);
    u << 100.0 * p.mxu.utilization();
    os << "; MXU " << p.mxu.cycles << " cycles, " << u.str() << " % utilization";
  }
  os << '\n';
  auto where = [](const plan::loc& l) {
    if (l.arena >= 0) return "arena +" + std::to_string(l.arena);
    return l.output >= 0 ? "the output of live statement " + std::to_string(l.output) : std::string("(unused)");
  };
  std::size_t next = 0, group_first = 0;
  for (std::size_t s = 0; s < p.n_statements; ++s) {
    if (next == live || p.stmts[next].stmt != s) {
      os << "  s" << s << " dead\n";
      continue;
    }
    const auto& sp = p.stmts[next++];
    const statement& st = stmts[s];
    os << "  s" << s << " -> out (" << format_bytes(st.kernels[st.n_kernels - 1].bytes);
    if (sp.donor >= 0)
      os << ", in place of input " << code_index(signature[st.sig_begin + 1 + static_cast<std::size_t>(sp.donor)]);
    os << "):";
    for (std::uint32_t o = sp.op_begin; o < sp.op_end; ++o) {
      const auto& op = p.ops[o];
      const kernel_desc& kd = planner::kernel(op, st);
      os << (o == sp.op_begin ? " " : "; ");
      if (op.copy) {
        os << "copy of " << where(op.src) << " (common subexpression)";
        continue;
      }
      if (op.in_group) {
        os << "in the loop of s" << group_first;
        continue;
      }
      os << kd.kind;
      if (op.group) {
        group_first = s;
        os << " of " << op.group << " outputs (";
        for (std::uint32_t m = 0; m < op.group; ++m) os << (m ? ", s" : "s") << p.stmts[next - 1 + m].stmt;
        os << ')';
      }
      if (kd.mm_passes)
        os << ' ' << matmul_text(kd) << " (" << kd.mm_passes << (kd.mm_passes == 1 ? " pass)" : " passes)");
      os << " -> " << (planner::writes_output(op, st) ? std::string("out") : where(p.temps[sp.temp_begin + op.kernel]));
    }
    if (sp.op_begin == sp.op_end) os << " nothing to run";
    std::vector<std::pair<std::int64_t, std::int32_t>> read;  // the places of those values, once each
    for (std::uint32_t k = 0; k < ready_temp_bits; ++k)
      if (temp_ready(sp.ready_temps, k)) {
        const plan::loc at = p.temps[sp.temp_begin + k];
        if (std::find(read.begin(), read.end(), std::pair{at.arena, at.output}) == read.end()) read.emplace_back(at.arena, at.output);
      }
    if (!read.empty())
      os << "; reads " << read.size() << (read.size() == 1 ? " value" : " values") << " an earlier statement computed";
    os << '\n';
  }
  return os.str();
}

}  // namespace xtpu::detail
