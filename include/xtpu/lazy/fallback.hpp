// xtpu/lazy/fallback.hpp — a training step that halves its batch when it runs out of HBM.
//
// Provides: xtpu::batch_fallback<Sizes...> (Sizes strictly decreasing, e.g. <256, 128, 64>):
// run(step) calls step.template operator()<B>() with the batch size that worked last (at
// first the largest); when it throws out_of_memory, everything it recorded is dropped
// (xtpu::discard_step(): parameters, optimizer state and counts, dropout streams back at their
// values before it — the dropout seeds of micro-batches that already ran too) and it is called
// again with the next smaller size, which is kept for the calls after. The step is instantiated once per size, so the graphs a run can compile are
// known at compile time; a step of batch B over a batch of N rows takes N / B micro-batches
// (docs/troubleshooting.md, examples/oom_fallback.cpp). size(), fallbacks() and last_error()
// say where it stands.
// Shape rule: Sizes... non-empty and strictly decreasing (E604).
// Errors: xtpu::error if statements are pending when run() starts (they would be dropped with
// the step: run mark_step() first); out_of_memory from the smallest size (its work dropped too,
// the sizes tried named); whatever else the step throws, its work left pending.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "xtpu/error.hpp"
#include "xtpu/lazy/step.hpp"

namespace xtpu {

template <std::size_t... Sizes>
class batch_fallback {
  static constexpr std::array<std::size_t, sizeof...(Sizes)> sizes{Sizes...};
  static_assert(sizeof...(Sizes) > 0 && [] {
    for (std::size_t i = 1; i < sizes.size(); ++i)
      if (sizes[i] >= sizes[i - 1]) return false;
    return true;
  }(), "xtpu E604 fallback: batch_fallback<Sizes...> needs one or more batch sizes, strictly decreasing");

 public:
  /// The batch size the next run() starts with.
  std::size_t size() const noexcept { return sizes[at_]; }
  /// How many times a size ran out of memory and the next one was taken.
  std::size_t fallbacks() const noexcept { return at_; }
  /// The out_of_memory message of the latest fallback (empty before any).
  const std::string& last_error() const noexcept { return last_error_; }

  /// step.template operator()<B>() at the current size, falling back as the header says;
  /// returns the size that ran.
  template <class Step>
  std::size_t run(Step&& step) {
    if (const std::size_t n = detail::thread_pending(); n != 0)
      throw error("xtpu: batch_fallback::run: " + std::to_string(n) +
                  " statements are pending; a fallback would drop them with the step — run xtpu::mark_step() first");
    detail::settle_thread();  // what earlier work left to undo has run
    const struct hold {       // a micro-batch's mark_step keeps what it changed undoable until the end
      hold() noexcept { detail::thread_steps::get().hold(); }
      ~hold() { detail::thread_steps::get().release(); }
    } held;
    const std::size_t first = at_;
    for (;;) {
      try {
        dispatch(step, std::make_index_sequence<sizeof...(Sizes)>{});
        return sizes[at_];
      } catch (const out_of_memory& e) {
        discard_step();
        last_error_ = e.what();
        if (at_ + 1 == sizes.size())
          throw out_of_memory(std::string(e.what()) + "\nxtpu: batch_fallback: the smallest batch size, " +
                              std::to_string(sizes[at_]) + ", does not fit either (tried " + tried(first) +
                              "); its work was dropped");
        ++at_;
      }
    }
  }

 private:
  template <class Step, std::size_t... I>
  void dispatch(Step& step, std::index_sequence<I...>) {
    (void)((at_ == I ? (step.template operator()<sizes[I]>(), true) : false) || ...);
  }
  std::string tried(std::size_t first) const {
    std::string s;
    for (std::size_t i = first; i <= at_; ++i) s += (i > first ? ", " : "") + std::to_string(sizes[i]);
    return s;
  }
  std::size_t at_ = 0;
  std::string last_error_;
};

}  // namespace xtpu
