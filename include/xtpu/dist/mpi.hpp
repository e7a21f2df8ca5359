// xtpu/dist/mpi.hpp — data parallel across processes with MPI (Open MPI): one process per
// replica, each with its own emulated chip and its own copy of the model (torch_xla's
// multi-process data parallel, xmp.spawn, with mpirun starting the processes).
//
// Provides: xtpu::mpi_session(argc, argv) — MPI_Init_thread (MPI_THREAD_SERIALIZED: xtpu's own
// threads never call MPI, a group's calls come from one thread at a time) for the program's
// lifetime and MPI_Finalize after (nothing when MPI is initialised already);
// xtpu::mpi_group(comm = MPI_COMM_WORLD) — the processes of comm as replicas, rank() and
// size() as MPI's; group.all_reduce(t), xtpu::reduce_gradients(model, group) and
// xtpu::optimizer_step(opt, group) as replica_group's (optim/replicas.hpp), the rank being the
// process's: the same sum in rank order (((t0 + t1) + t2) + ...), a mean that sum times 1/n, a
// parameter no rank's backward reached left without a gradient — so the same bits on every
// rank, and the bits replica_group gives for the same values.
// Each call is a collective: every process of the group calls it with tensors of the same types
// in the same order. A call ends the caller's step (mark_step) and copies each tensor to the host
// (TransferFromDeviceTime); then three MPI_Allgathers, the same on every rank whatever happens:
// how each rank fared and its counts, each tensor's type and presence, and every rank's bytes
// (a model's gradients in one payload). Every rank's values, its own included, are uploaded
// (TransferToDeviceTime) and summed outside the tape (no gradient flows through it) in the
// caller's next step.
// Shape rule: the result has t's type and shape.
// Errors (xtpu::error), each on every rank: ranks whose tensors differ in number or, at some
// position, in type or shape (named); more than INT_MAX bytes from one rank in one call; a rank
// that failed before the exchange (what mark_step or a copy threw: rethrown on that rank, named
// on the others). An mpi_group made before MPI is initialised. After any of them the group
// works on. MPI's own errors go to its error handler (by default fatal: the job ends).
// Not in xtpu.hpp (it needs <mpi.h>): link MPI::MPI_CXX (CMake's FindMPI, COMPONENTS CXX), run under mpirun.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "xtpu/error.hpp"
#include "xtpu/lazy/grad.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/nn/module.hpp"
#include "xtpu/optim/optimizer.hpp"
#include "xtpu/optim/replicas.hpp"

namespace xtpu {

/// MPI_Init for as long as it lives, MPI_Finalize after (if it made the first).
class mpi_session {
 public:
  mpi_session(int& argc, char**& argv) {
    int on = 0;
    MPI_Initialized(&on);
    if (!on) {
      int provided = 0;  // (xtpu's own threads never call MPI; a group's calls come from one thread at a time)
      MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
      owns_ = true;
      if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        throw error("xtpu: mpi_session: this MPI gives thread level " + std::to_string(provided) +
                    ", below MPI_THREAD_SERIALIZED (" + std::to_string(MPI_THREAD_SERIALIZED) + ")");
      }
    }
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;
  ~mpi_session() {
    int done = 0;
    MPI_Finalized(&done);
    if (owns_ && !done) MPI_Finalize();
  }

 private:
  bool owns_ = false;
};

class mpi_group;
template <class Model>
void reduce_gradients(Model& model, mpi_group& group, xtpu::source_location where = xtpu::source_location::current());

class mpi_group {
 public:
  explicit mpi_group(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    int on = 0;
    MPI_Initialized(&on);
    if (!on) throw error("xtpu: mpi_group: MPI is not initialised: make an xtpu::mpi_session(argc, argv) (or call MPI_Init) first");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  /// The sum over the ranks of their t, on the caller's device: the same bits on every rank.
  // t (Dims...) on each rank -> (Dims...)
  template <class T, std::size_t... Dims>
  tensor<T, Dims...> all_reduce(const tensor<T, Dims...>& t, xtpu::source_location where = xtpu::source_location::current()) {
    using V = tensor<T, Dims...>;
    exchange([&] {
      xtpu::mark_step();  // t's value: computed
      payload_.clear();
      detail::host_transfer::into(t, slot<V>(), where);
      return std::vector<item>{item::of<V>(true)};
    });
    const no_grad untaped;  // a collective's sum is no op of the model's
    return detail::sum_in_rank_order(terms<V>(0));
  }

 private:
  template <class Model>
  friend void reduce_gradients(Model& model, mpi_group& group, xtpu::source_location where);

  /// What a rank says of one tensor: its type (a tensor's type is its element type and shape)
  /// and whether it holds anything (a parameter's gradient).
  struct item {
    std::uint64_t type;
    bool present;
    template <class V>
    static item of(bool present) {
      return {type_code(typeid(V).name()), present};
    }
  };

  /// FNV-1a of a type's name: the same program on every rank names its types alike.
  static std::uint64_t type_code(std::string_view name) noexcept {
    std::uint64_t h = 14695981039346656037ull;
    for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return h;
  }

  /// A payload lays its tensors one after the other, each from a multiple of 64 bytes: the
  /// end of a tensor of type V placed at `offset`.
  template <class V>
  static std::size_t place(std::size_t offset) noexcept {
    return offset + (V::size * sizeof(typename V::value_type) + 63) / 64 * 64;
  }
  /// The T at `offset` of a payload buffer (storage MPI and memcpy fill: T's made there).
  template <class T>
  static T* at(std::vector<std::byte>& buffer, std::size_t offset) noexcept {
    return reinterpret_cast<T*>(buffer.data() + offset);
  }
  /// Room for one more tensor of type V at payload_'s end (zeros until written), placed as
  /// place() says.
  template <class V>
  typename V::value_type* slot() {
    const std::size_t offset = payload_.size();
    payload_.resize(place<V>(offset));
    return at<typename V::value_type>(payload_, offset);
  }
  /// Every rank's tensor of type V at `offset` of its payload, uploaded to the caller's device
  /// (TransferToDeviceTime), in rank order.
  template <class V, class T = typename V::value_type>
  std::vector<V> terms(std::size_t offset) {
    std::vector<V> out;
    for (int j = 0; j < size_; ++j)
      out.push_back(upload<V>(at<T>(gathered_, static_cast<std::size_t>(j) * payload_.size() + offset)));
    return out;
  }
  template <class V, class T, std::size_t... Dims>
  static V upload_as(const T* values, const tensor<T, Dims...>*) {
    return detail::host_transfer::from<T, Dims...>(values);
  }
  template <class V>
  static V upload(const typename V::value_type* values) {
    return upload_as<V>(values, static_cast<const V*>(nullptr));
  }
  /// Whether rank j said item i (of m) holds a value.
  bool present(int j, std::size_t i, std::size_t m) const noexcept { return present_[static_cast<std::size_t>(j) * m + i] != 0; }

  /// Runs prepare() (this rank's items and payload_: it may throw), then, once every rank has
  /// told the others how it went (the first collective: so an error on one rank is an error on
  /// every rank, never a rank left waiting), checks that the ranks' items agree and gathers
  /// every rank's presence flags (present()) and payload_ (gathered_, rank j's at
  /// j * payload_.size()) on every rank. Three collectives, the same on every rank whatever
  /// happens: each decision below is made from gathered data, the same everywhere.
  template <class Prepare>
  void exchange(Prepare&& prepare) {
    std::exception_ptr failed;
    std::vector<item> items;
    try {
      items = prepare();
    } catch (...) {
      failed = std::current_exception();
    }
    const auto n = static_cast<std::size_t>(size_);
    const std::uint64_t mine[3] = {failed ? 0u : 1u, items.size(), payload_.size()};
    std::vector<std::uint64_t> heads(3 * n);  // rank j's ok, count and payload bytes at 3 j
    MPI_Allgather(mine, 3, MPI_UINT64_T, heads.data(), 3, MPI_UINT64_T, comm_);
    for (std::size_t j = 0; j < n; ++j)
      if (heads[3 * j] == 0) {
        if (failed) std::rethrow_exception(failed);
        throw error("xtpu: mpi_group: rank " + std::to_string(j) + " failed before the exchange (its own error says why)");
      }
    std::size_t largest = 0;
    for (std::size_t j = 0; j < n; ++j) {
      if (heads[3 * j + 1] != heads[1]) {
        std::ostringstream os;
        os << "xtpu: mpi_group: the ranks reduce different numbers of tensors (";
        for (std::size_t k = 0; k < n; ++k) os << (k ? ", " : "") << "rank " << k << ": " << heads[3 * k + 1];
        os << "): every rank must call with the same tensors, in the same order";
        throw error(os.str());
      }
      largest = std::max<std::size_t>(largest, heads[3 * j + 2]);
    }
    const std::size_t m = items.size();
    if (2 * m > INT_MAX || largest > INT_MAX)
      throw error("xtpu: mpi_group: " + std::to_string(largest) + " bytes of " + std::to_string(m) +
                  " tensors from one rank in one call: at most " + std::to_string(INT_MAX) + " bytes (MPI counts are int)");
    std::vector<std::uint64_t> said(2 * m), all(2 * m * n);  // each item's type and presence
    for (std::size_t i = 0; i < m; ++i) said[2 * i] = items[i].type, said[2 * i + 1] = items[i].present;
    MPI_Allgather(said.data(), static_cast<int>(2 * m), MPI_UINT64_T, all.data(), static_cast<int>(2 * m), MPI_UINT64_T, comm_);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 1; j < n; ++j)
        if (all[2 * (j * m + i)] != all[2 * i])
          throw error("xtpu: mpi_group: rank " + std::to_string(j) + "'s tensor " + std::to_string(i) +
                      " differs from rank 0's in type or shape: every rank must call with the same tensors, in the same order");
    for (std::size_t j = 1; j < n; ++j)  // (equal types make equal sizes; a hash collision would not)
      if (heads[3 * j + 2] != heads[2])
        throw error("xtpu: mpi_group: rank " + std::to_string(j) + " sends " + std::to_string(heads[3 * j + 2]) +
                    " bytes where rank 0 sends " + std::to_string(heads[2]) + ": tensors of different types");
    present_.resize(m * n);
    for (std::size_t k = 0; k < m * n; ++k) present_[k] = all[2 * k + 1] != 0;
    gathered_.resize(payload_.size() * n);  // (kept between calls: no new pages for the next)
    MPI_Allgather(payload_.data(), static_cast<int>(payload_.size()), MPI_BYTE, gathered_.data(),
                  static_cast<int>(payload_.size()), MPI_BYTE, comm_);
  }

  std::vector<std::byte> payload_, gathered_;  // this rank's tensors; every rank's
  std::vector<std::uint8_t> present_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

/// replica_group's reduce_gradients across processes (see the top of this file): one gather for
/// the whole model.
template <class Model>
void reduce_gradients(Model& model, mpi_group& group, xtpu::source_location where) {
  std::vector<mpi_group::item> items;
  group.exchange([&] {
    xtpu::mark_step();  // the gradients: computed
    group.payload_.clear();
    nn::for_each_parameter(model, [&](const std::string&, auto& p) {
      using V = typename std::remove_cvref_t<decltype(p)>::tensor_type;
      if (!p.requires_grad()) return;
      items.push_back(mpi_group::item::of<V>(p.has_grad()));
      auto* dst = group.slot<V>();  // (a gradient no backward reached: zeros)
      if (p.has_grad()) detail::host_transfer::into(p.grad(), dst, where);
    });
    return items;
  });
  const no_grad untaped;
  std::size_t i = 0, offset = 0;
  nn::for_each_parameter(model, [&](const std::string&, auto& p) {
    using V = typename std::remove_cvref_t<decltype(p)>::tensor_type;
    if (!p.requires_grad()) return;
    bool reached = false;
    for (int j = 0; j < group.size(); ++j) reached = reached || group.present(j, i, items.size());
    if (reached) p.set_grad(detail::replica_mean(group.terms<V>(offset)));
    ++i;
    offset = mpi_group::place<V>(offset);
  });
}

/// reduce_gradients over opt's model, then optimizer_step(opt): update and mark_step.
template <class Optimizer>
void optimizer_step(Optimizer& opt, mpi_group& group, xtpu::source_location where = xtpu::source_location::current()) {
  reduce_gradients(opt.model(), group, where);
  optimizer_step(opt, where);
}

}  // namespace xtpu
