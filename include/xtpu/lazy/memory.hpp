// xtpu/lazy/memory.hpp — a step's device memory, known at compile time.
//
// Provides, constexpr: xtpu::memory::tape (a step written against symbolic tensors: its
// inputs, its statements, what it keeps), xtpu::memory::symbol<T, Shape> (a tensor of such a
// step), xtpu::memory::footprint (what the step needs), xtpu::memory::plan(step) / plan<Step>()
// and xtpu::memory::peak_bytes(step) / peak_bytes<Step>(), xtpu::memory::fits<Step, Capacity>()
// (E605 naming both numbers when it does not), and xtpu::memory::capacity(generation,
// fraction) (what a chip of that generation hands out before out_of_memory: fraction × its HBM —
// the generation's table, not a chip's run-time set_hbm_bytes or XTPU_MEMORY_FRACTION);
// and at run time xtpu::memory::runner (the same step on real tensors) and
// measured_peak_bytes(step) (it run and measured):
//
//   struct forward {  // x (128, 784) f32, w (784, 512) f32 -> h (128, 512) f32
//     constexpr void operator()(xtpu::memory::tape& t) const {
//       auto x = t.input<float, 128, 784>();
//       auto w = t.input<float, 784, 512>();
//       auto h = t.let(xtpu::relu(xtpu::matmul(x, w)));
//       t.mark_step();
//     }
//   };
//   static_assert(xtpu::memory::peak_bytes<forward>() <= xtpu::memory::capacity(xtpu::v5e));
//   static_assert(xtpu::memory::fits<forward>());  // the same, or E605 with both numbers
//
// How: the tape records each statement as a step records it (its kernel table, the wiring of
// its leaves, its scalar slots) and runs the step's own planner (lazy/plan.hpp's passes:
// liveness, common subexpressions, fusion, donation, the arena) at compile time; the charge of
// every output is plan::output_charge, the rule mark_step() allocates by. So
//   peak = inputs + outputs + arena
// is the device's high-water mark (device::peak_bytes_in_use()) while the step runs, counted
// from nothing but the step's inputs, on a thread whose step arena on that chip is new (a
// later step's arena is already in use before it starts: the same total) — test_memory_plan
// holds the two equal.
// What a tape says, and the run it stands for:
//   t.input<T, D...>()  a tensor that exists when the step starts (weights, a batch);
//   t.let(e)            `tensor<...> y = e;` (y kept until mark_step: a live result);
//   t.assign(y, e)      `y = e;` (y's old value, if an input, may lend its buffer: donation);
//   t.drop(y)           y is destroyed before mark_step (its statement is dead unless a live
//                       one reads it).
// An input that no symbol holds any more (assigned over or dropped) is in memory while the
// step runs only if a statement reads it, as a tensor's buffer is.
// Limits (today): scalars are told apart by position (a run-time step shares a slot between
// copies of one scalar node: a common subexpression the tape does not see); one tensor handle
// per symbol (copies of a symbol are not tracked); a symbol is held until drop() (a tensor that
// goes out of scope before mark_step — a block's local — is written t.drop(y)); gradients,
// modules and optimizers are written out as their statements.
// Errors: a misuse of a tape — reading or dropping a dropped symbol, a statement after
// mark_step(), mark_step() twice, an expression over something other than symbols — is not a
// constant expression: the compiler names tape_misuse and its message (at run time it throws
// xtpu::error). measured_peak_bytes: xtpu::error if the step never calls mark_step(), and
// what the step throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "xtpu/device/device.hpp"
#include "xtpu/eval/program.hpp"
#include "xtpu/expr/node.hpp"
#include "xtpu/lazy/plan.hpp"
#include "xtpu/lazy/step.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/shape/check.hpp"

namespace xtpu::memory {

/// The bytes chip memory hands out before out_of_memory: fraction × HBM (device::capacity()).
constexpr std::uint64_t capacity(const generation& g, double fraction = 0.9) noexcept {
  return xtpu::detail::capacity_of(g.hbm_bytes, fraction);
}

/// What a step needs of device memory (bytes, as charged: a float tensor made under
/// XTPU_USE_BF16 counts 2 bytes an element).
struct footprint {
  std::uint64_t inputs = 0;   // the tensors the step starts with (or reads)
  std::uint64_t outputs = 0;  // the live results it allocates (one written into a donated input's buffer: none)
  std::uint64_t arena = 0;    // its temporaries, packed by lifetime
  std::uint64_t peak = 0;     // inputs + outputs + arena: the high-water mark while it runs
  std::size_t statements = 0, live = 0, donated = 0;
};

class tape;

/// A tensor of a tape's step: an input, or the result of one of its statements. Reads as a
/// tensor in expressions (held by address, as a named tensor is).
template <class T, class Shape>
class symbol {
 public:
  using value_type = T;
  using shape_type = Shape;
  using xtpu_tensor = void;
  using tensor_type = symbol;
  static constexpr std::size_t size = Shape::size, bytes = size * sizeof(T);
  constexpr std::uint64_t lifetime_serial() const noexcept { return 0; }

 private:
  friend class tape;
  constexpr explicit symbol(std::uint64_t ref) noexcept : ref_(ref) {}
  std::uint64_t ref_;  // an input (input_tag | n), a statement's output (step_output_code), or dropped
};

namespace detail {
/// Called where a tape is misused: not constexpr, so the compiler stops here with the message.
inline void tape_misuse(const char* message) { throw xtpu::error(message); }

template <class N, class F>
constexpr void for_each_leaf(const N& n, F& f) {
  if constexpr (xtpu::detail::is_leaf_v<N>) {
    f(n.tensor());
  } else if constexpr (xtpu::detail::arity_v<N> > 0) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (detail::for_each_leaf(xtpu::detail::arg<I>(n), f), ...);
    }(std::make_index_sequence<xtpu::detail::arity_v<N>>{});
  }
}
}  // namespace detail

/// A step written against symbols; plan() runs the step's planner on it (see the top).
class tape {
 public:
  /// bf16_storage: XTPU_USE_BF16 on while the inputs were made and the step is compiled.
  constexpr explicit tape(bool bf16_storage = false) noexcept : bf16_(bf16_storage) {}

  /// A tensor that exists when the step starts.
  template <class T, std::size_t... D>
  [[nodiscard]] constexpr symbol<T, extents<D...>> input() {
    inputs_.push_back(input_info{symbol<T, extents<D...>>::bytes, xtpu::detail::hbm_charge(symbol<T, extents<D...>>::bytes, std::is_same_v<T, float>, bf16_)});
    return symbol<T, extents<D...>>(input_tag | (inputs_.size() - 1));
  }

  /// `tensor<...> y = e;`: a statement whose result is kept.
  template <xtpu::detail::node E>
  [[nodiscard]] constexpr symbol<typename E::value_type, typename E::shape_type> let(const E& e) {
    return symbol<typename E::value_type, typename E::shape_type>(record(e));
  }

  /// `y = e;`: a statement whose result replaces y's value.
  template <class T, class Shape, xtpu::detail::node E>
  constexpr void assign(symbol<T, Shape>& y, const E& e) {
    check::assign<typename E::shape_type, Shape>();
    check::assign_dtype<typename E::value_type, T>();
    const std::uint64_t ref = record(e);
    release(y);
    y.ref_ = ref;
  }

  /// y is destroyed before mark_step.
  template <class T, class Shape>
  constexpr void drop(symbol<T, Shape>& y) {
    release(y);
    y.ref_ = dropped;
  }

  /// The step ends here (a step function ends with it, as a training step does): what it
  /// needs is planned now; a statement recorded after it is an error.
  constexpr void mark_step() {
    if (ended_) detail::tape_misuse("xtpu: a tape's step ends once (tape::mark_step called twice)");
    result_ = plan();
    ended_ = true;
  }
  /// What the step needs: as of mark_step(), else as recorded so far.
  constexpr footprint result() const { return ended_ ? result_ : plan(); }

  /// What the statements recorded so far need, by the planner a step's compile runs (g: the
  /// chip it is compiled for; memory does not depend on it).
  constexpr footprint plan(const generation& g = v5e) const {
    // liveness as step.hpp's hold_live_outputs: kept, or read by a live later statement
    std::vector<char> live(stmts_.size(), 0);
    for (std::size_t i = stmts_.size(); i-- > 0;) {
      live[i] = held_[i] || live[i];
      if (!live[i]) continue;
      const auto& st = stmts_[i];
      for (std::uint32_t l = 0; l < st.n_leaves; ++l)
        if (const std::uint64_t code = sig_[st.sig_begin + 1 + l]; xtpu::detail::is_step_output(code))
          live[xtpu::detail::code_index(code)] = 1;
    }
    // an external tensor whose only holder is the step may lend its buffer
    std::vector<char> donatable(ext_input_.size(), 0);
    std::vector<std::uint64_t> external_bytes(ext_input_.size(), 0);
    for (std::size_t x = 0; x < ext_input_.size(); ++x) {
      const input_info& in = inputs_[ext_input_[x]];
      donatable[x] = in.released;
      external_bytes[x] = in.bytes;
    }
    std::vector<std::uint64_t> sig = sig_;
    xtpu::detail::append_trailer(sig, bf16_, 0);
    const xtpu::detail::plan p =
        xtpu::detail::basic_planner<xtpu::detail::statement_core>(
            xtpu::detail::step_view<xtpu::detail::statement_core>{stmts_, sig, live, donatable, external_bytes, g})
            .build();
    footprint f;
    for (const input_info& in : inputs_)
      if (!in.released || in.read) f.inputs += in.charge;  // else freed as its last handle went
    for (const auto& sp : p.stmts) {
      const auto& st = stmts_[sp.stmt];
      std::uint64_t donor_charged = 0;
      if (sp.donor >= 0) {
        const std::uint64_t code = sig_[st.sig_begin + 1 + static_cast<std::uint32_t>(sp.donor)];
        donor_charged = inputs_[ext_input_[xtpu::detail::code_index(code)]].charge;
      }
      const std::uint64_t charge = p.output_charge(st.kernels[st.n_kernels - 1], sp, donor_charged);
      f.outputs += charge;
      f.donated += charge == 0 && sp.donor >= 0;
    }
    f.arena = p.arena_bytes;
    f.peak = f.inputs + f.outputs + f.arena;
    f.statements = stmts_.size();
    f.live = p.stmts.size();
    return f;
  }

 private:
  static constexpr std::uint64_t input_tag = std::uint64_t{1} << 40, dropped = ~std::uint64_t{0};
  struct input_info {
    std::uint64_t bytes, charge;
    bool released = false;  // no tensor holds it any more (assigned over, or dropped)
    bool read = false;      // a statement reads it (which keeps it in memory until the step ends)
    std::int64_t external = -1;  // its number among the step's external tensors, by first read
  };

  /// Records `e` as the step's next statement (step.hpp's record_erased, at compile time);
  /// returns the wiring code of its result.
  template <class E>
  constexpr std::uint64_t record(const E& e) {
    if (ended_) detail::tape_misuse("xtpu: a tape statement recorded after tape::mark_step");
    using program = xtpu::detail::program<E>;
    const auto p = static_cast<std::uint32_t>(stmts_.size());
    stmts_.push_back(xtpu::detail::statement_core{program::kernels.data(), static_cast<std::uint32_t>(program::kernels.size()),
                                                  program::has_fused ? program::fused.data() : nullptr, n_leaves_,
                                                  static_cast<std::uint32_t>(E::n_leaves), n_scalars_,
                                                  static_cast<std::uint32_t>(sig_.size()), program::has_fused});
    sig_.push_back(E::fingerprint);
    std::size_t leaves = 0;
    auto wire = [&](const auto& s) {
      ++leaves;
      if (s.ref_ == dropped) detail::tape_misuse("xtpu: a tape statement reads a symbol that tape::drop dropped");
      if (xtpu::detail::is_step_output(s.ref_) && s.ref_ < input_tag) {
        sig_.push_back(s.ref_);
        return;
      }
      input_info& in = inputs_[s.ref_ - input_tag];
      in.read = true;
      if (in.external < 0) {
        in.external = static_cast<std::int64_t>(ext_input_.size());
        ext_input_.push_back(static_cast<std::uint32_t>(s.ref_ - input_tag));
      }
      sig_.push_back(xtpu::detail::external_code(static_cast<std::uint32_t>(in.external)));
    };
    detail::for_each_leaf(e, wire);
    if (leaves != E::n_leaves) detail::tape_misuse("xtpu: a tape statement reads something other than symbols");
    for (std::size_t i = 0; i < E::n_scalars; ++i) sig_.push_back(n_scalars_ + i);  // step.hpp's scalar_slot, origins apart
    n_leaves_ += static_cast<std::uint32_t>(E::n_leaves);
    n_scalars_ += static_cast<std::uint32_t>(E::n_scalars);
    held_.push_back(1);
    return xtpu::detail::step_output_code(p);
  }

  /// y no longer holds its value.
  template <class T, class Shape>
  constexpr void release(const symbol<T, Shape>& y) {
    if (y.ref_ == dropped) detail::tape_misuse("xtpu: a tape drops or assigns a symbol that tape::drop dropped");
    if (y.ref_ >= input_tag) inputs_[y.ref_ - input_tag].released = true;
    else held_[xtpu::detail::code_index(y.ref_)] = 0;
  }

  bool bf16_;
  bool ended_ = false;
  footprint result_;
  std::vector<xtpu::detail::statement_core> stmts_;
  std::vector<std::uint64_t> sig_;      // per statement: fingerprint, leaf wiring, scalar slots (plan.hpp)
  std::vector<char> held_;              // per statement: a symbol holds its result
  std::vector<input_info> inputs_;
  std::vector<std::uint32_t> ext_input_;  // per external tensor: its input
  std::uint32_t n_leaves_ = 0, n_scalars_ = 0;
};

/// The footprint of the step `step(tape&)` records.
template <class Step>
constexpr footprint plan(Step step, bool bf16_storage = false) {
  tape t(bf16_storage);
  step(t);
  return t.result();
}
/// ... of a default-constructible step type (a struct, or a lambda's type).
template <class Step>
constexpr footprint plan(bool bf16_storage = false) {
  return memory::plan(Step{}, bf16_storage);
}
/// Its high-water mark of device memory.
template <class Step>
constexpr std::uint64_t peak_bytes(Step step, bool bf16_storage = false) {
  return memory::plan(step, bf16_storage).peak;
}
template <class Step>
constexpr std::uint64_t peak_bytes(bool bf16_storage = false) {
  return memory::plan<Step>(bf16_storage).peak;
}

/// E605: a step that needs NeedBytes where the chip hands out CapacityBytes — the compiler's
/// "[with NeedBytes = ...; CapacityBytes = ...]" line names both. True (the error is the
/// static_assert here, the one error a caller's static_assert then sees).
template <std::uint64_t NeedBytes, std::uint64_t CapacityBytes>
constexpr bool check_fits() {
  static_assert(NeedBytes <= CapacityBytes,
                "xtpu E605 memory: the step needs more device memory than the chip hands out (NeedBytes > "
                "CapacityBytes): a smaller batch, bf16 storage, or a chip with more HBM");
  return true;
}
/// True if default-constructible step Step fits Capacity bytes (default: a v5e chip at memory
/// fraction 0.9), its float tensors stored as bf16 if Bf16; E605 if not:
/// `static_assert(xtpu::memory::fits<train_step>());`.
template <class Step, std::uint64_t Capacity = memory::capacity(v5e), bool Bf16 = false>
constexpr bool fits() {
  return memory::check_fits<memory::peak_bytes<Step>(Bf16), Capacity>();
}

/// The run-time side of a tape: the same calls on real tensors of the current device (inputs
/// are zeros), and mark_step() runs the step and measures the device's high-water mark while
/// it runs. A step written once as a template over its tape (`template <class Tape> void
/// operator()(Tape& t) const`) is planned by a tape and measured by a runner.
class runner {
 public:
  template <class T, std::size_t... D>
  [[nodiscard]] tensor<T, D...> input() {
    return tensor<T, D...>();
  }
  template <xtpu::detail::node E>
  [[nodiscard]] auto let(const E& e, xtpu::source_location where = xtpu::source_location::current()) {
    return make(e, typename E::shape_type{}, where);
  }
  template <class Y, xtpu::detail::node E>
  void assign(Y& y, const E& e, xtpu::source_location where = xtpu::source_location::current()) {
    y = Y(e, where);
  }
  template <class Y>
  void drop(Y& y) {
    Y gone = std::move(y);  // its last handle
  }
  /// Runs the step; peak(): the high-water mark while it ran, above what was in use when
  /// this runner was made.
  void mark_step() {
    dev_.reset_peak();
    xtpu::mark_step();
    peak_ = dev_.peak_bytes_in_use() - before_;
    ran_ = true;
  }
  std::uint64_t peak() const noexcept { return peak_; }
  bool ran() const noexcept { return ran_; }

 private:
  template <class E, std::size_t... D>
  static auto make(const E& e, extents<D...>, const xtpu::source_location& where) {
    return tensor<typename E::value_type, D...>(e, where);
  }
  xtpu::device& dev_ = xtpu::device::current();
  std::uint64_t before_ = dev_.bytes_in_use(), peak_ = 0;
  bool ran_ = false;
};

/// Runs step(runner&) on the caller's current device, on a thread of its own — so that its
/// step arena starts empty, as the tape assumes — with XTPU_USE_BF16 = bf16_storage (a setting
/// of the process: set for the run, then put back); the device's high-water mark while its
/// mark_step() ran, above what was in use before its inputs were made (= plan(step).peak).
template <class Step>
std::uint64_t measured_peak_bytes(Step step, bool bf16_storage = false) {
  std::uint64_t peak = 0;
  std::exception_ptr failed;
  const xtpu::device& on = xtpu::device::current();
  std::thread([&] {
    const bool was = use_bf16();
    try {
      const device_scope scope(on);
      set_use_bf16(bf16_storage);
      xtpu::mark_step();
      runner r;
      step(r);
      if (!r.ran()) throw xtpu::error("xtpu: memory::measured_peak_bytes: the step never called mark_step() on its runner");
      peak = r.peak();
    } catch (...) {
      xtpu::discard_step();
      failed = std::current_exception();
    }
    set_use_bf16(was);
  }).join();
  if (failed) std::rethrow_exception(failed);
  return peak;
}

}  // namespace xtpu::memory
