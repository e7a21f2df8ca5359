// data_parallel: data-parallel training on two emulated chips of one process, one thread each.
// Each chip holds a replica of the weights and half of every batch; its gradient goes through
// an xtpu::replica_group's all_reduce — the other chip's gradient copied over (one timed
// transfer each way) and the two added in rank order, the same bits on both — and each chip
// updates its own replica. Each chip accounts its own HBM. (optimizer_step(opt, group, rank)
// does the same for a model's gradients: tests/runtime/test_replicas.cpp.)
// Self-checking: both replicas end bit-identical, close to one chip training on the whole batch,
// and the least-squares problem is solved.
#include <xtpu/xtpu.hpp>

#include "least_squares.hpp"

#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

namespace {
constexpr std::size_t B = 256, Half = B / 2, D = 64;
constexpr int steps = 200;
constexpr float lr = 4.0f;

using problem = least_squares<B, D>;

template <std::size_t Rows>
using batch = xtpu::tensor<float, Rows, D>;
using weights = xtpu::tensor<float, D, 1>;

// the gradient of sum((x w - y)^2) / (2 B) over these rows: x^T (x w - y) / B
template <std::size_t Rows>
auto gradient(const batch<Rows>& x, const xtpu::tensor<float, Rows, 1>& y, const weights& w) {
  return xtpu::matmul<xtpu::precision::highest>(xtpu::transpose(x), xtpu::matmul<xtpu::precision::highest>(x, w) - y) *
         (1.0f / B);
}
}  // namespace

int main() {
  const problem pb;
  const xtpu::device& chip0 = xtpu::device::default_device();
  const xtpu::device chip1(chip0.spec().name, 1);
  const xtpu::device* chips[2] = {&chip0, &chip1};

  std::vector<float> replica[2];
  xtpu::replica_group group(2);
  auto worker = [&](int rank) {
    const xtpu::device& me = *chips[rank];
    xtpu::device_scope on(me);
    batch<Half> x = xtpu::from_host<float, Half, D>(pb.x.data() + rank * Half * D, Half * D);
    xtpu::tensor<float, Half, 1> y = xtpu::from_host<float, Half, 1>(pb.y.data() + rank * Half, Half);
    weights w;  // zeros
    for (int s = 0; s < steps; ++s) {
      const weights g = gradient(x, y, w);
      w = w - lr * group.all_reduce(rank, g);  // g computed (a mark_step), both chips' summed in rank order
      xtpu::mark_step();
    }
    const auto h = w.to_host();
    replica[rank].assign(h.begin(), h.end());
  };
  std::thread t1(worker, 1);
  worker(0);
  t1.join();

  // one chip, the whole batch: the same math with the gradient summed in one matmul
  std::vector<float> whole;
  {
    batch<B> x = xtpu::from_host<float, B, D>(pb.x.data(), B * D);
    xtpu::tensor<float, B, 1> y = xtpu::from_host<float, B, 1>(pb.y.data(), B);
    weights w;
    for (int s = 0; s < steps; ++s) {
      w = w - lr * gradient(x, y, w);
      xtpu::mark_step();
    }
    const auto h = w.to_host();
    whole.assign(h.begin(), h.end());
  }

  double diff_replicas = 0, diff_whole = 0, err_true = 0;
  for (std::size_t k = 0; k < D; ++k) {
    diff_replicas = std::max(diff_replicas, double(std::abs(replica[0][k] - replica[1][k])));
    diff_whole = std::max(diff_whole, double(std::abs(replica[0][k] - whole[k])));
    err_true = std::max(err_true, double(std::abs(replica[0][k] - pb.w_true[k])));
  }
  const auto transfers = xtpu::metrics::metric("TransferDeviceToDeviceTime");
  std::printf("%d steps on %s and %s, batch %zu split in two\n", steps, chip0.name().c_str(), chip1.name().c_str(), B);
  std::printf("  transfers between chips: %lld\n", static_cast<long long>(transfers ? transfers->total_samples : 0));
  std::printf("  HBM peak: %s %llu B, %s %llu B (each chip its own)\n", chip0.name().c_str(),
              static_cast<unsigned long long>(chip0.peak_bytes_in_use()), chip1.name().c_str(),
              static_cast<unsigned long long>(chip1.peak_bytes_in_use()));
  std::printf("  max |replica0 - replica1| = %g, |replica - one chip| = %.3g, |replica - w_true| = %.3g\n",
              diff_replicas, diff_whole, err_true);
  const bool ok = diff_replicas == 0 && diff_whole < 1e-5 && err_true < 1e-3 && transfers &&
                  transfers->total_samples == 2 * steps && chip1.bytes_in_use() == 0;
  std::printf("data_parallel: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
