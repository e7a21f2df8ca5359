// xtpu/data/buckets.hpp — sequences of many lengths on a fixed set of static shapes.
//
// Provides:
//   xtpu::buckets<L...> — lengths L0 < L1 < ... (at least one): `count`, `lengths`, text(),
//     bucket_of(n) (the index of the smallest Lk >= n) and visit(n, f) / visit_index(k, f),
//     which call f(std::integral_constant<std::size_t, Lk>{}) for n's bucket (for bucket k) and
//     return what it returns — one type for every bucket, or nothing. Code written once over
//     a length L is instantiated once per bucket: a program's graphs per step are at most
//     `count`, known when it compiles (torch_xla buckets its input shapes for the same reason).
//   data::sequence_buckets<Batch, buckets<L...>> — variable-length sequences for next-token
//     training, grouped by bucket: a sequence s of n tokens is the sample x = s[0, n - 1),
//     y = s[1, n), in the bucket of n - 1, padded to its length L (x with `pad`, y with
//     `ignore` — cross_entropy's ignore_index, -100 by default — so a padded position adds
//     nothing to the loss). for_each_batch(epoch, f) calls f(b) for every batch of the epoch,
//     b a sequence_batch<Batch, L>: x, y (tensor<int32_t, Batch, L>) and mask
//     (tensor<float, Batch, L>: 1 at real positions) on the device current when the set was
//     made, `real` (rows that are sequences: a bucket's last batch is filled with rows of
//     padding), `index` (its number in this rank's epoch) and `length`; f returning false ends
//     the pass. for_each_batch(position, f) starts at a saved position; both return where the
//     next batch comes from (a loader_position, for checkpoints).
// Order: each bucket's sequences are shuffled and cut into batches, and the epoch's batches
// shuffled across buckets, by splitmix64 of (seed, epoch) — the loader's rule: the same order on
// every machine; rank r of `world` takes positions r, r + world, ... of it (the same number of
// batches on every rank).
// Prefetch: with prefetch = k > 0 a background thread makes the next k batches (the loader's
// rule: data::detail::prefetcher, LoaderWaitTime, trace spans) while the caller's step runs.
// Shape rule: a sequence of n tokens fits when 2 <= n and n - 1 <= the last L.
// Errors: E505 (lengths not positive and strictly increasing); shape_error — bucket_of(n) past
// the last length, visit_index / bucket_size of no bucket, a sequence longer than the last
// bucket allows (its index, its length and the bucket lengths) or shorter than 2 tokens, no
// sequences at all, fewer batches than ranks; config_error — rank >= world, a position from a
// set whose order differs or past the epoch's last batch; an exception while a batch is made
// (out_of_memory) reaches the caller at that batch.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "xtpu/data/loader.hpp"
#include "xtpu/error.hpp"
#include "xtpu/lazy/tensor.hpp"

namespace xtpu {

template <std::size_t... L>
struct buckets {
  static_assert(sizeof...(L) >= 1, "xtpu E505 buckets: give at least one length");
  static constexpr std::size_t count = sizeof...(L);
  static constexpr std::array<std::size_t, count> lengths{L...};
  static_assert([] {
    for (std::size_t k = 0; k < count; ++k)
      if (lengths[k] == 0 || (k > 0 && lengths[k] <= lengths[k - 1])) return false;
    return true;
  }(), "xtpu E505 buckets: lengths must be positive and strictly increasing");

  /// The bucket lengths as text: "(16, 32, 64)".
  static std::string text() {
    std::string s = "(";
    for (std::size_t k = 0; k < count; ++k) s += (k ? ", " : "") + std::to_string(lengths[k]);
    return s + ")";
  }
  /// The index of the smallest length >= n; shape_error (n, the lengths) past the last.
  static std::size_t bucket_of(std::size_t n) {
    for (std::size_t k = 0; k < count; ++k)
      if (n <= lengths[k]) return k;
    throw shape_error("xtpu: buckets" + text() + ": length " + std::to_string(n) + " is longer than the last bucket (" +
                      std::to_string(lengths[count - 1]) + ")");
  }
  /// f(std::integral_constant<std::size_t, Lk>{}) for n's bucket k; what f returns.
  template <class F>
  static decltype(auto) visit(std::size_t n, F&& f) {
    return visit_index(bucket_of(n), std::forward<F>(f));
  }
  /// The same for bucket k itself; shape_error unless k < count.
  template <class F>
  static decltype(auto) visit_index(std::size_t k, F&& f) {
    check_index(k);
    return visit_at<0>(k, f);
  }
  /// shape_error unless k names a bucket.
  static void check_index(std::size_t k) {
    if (k >= count) throw shape_error("xtpu: buckets" + text() + ": no bucket " + std::to_string(k) + " (there are " + std::to_string(count) + ")");
  }

 private:
  template <std::size_t K, class F>
  static decltype(auto) visit_at(std::size_t k, F& f) {
    if constexpr (K + 1 == count) {
      return f(std::integral_constant<std::size_t, lengths[K]>{});
    } else {
      if (k == K) return f(std::integral_constant<std::size_t, lengths[K]>{});
      return visit_at<K + 1>(k, f);
    }
  }
};

namespace data {

/// One batch of a bucket of length L (see the header comment).
template <std::size_t Batch, std::size_t L>
struct sequence_batch {
  static constexpr std::size_t length = L;
  tensor<std::int32_t, Batch, L> x;
  tensor<std::int32_t, Batch, L> y;
  tensor<float, Batch, L> mask;
  std::size_t real = Batch;
  std::size_t index = 0;  // its number in this rank's epoch
};

/// How sequence_buckets orders and pads (the loader's options' names where they mean the same).
struct bucket_options {
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::int32_t pad = 0;        // x's padding token
  std::int32_t ignore = -100;  // y's padding: cross_entropy's default ignore_index
  std::size_t prefetch = 2;    // batches made ahead on a background thread; 0: on the caller's
  std::size_t rank = 0;        // this process's shard of the batches, of `world`
  std::size_t world = 1;
};

template <std::size_t Batch, class Buckets>
class sequence_buckets;

template <std::size_t Batch, std::size_t... L>
class sequence_buckets<Batch, buckets<L...>> {
 public:
  using buckets_type = buckets<L...>;

  /// Groups `sequences` by bucket (each kept by value), for batches on this thread's current
  /// device; shape_error for what does not fit, config_error for rank >= world.
  explicit sequence_buckets(std::vector<std::vector<std::int32_t>> sequences, bucket_options o = {})
      : seqs_(std::move(sequences)), opt_(o), device_(xtpu::device::current()) {
    detail::check_shard("sequence_buckets", o.rank, o.world);
    if (seqs_.empty()) throw shape_error("xtpu: sequence_buckets: no sequences");
    for (std::size_t i = 0; i < seqs_.size(); ++i) {
      const std::size_t n = seqs_[i].size();
      if (n < 2) {
        throw shape_error("xtpu: sequence_buckets: sequence " + std::to_string(i) + " has " + std::to_string(n) +
                          " token(s); next-token samples need at least 2");
      }
      if (n - 1 > buckets_type::lengths[buckets_type::count - 1]) {
        throw shape_error("xtpu: sequence_buckets: sequence " + std::to_string(i) + " has " + std::to_string(n) +
                          " tokens: its " + std::to_string(n - 1) + " positions are longer than the last of the buckets " +
                          buckets_type::text());
      }
      members_[buckets_type::bucket_of(n - 1)].push_back(i);
    }
    for (const auto& m : members_) all_batches_ += (m.size() + Batch - 1) / Batch;
    if (all_batches_ < o.world) {
      throw shape_error("xtpu: sequence_buckets: " + std::to_string(all_batches_) + " batches of " + std::to_string(Batch) +
                        " for " + std::to_string(o.world) + " ranks: a rank would have none (use a smaller batch)");
    }
  }

  std::size_t size() const noexcept { return seqs_.size(); }
  const bucket_options& options() const noexcept { return opt_; }
  /// Sequences in bucket k (of every rank).
  std::size_t bucket_size(std::size_t k) const {
    buckets_type::check_index(k);
    return members_[k].size();
  }
  /// Batches this rank takes in one epoch (a bucket's last batch padded with empty rows).
  std::size_t batches_per_epoch() const noexcept { return all_batches_ / opt_.world; }
  /// What fixes the order of its batches: "412 sequences in buckets (32, 64), batch 16, seed 0,
  /// shuffled, shard 0 of 1".
  std::string describe() const {
    return std::to_string(seqs_.size()) + " sequences in buckets " + buckets_type::text() + ", batch " +
           std::to_string(Batch) + ", seed " + std::to_string(opt_.seed) + (opt_.shuffle ? ", shuffled" : ", in order") +
           ", shard " + std::to_string(opt_.rank) + " of " + std::to_string(opt_.world);
  }

  /// f(b) (b a sequence_batch<Batch, Lk>&) for this rank's batches of epoch `epoch`, in its
  /// seeded order, until f returns false (f may return nothing); where the next batch comes from.
  template <class F>
  loader_position for_each_batch(std::uint64_t epoch, F&& f) const {
    return for_each_batch(loader_position{epoch, 0, {}}, std::forward<F>(f));
  }
  /// The same from batch `from.batch` of epoch `from.epoch` (a position it returned, saved with a
  /// checkpoint); config_error if `from` comes from a set whose order differs.
  template <class F>
  loader_position for_each_batch(const loader_position& from, F&& f) const {
    detail::check_position("sequence_buckets", from, describe(), batches_per_epoch());
    const std::vector<planned> plan = plan_of(from.epoch);
    detail::prefetcher<any_batch> ahead(opt_.prefetch);  // after plan: stopped before plan goes
    ahead.start(from.batch, plan.size(), [&](std::size_t b) {
      xtpu::device_scope on(device_);
      return buckets_type::visit_index(plan[b].bucket, [&](auto length) {
        return any_batch(make_batch<decltype(length)::value>(plan[b].rows, b));
      });
    });
    for (std::size_t b = from.batch; b < plan.size(); ++b) {
      any_batch next = ahead.next(b);
      const bool go_on = std::visit(
          [&](auto& batch) {
            if constexpr (std::is_void_v<decltype(f(batch))>) {
              f(batch);
              return true;
            } else {
              return static_cast<bool>(f(batch));
            }
          },
          next);
      if (!go_on) return detail::position_at(from.epoch, b + 1, plan.size(), describe());
    }
    return detail::position_at(from.epoch, plan.size(), plan.size(), describe());
  }

 private:
  using any_batch = std::variant<sequence_batch<Batch, L>...>;
  struct planned {
    std::size_t bucket;
    std::vector<std::size_t> rows;
  };
  /// This rank's batches of epoch `epoch`, in order.
  std::vector<planned> plan_of(std::uint64_t epoch) const {
    std::vector<planned> all;
    for (std::size_t k = 0; k < buckets_type::count; ++k) {
      const auto& m = members_[k];
      const auto order = detail::epoch_order(m.size(), opt_.shuffle, opt_.seed ^ (0x9E3779B97F4A7C15ull * (k + 1)), epoch);
      for (std::size_t b0 = 0; b0 < m.size(); b0 += Batch) {
        planned p{k, {}};
        for (std::size_t j = b0; j < std::min(m.size(), b0 + Batch); ++j) p.rows.push_back(m[order[j]]);
        all.push_back(std::move(p));
      }
    }
    const auto batch_order = detail::epoch_order(all.size(), opt_.shuffle, opt_.seed, epoch);
    std::vector<planned> mine(batches_per_epoch());
    for (std::size_t b = 0; b < mine.size(); ++b) mine[b] = std::move(all[batch_order[opt_.rank + b * opt_.world]]);
    return mine;
  }
  template <std::size_t Len>
  sequence_batch<Batch, Len> make_batch(const std::vector<std::size_t>& rows, std::size_t index) const {
    std::vector<std::int32_t> x(Batch * Len, opt_.pad), y(Batch * Len, opt_.ignore);
    std::vector<float> mask(Batch * Len, 0.0f);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const auto& s = seqs_[rows[r]];
      for (std::size_t t = 0; t + 1 < s.size(); ++t) {
        x[r * Len + t] = s[t];
        y[r * Len + t] = s[t + 1];
        mask[r * Len + t] = 1.0f;
      }
    }
    return {from_host<std::int32_t, Batch, Len>(x.data(), x.size()), from_host<std::int32_t, Batch, Len>(y.data(), y.size()),
            from_host<float, Batch, Len>(mask.data(), mask.size()), rows.size(), index};
  }

  std::vector<std::vector<std::int32_t>> seqs_;
  bucket_options opt_;
  xtpu::device device_;
  std::array<std::vector<std::size_t>, buckets_type::count> members_{};
  std::size_t all_batches_ = 0;  // of every rank
};

}  // namespace data
}  // namespace xtpu
