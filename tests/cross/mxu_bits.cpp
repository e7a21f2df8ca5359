// Prints one hash of the bits of a set of matmuls (every precision, every supported path,
// 1 and 2 threads, odd shapes, special values). tests/cross/compare.cmake builds this file
// with -O0, with -O2 -march=x86-64 and with -O2 -march=native and requires the same output.
#include <xtpu/kernels/matmul.hpp>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

namespace {
std::uint64_t fnv(std::uint64_t h, const std::vector<float>& v) {
  for (float x : v) h = (h ^ std::bit_cast<std::uint32_t>(x)) * 0x100000001B3ull;
  return h;
}
}  // namespace

int main() {
  std::uint64_t h = 0xCBF29CE484222325ull;
  const std::size_t shapes[][3] = {{1, 1, 1}, {13, 7, 29}, {40, 33, 131}, {64, 96, 80}};
  for (const auto& s : shapes) {
    const std::size_t M = s[0], N = s[1], K = s[2];
    std::vector<float> a(M * K), b(K * N);
    std::uint64_t x = 42;
    for (auto* v : {&a, &b})
      for (auto& e : *v) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        e = static_cast<float>(static_cast<std::int64_t>(x >> 33) - (1ll << 30)) * 0x1.0p-29f;
      }
    a[0] = 3e-39f;  // denormal
    if (a.size() > 3) a[3] = std::numeric_limits<float>::infinity();
    if (b.size() > 5) b[5] = 0x1.0p-70f;
    for (xtpu::isa p : {xtpu::isa::scalar, xtpu::isa::avx2, xtpu::isa::avx512, xtpu::isa::avx512bf16}) {
      if (!xtpu::kernels::supported(p)) continue;
      for (int t : {1, 2}) {
        std::vector<float> c(M * N);
        xtpu::mxu::pass({a.data(), false, K, 1}, {b.data(), false, N, 1}, c.data(), N, M, N, K, p, t);
        h = fnv(h, c);
        for (xtpu::precision q : {xtpu::precision::high, xtpu::precision::highest}) {
          xtpu::mxu::multi_pass(q, a.data(), b.data(), c.data(), M, N, K, p, t);
          h = fnv(h, c);
        }
      }
      std::printf("%s ok\n", std::string(xtpu::isa_name(p)).c_str());  // the same paths in every build
    }
  }
  std::printf("%016llx\n", static_cast<unsigned long long>(h));
}
