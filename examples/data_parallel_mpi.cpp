// data_parallel_mpi: data-parallel training across processes with Open MPI — one process per
// replica, each with its own emulated chip, its own copy of the model and its share of every
// batch (torch_xla's multi-process data parallel). xtpu::optimizer_step(opt, group) averages
// the gradients over the processes (rank order: the same bits on every rank) before each
// update. Run: mpirun -np 2 ./data_parallel_mpi (1, 2 or 4 processes; CTest runs 2).
// Self-checking: every rank ends with the same weights bit for bit, the least-squares problem
// is solved, and rank 0 trained as one process on the whole batch would (to rounding).
#include <xtpu/xtpu.hpp>
#include <xtpu/dist/mpi.hpp>

#include "least_squares.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {
constexpr std::size_t B = 256, D = 32;
constexpr int steps = 150;

using problem = least_squares<B, D>;

// x (B, D) -> (B, 1), products at precision::highest (f32 operands as they are)
struct model {
  BOOST_HANA_DEFINE_STRUCT(model, (xtpu::nn::linear<D, 1, float, xtpu::precision::highest>, fc));
};

/// Rows of the batch from row `first`, `steps` SGD steps; step(opt) reduces and updates.
template <std::size_t Rows, class Step>
std::vector<float> train(const problem& pb, std::size_t first, const Step& step, float& last_loss) {
  model m = xtpu::nn::init<model>(7);  // the same init on every rank
  xtpu::optim::sgd opt(m, {.lr = 0.5f, .momentum = 0.9f});
  const auto x = xtpu::from_host<float, Rows, D>(pb.x.data() + first * D, Rows * D);
  const auto y = xtpu::from_host<float, Rows, 1>(pb.y.data() + first, Rows);
  for (int s = 0; s < steps; ++s) {
    xtpu::tensor<float> loss = xtpu::nn::mse(m.fc(x), y);
    xtpu::backward(loss);
    step(opt);
    if (s + 1 == steps) last_loss = loss.item();
  }
  const auto h = m.fc.weight.to_host();
  std::vector<float> w(h.begin(), h.end());
  w.push_back(m.fc.bias.to_host()(0));
  return w;
}

template <std::size_t Ranks>
int run(xtpu::mpi_group& group, const problem& pb) {
  constexpr std::size_t Rows = B / Ranks;
  const int me = group.rank();
  float loss = 0, whole_loss = 0;
  const std::vector<float> w = train<Rows>(pb, static_cast<std::size_t>(me) * Rows, [&](auto& opt) { xtpu::optimizer_step(opt, group); }, loss);
  // every rank's weights on every rank (raw MPI: the check, not the library)
  std::vector<float> all(w.size() * Ranks);
  MPI_Allgather(w.data(), static_cast<int>(w.size()), MPI_FLOAT, all.data(), static_cast<int>(w.size()), MPI_FLOAT, MPI_COMM_WORLD);
  bool same = true;
  for (std::size_t j = 1; j < Ranks; ++j) same = same && std::memcmp(all.data(), all.data() + j * w.size(), w.size() * sizeof(float)) == 0;
  const std::vector<float> whole = train<B>(pb, 0, [](auto& opt) { xtpu::optimizer_step(opt); }, whole_loss);
  double diff_whole = 0, err_true = std::abs(w[D] - 0.5);
  for (std::size_t k = 0; k < D; ++k) {
    diff_whole = std::max(diff_whole, double(std::abs(w[k] - whole[k])));
    err_true = std::max(err_true, double(std::abs(w[k] - pb.w_true[k])));
  }
  diff_whole = std::max(diff_whole, double(std::abs(w[D] - whole[D])));
  const auto to_device = xtpu::metrics::metric("TransferToDeviceTime");
  const bool ok = same && diff_whole < 1e-5 && err_true < 1e-3;
  if (me == 0) {
    std::printf("%d steps on %zu processes, batch %zu split in %zu shares of %zu rows\n", steps, Ranks, B, Ranks, Rows);
    std::printf("  rank 0's last loss on its share %.3g; one process on the whole batch %.3g\n", loss, whole_loss);
    std::printf("  uploads on rank 0 (its data, the gathered gradients): %lld\n",
                static_cast<long long>(to_device ? to_device->total_samples : 0));
    std::printf("  weights identical on every rank: %s; |rank 0 - one process| = %.3g, |w - w_true| = %.3g\n",
                same ? "yes" : "NO", diff_whole, err_true);
  }
  int all_ok = 0, mine = ok ? 1 : 0;
  MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (me == 0) std::printf("data_parallel_mpi: %s\n", all_ok ? "OK" : "FAILED");
  return all_ok ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  const xtpu::mpi_session mpi(argc, argv);
  xtpu::mpi_group group;
  const problem pb(0.5);  // y = x w_true + 0.5
  switch (group.size()) {
    case 1: return run<1>(group, pb);
    case 2: return run<2>(group, pb);
    case 4: return run<4>(group, pb);
    default:
      if (group.rank() == 0) std::fprintf(stderr, "data_parallel_mpi: run on 1, 2 or 4 processes, not %d\n", group.size());
      return 2;
  }
}
