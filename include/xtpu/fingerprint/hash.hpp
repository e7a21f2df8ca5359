// xtpu/fingerprint/hash.hpp — the constexpr structural hash behind every graph fingerprint.
//
// Provides: xtpu::detail::combine (a Merkle step over 64-bit words), detail::combine_run (the
// same over a run-time array, for a step's key), xtpu::op_tag, the
// append-only numbering of operations, and op_name(tag) (its name in debug output). A fingerprint is built from op tags, dtype codes,
// dims, op parameters and child fingerprints only — never from type names, typeid or
// addresses — so g++ and clang++ agree, and so do two runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace xtpu {

/// Operation tags. Append-only: a number, once used, keeps its meaning forever.
enum class op_tag : std::uint32_t {
  leaf = 1, scalar = 2, full = 3, normal = 4, iota = 5, uniform = 6,
  add = 10, sub = 11, mul = 12, div = 13, neg = 14,
  exp = 20, log = 21, sqrt = 22, rsqrt = 23, abs = 24, tanh = 25, sigmoid = 26, relu = 27, gelu = 28, gelu_grad = 29,
  maximum = 30, minimum = 31, pow = 32,
  lt = 40, le = 41, gt = 42, ge = 43, eq = 44, ne = 45,
  where = 50, cast = 51,
  matmul = 60,
  reshape = 70, permute = 71, slice = 72, pad = 73, concat = 74, take = 75, scatter_add = 76,
  gather = 77, scatter_along = 78,
  sum = 80, mean = 81, max = 82,
  gelu_tanh = 90, gelu_tanh_grad = 91,  // unary, continued
  statement = 100, step = 101,
};

/// The name of an op as debug output prints it (XTPU_DEBUG's recompile explanations).
constexpr const char* op_name(op_tag t) noexcept {
  switch (t) {
    case op_tag::leaf: return "tensor";       case op_tag::scalar: return "scalar";
    case op_tag::full: return "full";         case op_tag::normal: return "normal";
    case op_tag::iota: return "iota";         case op_tag::uniform: return "uniform";
    case op_tag::add: return "add";           case op_tag::sub: return "sub";
    case op_tag::mul: return "mul";           case op_tag::div: return "div";
    case op_tag::neg: return "neg";           case op_tag::exp: return "exp";
    case op_tag::log: return "log";           case op_tag::sqrt: return "sqrt";
    case op_tag::rsqrt: return "rsqrt";       case op_tag::abs: return "abs";
    case op_tag::tanh: return "tanh";         case op_tag::sigmoid: return "sigmoid";
    case op_tag::relu: return "relu";         case op_tag::gelu: return "gelu";
    case op_tag::gelu_grad: return "gelu_grad";
    case op_tag::maximum: return "maximum";   case op_tag::minimum: return "minimum";
    case op_tag::pow: return "pow";           case op_tag::lt: return "lt";
    case op_tag::le: return "le";             case op_tag::gt: return "gt";
    case op_tag::ge: return "ge";             case op_tag::eq: return "eq";
    case op_tag::ne: return "ne";             case op_tag::where: return "where";
    case op_tag::cast: return "cast";         case op_tag::matmul: return "matmul";
    case op_tag::reshape: return "reshape";   case op_tag::permute: return "permute";
    case op_tag::slice: return "slice";       case op_tag::pad: return "pad";
    case op_tag::concat: return "concat";     case op_tag::take: return "take";
    case op_tag::scatter_add: return "scatter_add";
    case op_tag::gather: return "gather";     case op_tag::scatter_along: return "scatter_along";
    case op_tag::sum: return "sum";           case op_tag::mean: return "mean";
    case op_tag::max: return "max";           case op_tag::gelu_tanh: return "gelu_tanh";
    case op_tag::gelu_tanh_grad: return "gelu_tanh_grad";
    case op_tag::statement: return "statement";
    case op_tag::step: return "step";
  }
  return "op";
}

namespace detail {

/// splitmix64's finalizer: a bijective avalanche over 64 bits.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

/// One more word into a running hash (run-time keys are built word by word with it).
constexpr std::uint64_t combine_step(std::uint64_t h, std::uint64_t w) noexcept {
  return mix64(h ^ mix64(w + 0x9E3779B97F4A7C15ull)) + 0x632BE59BD9B4E019ull;
}

/// h extended by words, in order (a node's fingerprint: its head, then parameters and children).
constexpr std::uint64_t extend(std::uint64_t h, std::initializer_list<std::uint64_t> words) noexcept {
  for (std::uint64_t w : words) h = combine_step(h, w);
  return h;
}

/// Order-sensitive combination of 64-bit words: combine({a, b}) != combine({b, a}).
constexpr std::uint64_t combine(std::initializer_list<std::uint64_t> words) noexcept {
  return extend(0x9E3779B97F4A7C15ull ^ words.size(), words);
}

/// A run-time key over n words (a step's signature, which a cache hit also compares word for
/// word): word i goes into lane i % 4 as lane = (lane ^ word) * odd constant — a bijection of
/// the lane, one multiply per word; lanes start from the seed avalanched with a constant of
/// their own, so neither small word patterns nor two nearby seeds line them up — and the four
/// lanes are avalanched side by side, folded (each rotated by its own amount) and avalanched
/// once more. Four chains of one multiply instead of one chain of combine_step's four, and a
/// finish two mix64s deep instead of combine's six (five words, each a combine_step on the
/// chain): a step's key costs a few nanoseconds, long or short. Order-sensitive; not a
/// fingerprint (no avalanche per word): a cache hit compares the words themselves.
inline std::uint64_t combine_run(std::uint64_t seed, const std::uint64_t* words, std::size_t n) noexcept {
  constexpr std::uint64_t k = 0x9E3779B97F4A7C15ull;
  std::uint64_t h[4] = {mix64(seed ^ 0x243F6A8885A308D3ull), mix64(seed ^ 0x13198A2E03707344ull),
                        mix64(seed ^ 0xA4093822299F31D0ull), mix64(seed ^ 0x082EFA98EC4E6C89ull)};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (std::size_t j = 0; j < 4; ++j) h[j] = (h[j] ^ words[i + j]) * k;
  for (std::size_t j = 0; i < n; ++i, ++j) h[j] = (h[j] ^ words[i]) * k;
  const auto rotl = [](std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  return mix64(mix64(h[0]) ^ rotl(mix64(h[1]), 16) ^ rotl(mix64(h[2]), 32) ^ rotl(mix64(h[3]), 48) ^ (n * k));
}

}  // namespace detail
}  // namespace xtpu
