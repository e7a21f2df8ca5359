// xtpu/data/loader.hpp — batches of a dataset as device tensors, prepared ahead on a thread.
//
// Provides: loader<Batch, Dataset> (iterate it: `for (auto& [x, y] : loader)` runs one epoch;
// x is tensor<XT, Batch, XD...>, y tensor<YT, Batch, YD...>), loader_options (shuffle, seed,
// prefetch depth, rank and world for sharding, what to do with the last short batch),
// loader_position (epoch, batch: where the next batch comes from, for checkpoints; resume()
// checks that it comes from a loader with the same order), and
// batch<...> (x, y, real: how many samples are real, index, mask()).
// Shape rule: the batch size is in the type, so a short batch cannot exist: the samples after
// the last whole batch are left out (last_batch::drop, the default) or the batch is filled
// with zeros and mask() tells which samples are real (last_batch::pad).
// Order: epoch e's order is a Fisher-Yates shuffle of 0..N-1 driven by splitmix64 of (seed, e)
// — the same on every machine, compiler and thread count; rank r of `world` takes positions
// r, r + world, ... of it (N / world samples, the same count on every rank).
// Prefetch: with prefetch = k > 0 a background thread copies the next k batches to the device
// (TransferToDeviceTime) while the caller's step runs; the caller's waits are LoaderWaitTime
// (both spans in an XTPU_TRACE trace, metrics/trace.hpp).
// Errors: config_error (world = 0, rank >= world; resume() of a position from a loader whose
// order differs, both described); shape_error (a shard without one batch);
// an exception while a batch is made (out_of_memory) reaches the caller at that batch, and
// position() still names it, so iterating again retries it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "xtpu/data/dataset.hpp"
#include "xtpu/device/device.hpp"
#include "xtpu/error.hpp"
#include "xtpu/expr/generators.hpp"
#include "xtpu/expr/ops.hpp"
#include "xtpu/fingerprint/hash.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/metrics/metrics.hpp"
#include "xtpu/metrics/trace.hpp"
#include "xtpu/settings.hpp"

namespace xtpu::data {

/// What happens to the samples after an epoch's last whole batch.
enum class last_batch { drop, pad };

struct loader_options {
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::size_t prefetch = 2;  // batches made ahead on a background thread; 0: on the caller's
  std::size_t rank = 0;      // this process's shard, of `world`
  std::size_t world = 1;
  last_batch last = last_batch::drop;
};

/// Where the next batch comes from: batch `batch` of epoch `epoch`, in the order of a loader
/// that `order` describes (what loader::describe() said; resume() checks it, "" is not checked).
/// Two positions are equal when they name the same batch.
struct loader_position {
  std::uint64_t epoch = 0;
  std::size_t batch = 0;
  std::string order{};
  friend bool operator==(const loader_position& a, const loader_position& b) noexcept {
    return a.epoch == b.epoch && a.batch == b.batch;
  }
};

/// One batch on the device. `real` samples are real (Batch but in a padded last batch).
template <std::size_t Batch, class XBatch, class YBatch>
struct batch {
  XBatch x;
  YBatch y;
  std::size_t real = Batch;
  std::size_t index = 0;  // its number in the epoch
  /// 1 for a real sample, 0 for padding: an expression (no transfer; the count is a run-time
  /// scalar, so a padded batch does not compile a new step).
  auto mask() const { return cast<float>(iota<std::int32_t, Batch>() < static_cast<std::int32_t>(real)); }
  template <std::size_t I>
  auto& get() & {
    if constexpr (I == 0) return x; else return y;
  }
  template <std::size_t I>
  const auto& get() const& {
    if constexpr (I == 0) return x; else return y;
  }
};

namespace detail {
template <std::size_t B, class Sample>
struct batched;
template <std::size_t B, class T, std::size_t... D>
struct batched<B, tensor<T, D...>> {
  using type = tensor<T, B, D...>;
};

/// Epoch `epoch`'s order of n samples: 0..n-1, Fisher-Yates shuffled by splitmix64 of (seed,
/// epoch) when `shuffle` (j = r mod (i + 1): a bias below 2^-32 for n < 2^32, and the same
/// draw everywhere).
inline std::vector<std::size_t> epoch_order(std::size_t n, bool shuffle, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (!shuffle) return order;
  std::uint64_t state = xtpu::detail::mix64(seed) ^ xtpu::detail::mix64(2 * epoch + 1);
  for (std::size_t i = n; i > 1; --i) {
    state += 0x9E3779B97F4A7C15ull;  // splitmix64's stream
    const std::size_t j = static_cast<std::size_t>(xtpu::detail::mix64(state) % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

/// config_error unless rank < world (and so world >= 1); `who` names the loader in the message.
inline void check_shard(const char* who, std::size_t rank, std::size_t world) {
  if (world == 0 || rank >= world) {
    throw config_error(std::string("xtpu: ") + who + ": rank " + std::to_string(rank) + " of world " +
                       std::to_string(world) + ": expected world >= 1 and rank in [0, world)");
  }
}
/// config_error unless a pass can start at p: batch p.batch of an epoch of `batches`, and p made
/// by a loader whose order (its describe()) is `order` — an empty p.order is not checked.
inline void check_position(const char* who, const loader_position& p, const std::string& order, std::size_t batches) {
  if (!p.order.empty() && p.order != order) {
    throw config_error(std::string("xtpu: ") + who + ": the position (epoch " + std::to_string(p.epoch) + ", batch " +
                       std::to_string(p.batch) + ") comes from a loader of " + p.order + "; this one is " + order +
                       ", so its batches differ");
  }
  if (p.batch >= batches) {
    throw config_error(std::string("xtpu: ") + who + ": batch " + std::to_string(p.batch) + " of an epoch of " +
                       std::to_string(batches) + " batches");
  }
}

/// Where a pass goes on when batch `next` of `epoch` (of `batches`) comes next: there, or once
/// the epoch is done (next == batches) at the next epoch's first batch.
inline loader_position position_at(std::uint64_t epoch, std::size_t next, std::size_t batches, std::string order) {
  return next < batches ? loader_position{epoch, next, std::move(order)} : loader_position{epoch + 1, 0, std::move(order)};
}

/// Items made ahead on a background thread: start(from, n, make) makes items from..n-1 with
/// make(i), at most `depth` ahead of the caller (depth 0: on the caller's thread, when next()
/// asks). next(i) returns item i — i counts up from `from` — or rethrows what making it threw
/// (the thread stops there). The caller's waits are LoaderWaitTime; each item made ahead is a
/// "loader" span in a trace. The one prefetch rule of xtpu::data (loader, sequence_buckets).
template <class Item>
class prefetcher {
 public:
  explicit prefetcher(std::size_t depth) noexcept : depth_(depth) {}
  prefetcher(const prefetcher&) = delete;
  prefetcher& operator=(const prefetcher&) = delete;
  ~prefetcher() { stop(); }

  /// Stops what runs, then makes from..n-1 (make is kept until the next start).
  void start(std::size_t from, std::size_t n, std::function<Item(std::size_t)> make) {
    stop();
    make_ = std::move(make);
    if (depth_ > 0) worker_ = std::thread([this, from, n] { produce(from, n); });
  }
  Item next(std::size_t i) {
    static auto& waited = metrics::detail::registry::instance().metric("LoaderWaitTime");
    std::optional<metrics::detail::time_sample> timed(std::in_place, waited);  // ends when the batch is here
    trace::detail::span traced("loader", depth_ == 0 ? "loader: make batch" : "loader: wait for batch", 0);
    slot s;
    if (depth_ == 0) {
      try {
        s.item.emplace(make_(i));
      } catch (...) {
        s.err = std::current_exception();
      }
    } else {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      s = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      cv_.notify_all();
    }
    timed.reset();
    if (s.err) {
      stop();
      std::rethrow_exception(s.err);
    }
    return std::move(*s.item);
  }
  /// Ends the background thread; what it made and was not taken is dropped.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    queue_.clear();
    stop_ = false;
  }

 private:
  struct slot {
    std::optional<Item> item;
    std::exception_ptr err;
  };
  void produce(std::size_t from, std::size_t n) {
    for (std::size_t i = from; i < n; ++i) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      slot s;
      try {
        trace::detail::span traced("loader", "loader: prefetch batch", 0);
        if (traced.active()) traced.add_args("\"batch\": " + std::to_string(i));
        s.item.emplace(make_(i));
      } catch (...) {
        s.err = std::current_exception();
      }
      const bool failed = s.err != nullptr;
      {
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(s));
      }
      cv_.notify_all();
      if (failed) return;
    }
  }

  std::size_t depth_;
  std::function<Item(std::size_t)> make_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<slot> queue_;
  bool stop_ = false;
  std::thread worker_;
};
}  // namespace detail

template <std::size_t Batch, class Dataset>
class loader {
  using x_sample = typename Dataset::x_type;
  using y_sample = typename Dataset::y_type;
  using xt_t = typename x_sample::value_type;
  using yt_t = typename y_sample::value_type;

 public:
  using x_batch = typename detail::batched<Batch, x_sample>::type;
  using y_batch = typename detail::batched<Batch, y_sample>::type;
  using batch_type = data::batch<Batch, x_batch, y_batch>;
  static constexpr std::size_t batch_size = Batch;

  /// Batches of `d` (kept by reference: it must outlive the loader) on this thread's current
  /// device. config_error for rank >= world or world = 0; shape_error if the shard has no batch.
  explicit loader(const Dataset& d, loader_options o = {}) : data_(d), opt_(o), device_(xtpu::device::current()) {
    detail::check_shard("loader", o.rank, o.world);
    shard_ = d.size() / o.world;
    batches_ = o.last == last_batch::pad ? (shard_ + Batch - 1) / Batch : shard_ / Batch;
    if (batches_ == 0) {
      throw shape_error("xtpu: loader: " + std::to_string(d.size()) + " samples in " + std::to_string(o.world) +
                        " shard(s) of " + std::to_string(shard_) + " make no whole batch of " + std::to_string(Batch) +
                        " (use last_batch::pad, or a smaller batch)");
    }
  }
  loader(const Dataset&&, loader_options = {}) = delete;  // a temporary dataset would die first
  loader(const loader&) = delete;
  loader& operator=(const loader&) = delete;
  ~loader() { stop(); }

  /// Batches in one epoch (of this rank's shard).
  std::size_t batches_per_epoch() const noexcept { return batches_; }
  /// Samples this rank visits in one epoch (before dropping the short batch).
  std::size_t shard_size() const noexcept { return shard_; }
  const loader_options& options() const noexcept { return opt_; }
  /// Where the next batch comes from: the one after the batch the caller has now, or after a
  /// whole epoch the next epoch's first. Save it with a checkpoint; epoch(e, b) resumes there.
  loader_position position() const {
    return detail::position_at(pos_.epoch, pos_.batch, batches_, describe());
  }
  /// The next iteration starts at batch `first_batch` of epoch `e` (config_error unless
  /// first_batch < batches_per_epoch()). Called inside a pass, it ends that pass: the loop
  /// stops at its next step, and the next one starts here.
  loader& epoch(std::uint64_t e, std::size_t first_batch = 0) {
    detail::check_position("loader", {e, first_batch, {}}, {}, batches_);
    stop();
    pos_ = {e, first_batch, {}};
    repositioned_ = true;
    return *this;
  }
  /// The next iteration starts at p (a saved position()); config_error if p was made by a
  /// loader whose order differs (another dataset size, batch, seed, shuffle, shard or last batch).
  loader& resume(const loader_position& p) {
    detail::check_position("loader", p, describe(), batches_);
    return epoch(p.epoch, p.batch);
  }
  /// What fixes the order of its batches: "60000 samples, batch 128, seed 0, shuffled, shard 0
  /// of 1, last batch dropped".
  std::string describe() const {
    return std::to_string(data_.size()) + " samples, batch " + std::to_string(Batch) + ", seed " +
           std::to_string(opt_.seed) + (opt_.shuffle ? ", shuffled" : ", in order") + ", shard " +
           std::to_string(opt_.rank) + " of " + std::to_string(opt_.world) +
           (opt_.last == last_batch::pad ? ", last batch padded" : ", last batch dropped");
  }
  /// The sample indices this rank visits in epoch e, in order (Batch per batch).
  std::vector<std::size_t> order(std::uint64_t e) const {
    const auto all = detail::epoch_order(data_.size(), opt_.shuffle, opt_.seed, e);
    std::vector<std::size_t> mine(shard_);
    for (std::size_t k = 0; k < shard_; ++k) mine[k] = all[opt_.rank + k * opt_.world];
    return mine;
  }

  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    explicit iterator(loader* l) : l_(l) {}
    batch_type& operator*() const { return *l_->current_; }
    batch_type* operator->() const { return &*l_->current_; }
    iterator& operator++() {
      l_->advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !l_->current_; }

   private:
    loader* l_ = nullptr;
  };

  /// Starts at position() — the rest of an epoch, or the next one — and delivers its first batch.
  iterator begin() {
    stop();
    repositioned_ = false;
    if (pos_.batch >= batches_) pos_ = {pos_.epoch + 1, 0};
    order_ = order(pos_.epoch);
    next_ = pos_.batch;
    ahead_.start(next_, batches_, [this](std::size_t b) { return make(b); });
    advance();
    return iterator(this);
  }
  std::default_sentinel_t end() const noexcept { return {}; }

 private:
  /// Batch b of the current epoch, copied to the device.
  batch_type make(std::size_t b) {
    const std::size_t first = b * Batch, real = std::min(Batch, shard_ - first);
    constexpr std::size_t xs = Dataset::x_size, ys = Dataset::y_size;
    stage_x_.assign(Batch * xs, xt_t{});  // padding: zeros
    stage_y_.assign(Batch * ys, yt_t{});
    for (std::size_t i = 0; i < real; ++i) {
      const std::size_t s = order_[first + i];
      std::memcpy(stage_x_.data() + i * xs, data_.x(s).data(), xs * sizeof(xt_t));
      std::memcpy(stage_y_.data() + i * ys, data_.y(s).data(), ys * sizeof(yt_t));
    }
    xtpu::device_scope on(device_);
    return batch_type{upload<x_batch>(stage_x_), upload<y_batch>(stage_y_), real, b};
  }
  template <class Tensor, class T>
  static Tensor upload(const std::vector<T>& v) {
    return [&]<std::size_t... D>(const tensor<T, D...>*) { return from_host<T, D...>(std::span<const T>(v)); }(
        static_cast<const Tensor*>(nullptr));
  }

  /// The caller's next batch (or the end of the epoch); an error surfaces here, with pos_ on it.
  void advance() {
    current_.reset();
    if (repositioned_) return;  // epoch() or resume() inside the pass: it ends here, pos_ as they set it
    if (next_ >= batches_) {
      stop();
      pos_ = {pos_.epoch + 1, 0};
      return;
    }
    pos_.batch = next_;  // an error surfaces here, with position() on the batch that failed
    current_.emplace(ahead_.next(next_));
    pos_.batch = ++next_;
  }

  void stop() { ahead_.stop(); }

  const Dataset& data_;
  loader_options opt_;
  xtpu::device device_;
  std::size_t shard_ = 0, batches_ = 0;
  loader_position pos_;
  std::vector<std::size_t> order_;  // this epoch's sample indices for this rank
  std::size_t next_ = 0;            // the next batch to hand out
  std::optional<batch_type> current_;
  bool repositioned_ = false;       // epoch()/resume() since begin(): the pass ends
  std::vector<xt_t> stage_x_;  // host staging, used by the one thread that makes batches
  std::vector<yt_t> stage_y_;
  detail::prefetcher<batch_type> ahead_{opt_.prefetch};  // last: its thread stops before the staging goes
};

}  // namespace xtpu::data

template <std::size_t Batch, class X, class Y>
struct std::tuple_size<xtpu::data::batch<Batch, X, Y>> : std::integral_constant<std::size_t, 2> {};
template <std::size_t I, std::size_t Batch, class X, class Y>
struct std::tuple_element<I, xtpu::data::batch<Batch, X, Y>> {
  using type = std::conditional_t<I == 0, X, Y>;
};
