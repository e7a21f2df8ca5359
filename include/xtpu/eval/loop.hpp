// xtpu/eval/loop.hpp — the fused loops: an elementwise statement over a range of its elements,
// and the one reduction order, on every lane width and thread count.
//
// Provides:
//   detail::loop_range<N, P>(bound, out, begin, end, stream) — elements [begin, end) of N, a
//     packet at a time on path P inside each block of N's last Q axes (Q: loop_q, the largest
//     block with no gather, or the largest at least a packet long), the rest one element at a
//     time; `stream`: the output stored past the cache; the bound (a row loop's row_bound too)
//     read from the loop's own copy of its slots (local_slots), the packet tree inlined
//     (XTPU_FLATTEN, optimised builds);
//   detail::streams_output(bytes, b, out, n, reads_out) — whether a loop stores its
//     output past the cache (from stream_bytes(), half the largest cache);
//   detail::for_ranges(n, grain, f) — f(begin, end) over [0, n) elements split into pieces of at
//     least `grain` for the thread pool (one piece, on the caller, below it); for_units the
//     same over rows or blocks (pieces not rounded to 64);
//   detail::round_to_bf16(p, begin, end) — floats rounded to bf16 in place (XTPU_USE_BF16's store);
//   detail::reduce_floats<Max, P>(n, values) / reduce_floats_block — n floats reduced in the
//     canonical order, block by block (values(b0, m): a block's floats), the block loop one
//     function per (sum or max, path) for every reduction of a program;
//   detail::reduce_order — the canonical reduction of n values (docs/numerics.md):
//       blocks of 16384 values, combined in order; inside a block, 16 lanes — lane l takes
//       values l, l+16, l+32, ... in order, starting from the identity (-0 for a sum, -inf for
//       a max) — then lanes combined as l with l+8, then +4, +2, +1.
//     It does not depend on the path (a 4-, 8- or 16-lane batch holds 4, 2 or 1 groups of the
//     16 lanes) or on the thread count (threads take whole blocks or whole rows).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "xtpu/config.hpp"
#include "xtpu/eval/elementwise.hpp"
#include "xtpu/kernels/cache.hpp"
#include "xtpu/kernels/cpu.hpp"
#include "xtpu/kernels/simd.hpp"
#include "xtpu/kernels/thread_pool.hpp"

// XTPU_FLATTEN: [[gnu::flatten]] on the loops that evaluate a statement (loop_range below,
// eval/reduce.hpp's reduce_rows and fill_block: their statement's packet tree inlined
// into them) in optimised builds. Empty at -O0 and under ASan or TSan, where the inlined tree
// of each instantiation took minutes to compile (ASan's test_loops.cpp: 108 s -> 589 s) and
// the loops' speed does not matter; a build may define it itself (the sanitizer presets
// define it empty, which covers UBSan alone too).
#ifndef XTPU_FLATTEN
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__)
#define XTPU_FLATTEN
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define XTPU_FLATTEN
#endif
#endif
#ifndef XTPU_FLATTEN
#define XTPU_FLATTEN [[gnu::flatten]]
#endif
#endif

namespace xtpu::detail {

/// The block (last Q axes of N) a loop over N takes packets in: the largest with no gather and
/// at least W elements, else the largest at least W long; 0: packets do not pay (blocks too short).
template <class N, std::size_t W>
inline constexpr std::size_t loop_q = [] {
  using S = typename N::shape_type;
  if constexpr (!packet_traits<N>::has || S::rank == 0) {
    return std::size_t{0};
  } else {
    std::size_t best = 0;
    [&]<std::size_t... Q>(std::index_sequence<Q...>) {
      ((best = (best == 0 && block_size<S>(S::rank - Q) >= W && packet_traits<N>::template fast<S::rank - Q>())
                   ? S::rank - Q
                   : best),
       ...);
    }(std::make_index_sequence<S::rank>{});
    if (best == 0 && block_size<S>(S::rank) >= W) best = S::rank;
    return best;
  }
}();

/// The least output streamed: half the largest cache (tests lower it to stream small outputs).
inline std::atomic<std::size_t>& stream_bytes() noexcept {
  static std::atomic<std::size_t> bytes{kernels::detail::last_level_cache_bytes() / 2};
  return bytes;
}
/// Whether the loop `out = N` writes its float output of `bytes` past the cache
/// (kernels::simd::store_stream): when the output is at least stream_bytes(), so that with any
/// input it does not fit in the cache and leaves it before anything reads it again; a
/// streamed store saves the read of each line a plain store makes first (one pass over memory
/// in six for `max(a*b+c, 0)*d`). Not when the output is one of the loop's inputs (`leaves`,
/// n of b's leaves: a donated buffer), whose lines are in the cache already (streaming them
/// measured twice as slow), nor when the loop reads its output back (`reads_out`: a row loop
/// whose reductions keep values in it, eval/program.hpp's run_rows), nor when the step rounds
/// it to bf16 next (b.rounds_output, XTPU_USE_BF16), a pass that reads it straight back.
/// Multi-output and matmul-epilogue loops store plainly.
inline bool streams_output(std::size_t bytes, const bound& b, const void* out, std::size_t n,
                           bool reads_out = false) noexcept {
  if (reads_out || b.rounds_output || bytes < stream_bytes().load(std::memory_order_relaxed)) return false;
  for (std::size_t l = 0; l < n; ++l)
    if (b.leaves[l] == out) return false;
  return true;
}

/// A bound B whose slot arrays — the first NLeaves leaves, NScalars scalars and NTemps temps
/// (a statement's all), and a row loop's NTemps columns — are copies in the loop's own frame
/// (`b`). A loop's vector stores may alias any memory the compiler cannot see is private, so
/// with the caller's arrays it reads every pointer and scalar again for each packet; with
/// these, and its float packets stored as floats (store_lanes: kernels::simd::store_floats,
/// not xsimd's may_alias store, which g++ 12 takes to change them too), it keeps them in
/// registers.
template <std::size_t NLeaves, std::size_t NScalars, std::size_t NTemps, class B>
struct local_slots {
  std::array<const void*, NLeaves> leaves{};
  std::array<double, NScalars> scalars{};
  std::array<const void*, NTemps> temps{};
  std::array<float*, NTemps> cols{};
  B b;
  explicit local_slots(const B& from) noexcept : b(from) {
    std::copy_n(from.leaves, NLeaves, leaves.begin());
    std::copy_n(from.scalars, NScalars, scalars.begin());
    std::copy_n(from.temps, NTemps, temps.begin());
    b.leaves = leaves.data(), b.scalars = scalars.data(), b.temps = temps.data();
    if constexpr (requires { from.cols; }) {
      if (from.cols) std::copy_n(from.cols, NTemps, cols.begin()), b.cols = cols.data();
    }
  }
  local_slots(const local_slots&) = delete;
  local_slots& operator=(const local_slots&) = delete;
};

/// Elements [begin, end) of the statement `out = N`, on path P; `stream`: a float output's
/// packets stored past the cache (streams_output) — each block's elements one at a time up to
/// the first address a packet may stream to, then packets from there (where packets start
/// changes no bits) — fenced before it returns. Flattened: the statement's whole packet tree
/// is inlined into the loop (g++ -O2 left a child's packet a call per packet), which reads
/// b's slots from its own frame (local_slots); docs/benchmarks.md, "Row loops".
template <class N, path P, class B>
XTPU_FLATTEN void loop_range(const B& from, typename N::value_type* out, std::size_t begin, std::size_t end, bool stream = false) noexcept {
  using T = typename N::value_type;
  const local_slots<N::n_leaves, N::n_scalars, N::n_temps, B> local(from);
  const bound& b = local.b;
  constexpr std::size_t W = width_v<P>;
  constexpr std::size_t Q = P == path::scalar ? 0 : loop_q<N, W>;
  if constexpr (Q == 0 || !is_floating_v<T>) {
    for (std::size_t i = begin; i < end; ++i) out[i] = store_as<T>(evaluator<N>::template load<slots{}>(b, i));
  } else {
    constexpr std::size_t R = block_size<typename N::shape_type>(Q);
    std::size_t i = begin;
    while (i < end) {
      const std::size_t stop = std::min(end, (i / R + 1) * R);
      if constexpr (std::is_same_v<T, float>) {
        if (stream) {
          for (; i < stop && reinterpret_cast<std::uintptr_t>(out + i) % (W * sizeof(float)) != 0; ++i)
            out[i] = store_as<T>(evaluator<N>::template load<slots{}>(b, i));
          for (; i + W <= stop; i += W) kernels::simd::store_stream(out + i, evaluator<N>::template packet<slots{}, P, Q>(b, i));
        }
      }
      // (after streamed packets: no whole packet left, only the shared tail)
      for (; i + W <= stop; i += W) store_lanes<T>(out + i, evaluator<N>::template packet<slots{}, P, Q>(b, i));
      for (; i < stop; ++i) out[i] = store_as<T>(evaluator<N>::template load<slots{}>(b, i));
    }
    if constexpr (std::is_same_v<T, float>) {
      if (stream) kernels::simd::stream_fence();
    }
  }
}

/// for_ranges' body, type-erased: one copy of the split however many loops call it, and one of
/// each loop (called through fn on one thread or many).
#if XTPU_RUNTIME_BODIES  // the runtime's entry points (xtpu/config.hpp)
// (no declaration before it: g++ warns of noinline on a declaration after an inline one)
[[gnu::noinline]] XTPU_RUNTIME_INLINE void run_ranges(std::size_t n, std::size_t grain, std::size_t align,
                                                     void (*fn)(void*, std::size_t, std::size_t), void* ctx) {
  const std::size_t most = static_cast<std::size_t>(kernels::num_threads());
  const std::size_t t = std::min(most, std::max<std::size_t>(1, n / std::max<std::size_t>(grain, 1)));
  if (t <= 1) return fn(ctx, 0, n);
  kernels::detail::thread_pool::instance().run(static_cast<int>(t), [&](int k) {
    const auto piece = [&](std::size_t j) { return j == t ? n : n * j / t / align * align; };
    fn(ctx, piece(static_cast<std::size_t>(k)), piece(static_cast<std::size_t>(k) + 1));
  });
}
#else
void run_ranges(std::size_t n, std::size_t grain, std::size_t align, void (*fn)(void*, std::size_t, std::size_t),
                void* ctx);
#endif

/// The thunk of a loop body F: one function (not a lambda and its conversions) per body.
template <class F>
void call_piece(void* ctx, std::size_t b0, std::size_t b1) {
  (*static_cast<F*>(ctx))(b0, b1);
}
/// run_ranges with f called through its thunk.
template <class F>
void run_ranges_of(std::size_t n, std::size_t grain, std::size_t align, F& f) {
  run_ranges(n, grain, align, &call_piece<F>, const_cast<void*>(static_cast<const void*>(&f)));
}
/// f(begin, end) over [0, n) elements in pieces of at least `grain` (a multiple of 64 each but
/// the last), on up to XTPU_NUM_THREADS threads. Which thread runs a piece changes no result.
template <class F>
void for_ranges(std::size_t n, std::size_t grain, F&& f) {
  run_ranges_of(n, grain, 64, f);
}
/// for_ranges over n units that are not elements (rows, blocks, runs of outputs): pieces of at
/// least `grain` units, split anywhere (2 threads share 100 rows 50/50).
template <class F>
void for_units(std::size_t n, std::size_t grain, F&& f) {
  run_ranges_of(n, grain, 1, f);
}

/// p[begin, end) rounded to bf16 in place, on the active path (simd::round_bf16, the one
/// rounding rule): what XTPU_USE_BF16 does to the values a step stores in a float tensor.
inline void round_to_bf16(float* p, std::size_t begin, std::size_t end) noexcept {
  kernels::simd::dispatch([&](auto on) {
    constexpr path P = decltype(on)::value;
    std::size_t i = begin;
    if constexpr (P != path::scalar) {
      using V = kernels::simd::lanes_t<P>;
      for (; i + width_v<P> <= end; i += width_v<P>) kernels::simd::round_bf16(V::load_unaligned(p + i)).store_unaligned(p + i);
    }
    for (; i < end; ++i) p[i] = kernels::simd::round_bf16(p[i]);
  });
}

// ---- the canonical reduction order --------------------------------------------------------

struct reduce_order {
  static constexpr std::size_t lanes = 16, block = 16384;
};

/// Sum or max of floats, as one combine step (max: op_math<maximum>'s NaN rule, ties keep the
/// accumulator).
template <bool Max>
struct float_combine {
  template <class V>
  static V identity() noexcept {
    return V(Max ? -__builtin_inff() : -0.0f);
  }
  template <class V>
  static V step(V acc, V v) noexcept {
    if constexpr (Max) return op_math<op::maximum>::f(acc, v);
    else return acc + v;
  }
  /// The 16 lanes of one block, combined l with l+8, +4, +2, +1.
  static float fold16(std::array<float, 16> p) noexcept {
    for (std::size_t h = 8; h >= 1; h /= 2)
      for (std::size_t l = 0; l < h; ++l) p[l] = step(p[l], p[l + h]);
    return p[0];
  }
};

/// One block of the canonical reduction: the n <= reduce_order::block floats at p. One function
/// per (Max, P), called, not inlined: every float reduction's values come here, read from their
/// buffer or computed into a row of scratch first (eval/reduce.hpp), so a program compiles this
/// loop twice per path, not once per reduction.
template <bool Max, path P>
[[gnu::noinline]] float reduce_floats_block(const float* p, std::size_t n) noexcept {
  using C = float_combine<Max>;
  constexpr std::size_t W = width_v<P>, G = reduce_order::lanes / W;  // batches per 16 lanes
  std::array<float, 16> lane;
  if constexpr (P == path::scalar) {
    lane.fill(C::template identity<float>());
    for (std::size_t k = 0; k < n; ++k) lane[k % 16] = C::step(lane[k % 16], p[k]);
  } else {
    using V = lanes_t<P>;
    const auto packet = [p](std::size_t k) { return V::load_unaligned(p + k); };
    std::size_t k = 0;
    // the G accumulators named one by one (an index_sequence, not a loop over an array): they
    // stay in registers and the G packets of a step overlap
    [&]<std::size_t... Gs>(std::index_sequence<Gs...>) {
      V acc[G] = {(static_cast<void>(Gs), C::template identity<V>())...};
      if constexpr (Max) {
        // four runs of the 16-value steps, one after another, each with its own accumulators,
        // then each lane's four results folded in run order: four chains instead of one, the
        // bits of the one chain, because max picks the first NaN, else the first value equal
        // to the maximum — what folding consecutive runs in order picks too (docs/numerics.md)
        const std::size_t steps = n / 16, q = steps / 4;
        V r1[G] = {(static_cast<void>(Gs), C::template identity<V>())...}, r2[G] = {r1[Gs]...}, r3[G] = {r1[Gs]...};
        for (std::size_t s = 0; s < q; ++s) {
          ((acc[Gs] = C::step(acc[Gs], V(packet(16 * s + Gs * W)))), ...);
          ((r1[Gs] = C::step(r1[Gs], V(packet(16 * (q + s) + Gs * W)))), ...);
          ((r2[Gs] = C::step(r2[Gs], V(packet(16 * (2 * q + s) + Gs * W)))), ...);
          ((r3[Gs] = C::step(r3[Gs], V(packet(16 * (3 * q + s) + Gs * W)))), ...);
        }
        for (std::size_t s = 4 * q; s < steps; ++s) ((r3[Gs] = C::step(r3[Gs], V(packet(16 * s + Gs * W)))), ...);
        ((acc[Gs] = C::step(C::step(C::step(acc[Gs], r1[Gs]), r2[Gs]), r3[Gs])), ...);
        k = 16 * steps;
      } else {
        // two steps' packets loaded before either is added, then added in order: the same
        // sums, with twice the independent work in flight
        for (; k + 32 <= n; k += 32) {
          const V now[G] = {V(packet(k + Gs * W))...}, next[G] = {V(packet(k + 16 + Gs * W))...};
          ((acc[Gs] = C::step(acc[Gs], now[Gs])), ...);
          ((acc[Gs] = C::step(acc[Gs], next[Gs])), ...);
        }
        for (; k + 16 <= n; k += 16) ((acc[Gs] = C::step(acc[Gs], V(packet(k + Gs * W)))), ...);
      }
      (acc[Gs].store_unaligned(lane.data() + Gs * W), ...);
    }(std::make_index_sequence<G>{});
    for (; k < n; ++k) lane[k % 16] = C::step(lane[k % 16], p[k]);
  }
  return C::fold16(lane);
}

/// Sum or max of n floats in the canonical order: blocks of reduce_order::block, each by
/// reduce_floats_block, combined in order. `values(b0, m)` gives the m floats of the block
/// starting at value b0 (where they lie in a buffer, or a row they were computed into).
template <bool Max, path P, class Values>
float reduce_floats(std::size_t n, Values&& values) noexcept {
  using C = float_combine<Max>;
  float total = C::template identity<float>();
  for (std::size_t b0 = 0; b0 < n; b0 += reduce_order::block) {
    const std::size_t m = std::min(reduce_order::block, n - b0);
    total = C::step(total, reduce_floats_block<Max, P>(values(b0, m), m));
  }
  return total;
}

}  // namespace xtpu::detail
