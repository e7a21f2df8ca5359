// xtpu/optim/replicas.hpp — data parallel over the chips of one process, one thread per replica.
//
// Provides: xtpu::replica_group(n) — the meeting point of n replicas, ranks 0..n-1: threads the
// program starts, each driving its own chip (device_scope) with its own copy of the model (the
// group starts no thread); all_reduce(rank, t) — the sum of every replica's t, on the caller's
// device; xtpu::reduce_gradients(model, group, rank) — the gradient of every trainable parameter
// that some replica's backward reached replaced by its mean over the replicas (zeros for a
// replica whose backward did not reach it; a parameter no replica's reached keeps none, so the
// optimizer skips it as on one chip: torch_xla's xm.reduce_gradients);
// xtpu::optimizer_step(opt, group, rank) — reduce_gradients over the optimizer's model, then
// optimizer_step(opt) (torch_xla's xm.optimizer_step under data parallel).
// Each call is a collective: every rank of the group calls it, each from one thread, with
// tensors of the same types in the same order. A call first ends the caller's step (mark_step:
// the values the others read must be computed), then waits for every rank, copies the others'
// values to its own chip (TransferDeviceToDeviceTime, one transfer per tensor and other rank)
// and waits again until every rank has its copies. The sum is recorded (outside the tape: no
// gradient flows through it) in the caller's next step, in rank order (((t0 + t1) + t2) + ...),
// so every replica gets the same bits; a mean is that sum times 1/n.
// Shape rule: the result has t's type and shape. Errors (xtpu::error): a group of fewer than one
// replica; a rank outside [0, n), from that call alone, before it waits; on every rank, ranks
// whose tensors differ in number or, at some position, in type or shape (named). A call that
// throws before its first wait (a bad rank, what mark_step throws) leaves the other ranks
// waiting in that collective; one that throws later (out_of_memory for a copy, on that rank
// only) leaves them waiting at their next — as with any collective library.
#pragma once

#include <barrier>
#include <cstddef>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "xtpu/error.hpp"
#include "xtpu/lazy/grad.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/nn/module.hpp"
#include "xtpu/optim/optimizer.hpp"

namespace xtpu::detail {
/// ((terms[0] + terms[1]) + ...) in rank order: the one order every collective sums in.
template <class V>
V sum_in_rank_order(const std::vector<V>& terms) {
  V sum = terms[0];
  for (std::size_t j = 1; j < terms.size(); ++j) sum = sum + terms[j];
  return sum;
}
/// The replicas' mean of a gradient: their sum in rank order times 1/n.
template <class V>
V replica_mean(const std::vector<V>& terms) {
  return sum_in_rank_order(terms) * (1.0f / static_cast<float>(terms.size()));
}
}  // namespace xtpu::detail

namespace xtpu {

class replica_group;
template <class Model>
void reduce_gradients(Model& model, replica_group& group, int rank);

class replica_group {
 public:
  explicit replica_group(int n) : n_(checked_size(n)), sync_(n_), posted_(static_cast<std::size_t>(n_)) {}
  replica_group(const replica_group&) = delete;
  replica_group& operator=(const replica_group&) = delete;

  int size() const noexcept { return n_; }

  /// The sum over the replicas of their t, on the caller's device: the same bits on every rank.
  // t (Dims...) on each rank -> (Dims...)
  template <class T, std::size_t... Dims>
  tensor<T, Dims...> all_reduce(int rank, const tensor<T, Dims...>& t) {
    using V = tensor<T, Dims...>;
    std::vector<V> terms;
    exchange(rank, {posted_item::of(t)}, [&](const posted_items& posted) {
      for (int j = 0; j < n_; ++j) terms.push_back(item<V>(posted, j, 0).to(device::current()));
    });
    return detail::sum_in_rank_order(terms);
  }

 private:
  template <class Model>
  friend void reduce_gradients(Model& model, replica_group& group, int rank);

  /// What a rank posts of one value: its address, its type (checked against the others') and
  /// whether it holds anything (a parameter's gradient).
  struct posted_item {
    const void* value;
    const std::type_info* type;
    bool present = true;
    template <class V>
    static posted_item of(const V& v, bool present = true) {
      return {&v, &typeid(V), present};
    }
  };
  using posted_items = std::vector<std::vector<posted_item>>;  // [rank][item]

  /// Runs f(posted) once every rank has posted `mine` (after its mark_step), and returns once
  /// every rank's f has returned; f's exception is rethrown on its own rank.
  template <class F>
  void exchange(int rank, std::vector<posted_item> mine, F&& f) {
    check_rank(rank);
    xtpu::mark_step();  // the values the others read: computed
    auto& own = posted_[static_cast<std::size_t>(rank)];
    own = std::move(mine);
    sync_.arrive_and_wait();
    const std::string mismatch = posts_differ();  // (every rank finds the same)
    std::exception_ptr failed;
    if (mismatch.empty()) {
      try {
        const no_grad untaped;  // collectives' sums are no op of the model's: no gradient flows through them
        f(static_cast<const posted_items&>(posted_));
      } catch (...) {
        failed = std::current_exception();
      }
    }
    sync_.arrive_and_wait();  // every rank has its copies: the items may change
    own.clear();              // (nothing of this exchange is read again)
    if (!mismatch.empty()) throw error(mismatch);
    if (failed) std::rethrow_exception(failed);
  }
  /// Rank j's item i, of type V (posts_differ checked the type).
  template <class V>
  static const V& item(const posted_items& posted, int j, std::size_t i) {
    return *static_cast<const V*>(posted[static_cast<std::size_t>(j)][i].value);
  }

  static int checked_size(int n) {
    if (n < 1) throw error("xtpu: replica_group(" + std::to_string(n) + "): a group needs at least one replica");
    return n;
  }
  void check_rank(int rank) const {
    if (rank < 0 || rank >= n_)
      throw error("xtpu: replica_group: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(n_) +
                  "): the group's size is " + std::to_string(n_));
  }
  /// The error text when the ranks posted different numbers of items, or items of different
  /// types (a tensor's type is its element type and shape) at some position; else empty.
  std::string posts_differ() const {
    const auto& first = posted_[0];
    std::ostringstream os;
    for (const auto& p : posted_)
      if (p.size() != first.size()) {
        os << "xtpu: replica_group: the ranks reduce different numbers of tensors (";
        for (int j = 0; j < n_; ++j) os << (j ? ", " : "") << "rank " << j << ": " << posted_[static_cast<std::size_t>(j)].size();
        os << "): every rank must call with the same tensors, in the same order";
        return os.str();
      }
    for (std::size_t i = 0; i < first.size(); ++i)
      for (int j = 1; j < n_; ++j)
        if (*posted_[static_cast<std::size_t>(j)][i].type != *first[i].type) {
          os << "xtpu: replica_group: rank " << j << "'s tensor " << i << " differs from rank 0's in type or shape: "
             << "every rank must call with the same tensors, in the same order";
          return os.str();
        }
    return {};
  }

  int n_;
  std::barrier<> sync_;
  posted_items posted_;  // each rank's items of the current exchange
};

/// See the top of this file: one exchange for the whole model.
template <class Model>
void reduce_gradients(Model& model, replica_group& group, int rank) {
  using item_t = replica_group::posted_item;
  std::vector<item_t> mine;
  nn::for_each_parameter(model, [&](const std::string&, auto& p) {
    if (p.requires_grad()) mine.push_back(item_t::of(p, p.has_grad()));
  });
  std::vector<std::function<void()>> set;  // after the exchange: the others read our gradients until then
  group.exchange(rank, std::move(mine), [&](const replica_group::posted_items& posted) {
    std::size_t i = 0;
    nn::for_each_parameter(model, [&](const std::string&, auto& p) {
      if (!p.requires_grad()) return;
      using P = std::remove_cvref_t<decltype(p)>;
      bool reached = false;
      for (const auto& r : posted) reached = reached || r[i].present;
      if (reached) {
        std::vector<typename P::tensor_type> terms;
        for (int j = 0; j < group.size(); ++j)
          terms.push_back(replica_group::item<P>(posted, j, i).grad().to(device::current()));  // (grad(): zeros if none)
        typename P::tensor_type mean = detail::replica_mean(terms);
        set.push_back([&p, mean] { p.set_grad(mean); });
      }
      ++i;
    });
  });
  for (auto& s : set) s();
}

/// reduce_gradients over opt's model, then optimizer_step(opt): update and mark_step.
template <class Optimizer>
void optimizer_step(Optimizer& opt, replica_group& group, int rank,
                    xtpu::source_location where = xtpu::source_location::current()) {
  reduce_gradients(opt.model(), group, rank);
  optimizer_step(opt, where);
}

}  // namespace xtpu
