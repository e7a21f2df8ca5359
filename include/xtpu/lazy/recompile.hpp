// xtpu/lazy/recompile.hpp — why a step compiled: how its graph differs from the closest cached one.
//
// Provides (xtpu::detail): graph_sketch (what a cached plan keeps of its step to explain a
// recompile later), graph_hash (a step's 128-bit graph hash: its plan-cache key, then a second
// hash of the same signature), describe (a statement as text: "matmul -> f32[128,512]"),
// statement_text and recorded_at (statements by the lines that recorded them) and
// differences (the lines XTPU_DEBUG and the strict mode print: which statement, which
// op/dtype/shape, which operand's wiring, which result kept or dropped, which input donated,
// which storage setting, which device; statements added or taken away between the same
// statements — found by lining the two steps' roots up from both ends — by their numbers).
// The signature is laid out by lazy/step.hpp (record_erased, compiled): per statement its
// fingerprint, a wiring code per leaf, a slot code per scalar; then (from the sketch's `tail`)
// the liveness bits (64 a word), the donation bits, whether float results are stored as bf16
// (XTPU_USE_BF16), the chip.
// Errors: none (text only).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xtpu/fingerprint/hash.hpp"
#include "xtpu/lazy/plan.hpp"
#include "xtpu/metrics/debug.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::detail {

/// What a cached plan keeps of its step: each statement's kernel table and where its words
/// start in the signature, where the liveness and the donation bits start (step.hpp's
/// compiled() says), and how many external tensors the step read.
struct graph_sketch {
  struct stmt {
    const kernel_desc* kernels;
    std::uint32_t n_kernels, sig_begin, n_leaves;
    xtpu::source_location where;
  };
  std::vector<stmt> stmts;
  std::size_t tail = 0, donation = 0;
  std::uint32_t n_external = 0;

  static graph_sketch of(const std::vector<statement>& ss, std::size_t tail, std::size_t donation, std::uint32_t n_external) {
    graph_sketch g;
    g.stmts.reserve(ss.size());
    for (const auto& s : ss) g.stmts.push_back(stmt{s.kernels, s.n_kernels, s.sig_begin, s.n_leaves, s.where});
    g.tail = tail, g.donation = donation;
    g.n_external = n_external;
    return g;
  }
  /// Where statement i's words end.
  std::size_t end_of(std::size_t i) const noexcept { return i + 1 < stmts.size() ? stmts[i + 1].sig_begin : tail; }
};

/// The plan-cache key of a step's signature.
inline std::uint64_t plan_key(const std::vector<std::uint64_t>& sig) noexcept {
  return combine_run(static_cast<std::uint64_t>(op_tag::step), sig.data(), sig.size());
}
/// The 128-bit graph hash of a step's signature: its plan-cache key, then a second hash.
inline std::pair<std::uint64_t, std::uint64_t> graph_hash(const std::vector<std::uint64_t>& sig) {
  return {plan_key(sig), combine_run(static_cast<std::uint64_t>(op_tag::statement), sig.data(), sig.size())};
}

/// A kernel's root op and output type: "matmul -> f32[128,512]".
inline std::string describe(const kernel_desc& k) {
  std::string s = std::string(op_name(k.tag)) + " -> " + k.dtype_name + "[";
  for (std::uint32_t a = 0; a < k.rank; ++a) s += (a ? "," : "") + std::to_string(k.dims[a]);
  return s + "]";
}
inline std::string describe(const graph_sketch::stmt& s) { return describe(s.kernels[s.n_kernels - 1]); }

/// "statement 3", or "statements 0-8" for statements first..last of a step.
inline std::string statements_text(std::size_t first, std::size_t last) {
  return first == last ? "statement " + std::to_string(first)
                       : "statements " + std::to_string(first) + "-" + std::to_string(last);
}
/// "statement 3 at main (train.cpp:45)": statement i of a step and the line that recorded it.
inline std::string statement_text(std::size_t i, const xtpu::source_location& where) {
  return statements_text(i, i) + (where.line() != 0 ? " at " + debug::detail::frame_text(where) : "");
}

/// Where a step's statements were recorded, a run of consecutive statements of one line per
/// entry ("statements 0-8: main (train.cpp:42)"), at most `limit` entries, then the range of the rest.
inline std::vector<std::string> recorded_at(const std::vector<statement>& ss, std::size_t limit = 12) {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (; i < ss.size() && out.size() < limit;) {
    std::size_t j = i + 1;
    while (j < ss.size() && same_place(ss[j].where, ss[i].where)) ++j;
    out.push_back(statements_text(i, j - 1) + ": " + debug::detail::frame_text(ss[i].where));
    i = j;
  }
  if (i < ss.size()) out.push_back("... and " + statements_text(i, ss.size() - 1));
  return out;
}

namespace recompile_detail {
inline std::string wiring_text(std::uint64_t code) {
  return is_step_output(code) ? "the result of statement " + std::to_string(code_index(code))
                              : "input " + std::to_string(code_index(code)) + " (a tensor from outside the step)";
}
inline bool bit(const std::vector<std::uint64_t>& sig, std::size_t word0, std::size_t i) {
  return (sig[word0 + i / 64] >> (i % 64)) & 1u;
}
inline std::size_t equal_statements(const graph_sketch& a, const std::vector<std::uint64_t>& sa, const graph_sketch& b,
                                    const std::vector<std::uint64_t>& sb) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < std::min(a.stmts.size(), b.stmts.size()); ++i) {
    const std::size_t a0 = a.stmts[i].sig_begin, a1 = a.end_of(i);
    const std::size_t b0 = b.stmts[i].sig_begin, b1 = b.end_of(i);
    if (a1 - a0 == b1 - b0 && std::equal(sa.begin() + a0, sa.begin() + a1, sb.begin() + b0)) ++n;
  }
  return n;
}
/// How the statements of two steps line up: the longest runs of equal roots (each statement's
/// first word) at the start and at the end, which do not overlap.
struct alignment {
  std::size_t prefix = 0, suffix = 0;
};
inline alignment align(const graph_sketch& a, const std::vector<std::uint64_t>& sa, const graph_sketch& b,
                       const std::vector<std::uint64_t>& sb) {
  const std::size_t na = a.stmts.size(), nb = b.stmts.size(), n = std::min(na, nb);
  alignment r;
  auto same = [&](std::size_t i, std::size_t j) { return sa[a.stmts[i].sig_begin] == sb[b.stmts[j].sig_begin]; };
  while (r.prefix < n && same(r.prefix, r.prefix)) ++r.prefix;
  while (r.prefix + r.suffix < n && same(na - 1 - r.suffix, nb - 1 - r.suffix)) ++r.suffix;
  return r;
}

/// The statements of the cached step `a` and the new step `b` compared pair by pair: at the same
/// number, or — when statements were only added (or only taken away) between the same ones at
/// both ends — the ones before the change at the same number and the ones after it by their
/// own numbers in each step. An operand of a statement of `a` then names in `b` the result of
/// the statement paired with the one it named, the input met at the same place in the pairs'
/// reads (inputs are numbered by first read), the scalar at the same place (scalars are
/// numbered in order): `none` where there is no such one (a statement taken away).
struct pairing {
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  bool shifted = false;               // statements added (or taken away): the rest paired from both ends
  std::size_t before = 0, after = 0;  // pairs at the same number; pairs after the change
  std::size_t na = 0, nb = 0;
  std::vector<std::uint64_t> result, input, scalar;  // a's numbers -> b's

  std::size_t pairs() const noexcept { return before + after; }
  /// Pair k: the statement's number in a, then in b.
  std::pair<std::size_t, std::size_t> at(std::size_t k) const noexcept {
    return k < before ? std::pair{k, k} : std::pair{na - after + (k - before), nb - after + (k - before)};
  }
  /// Operand code c of a's as b's (none: no counterpart).
  std::uint64_t wire(std::uint64_t c) const noexcept {
    const std::uint64_t j = code_index(c);
    if (is_step_output(c)) return result[j] == none ? none : step_output_code(static_cast<std::uint32_t>(result[j]));
    return j < input.size() && input[j] != none ? external_code(static_cast<std::uint32_t>(input[j])) : none;
  }
};
/// Scalars of statement i of g (its words after the root and the operands).
inline std::size_t scalars_of(const graph_sketch& g, std::size_t i) {
  return g.end_of(i) - g.stmts[i].sig_begin - 1 - g.stmts[i].n_leaves;
}
inline pairing pair_up(const graph_sketch& a, const std::vector<std::uint64_t>& sa, const graph_sketch& b,
                       const std::vector<std::uint64_t>& sb) {
  pairing p;
  p.na = a.stmts.size(), p.nb = b.stmts.size();
  const alignment al = align(a, sa, b, sb);
  const std::size_t shared = al.prefix + al.suffix;
  p.shifted = shared > 0 && p.na != p.nb && shared == std::min(p.na, p.nb);
  if (p.shifted) p.before = al.prefix, p.after = al.suffix;
  else p.before = std::min(p.na, p.nb);
  std::vector<std::uint64_t> base_a(p.na + 1, 0), base_b(p.nb + 1, 0);  // each statement's first scalar
  for (std::size_t i = 0; i < p.na; ++i) base_a[i + 1] = base_a[i] + scalars_of(a, i);
  for (std::size_t i = 0; i < p.nb; ++i) base_b[i + 1] = base_b[i] + scalars_of(b, i);
  p.result.assign(p.na, pairing::none);
  p.scalar.assign(base_a[p.na], pairing::none);
  p.input.assign(a.n_external, pairing::none);
  std::vector<bool> taken(b.n_external, false);
  for (std::size_t k = 0; k < p.pairs(); ++k) {
    const auto [io, i] = p.at(k);
    p.result[io] = i;
    for (std::size_t t = 0; t < std::min(scalars_of(a, io), scalars_of(b, i)); ++t) p.scalar[base_a[io] + t] = base_b[i] + t;
    for (std::uint32_t l = 0; l < std::min(a.stmts[io].n_leaves, b.stmts[i].n_leaves); ++l) {
      const std::uint64_t ca = sa[a.stmts[io].sig_begin + 1 + l], cb = sb[b.stmts[i].sig_begin + 1 + l];
      if (is_step_output(ca) || is_step_output(cb)) continue;
      const std::uint64_t x = code_index(ca), y = code_index(cb);
      if (p.input[x] == pairing::none && !taken[y]) p.input[x] = y, taken[y] = true;  // the first read of each
    }
  }
  return p;
}
}  // namespace recompile_detail

/// How likely `b` is what `a` was meant to match: statements equal word for word at the same
/// number, or the statements they share at both ends when some were added or taken away, then
/// the nearer statement count.
inline std::pair<std::size_t, std::size_t> closeness(const graph_sketch& a, const std::vector<std::uint64_t>& sa,
                                                     const graph_sketch& b, const std::vector<std::uint64_t>& sb) {
  const std::size_t na = a.stmts.size(), nb = b.stmts.size();
  const recompile_detail::pairing p = recompile_detail::pair_up(a, sa, b, sb);
  return {std::max(recompile_detail::equal_statements(a, sa, b, sb), p.shifted ? p.pairs() : 0),
          SIZE_MAX - (na > nb ? na - nb : nb - na)};
}

/// How a step differs from a cached one: its kinship (debug::kinship) and the lines, at most
/// `limit` — 3 when it is not kin: the first differences of a step of another kind say little.
struct graph_diff {
  debug::kinship kin;
  std::vector<std::string> lines;
};

/// How step `now` (signature sn) differs from the cached step `old` (so).
inline graph_diff differences(const graph_sketch& old, const std::vector<std::uint64_t>& so, const graph_sketch& now,
                              const std::vector<std::uint64_t>& sn, std::size_t limit = 8) {
  using namespace recompile_detail;
  graph_diff diff;
  std::vector<std::string>& out = diff.lines;
  std::size_t more = 0;
  auto say = [&](std::string line) {
    if (out.size() < limit) out.push_back(std::move(line));
    else ++more;
  };
  const std::size_t to = old.tail, tn = now.tail;
  if (trailer(so, trailer_word::chip) != trailer(sn, trailer_word::chip))
    say("it runs on another device (a plan is compiled for one chip)");
  if (const bool was = trailer(so, trailer_word::bf16_storage), is = trailer(sn, trailer_word::bf16_storage); was != is)
    say(std::string(use_bf16_setting.name) + " (" + std::string(use_bf16_setting.env) + ", " +
        std::string(use_bf16_setting.setter) + ") is " + (is ? "on" : "off") +
        " now: float results are stored " + (is ? "rounded to bf16" : "as f32") + ", in the cached graph " +
        (was ? "rounded to bf16" : "as f32"));
  const std::size_t n_old = old.stmts.size(), n_new = now.stmts.size();
  const pairing pr = pair_up(old, so, now, sn);
  const std::size_t equal = recompile_detail::equal_statements(old, so, now, sn);
  const std::size_t most = std::max(n_old, n_new), least = std::min(n_old, n_new);
  if (equal == 0 && !pr.shifted && most > 1) diff.kin.kind = debug::kinship::unrelated;
  else if (!pr.shifted && most >= 4 && most >= 2 * least)  // a few statements alike, twice as many in one
    diff.kin = {debug::kinship::other_kind, equal, n_new, n_old};
  if (diff.kin.kind != debug::kinship::related) limit = std::min<std::size_t>(limit, 3);
  // statements only added (or only taken away) between the same ones at both ends: each named
  // alone, the ones around it compared as pairs below
  const std::string around = std::string(pr.before ? "before it" : "") + (pr.before && pr.after ? " and " : "") +
                             (pr.after ? "after it" : "");
  if (pr.shifted && n_new > n_old) {
    for (std::size_t k = pr.before; k < n_new - pr.after; ++k)
      say(statement_text(k, now.stmts[k].where) + " (" + describe(now.stmts[k]) +
          ") is new: the cached graph has the same statements " + around);
  } else if (pr.shifted) {
    for (std::size_t k = pr.before; k < n_old - pr.after; ++k)
      say("the cached graph's " + statement_text(k, old.stmts[k].where) + " (" + describe(old.stmts[k]) +
          ") is not recorded now; the statements " + around + " are the same");
  } else if (n_old != n_new) {
    say("it has " + debug::detail::statements_text(n_new) + ", the cached graph " + std::to_string(n_old) +
        (n_new > n_old ? " (from statement " + std::to_string(n_old) + " on: " + describe(now.stmts[n_old]) + ", ...)"
                       : " (statement " + std::to_string(n_new) + " was " + describe(old.stmts[n_new]) + ")"));
  }
  for (std::size_t k = 0; k < pr.pairs(); ++k) {
    const auto [io, i] = pr.at(k);
    const auto& a = old.stmts[io];
    const auto& b = now.stmts[i];
    const std::size_t a0 = a.sig_begin, a1 = old.end_of(io);
    const std::size_t b0 = b.sig_begin, b1 = now.end_of(i);
    const std::string s = statement_text(i, b.where);
    if (so[a0] != sn[b0]) {
      const std::string da = describe(a), db = describe(b);
      if (da != db) say(s + ": " + db + ", the cached graph " + da);
      else say(s + " (" + db + "): its expression differs below the root (an op, a dtype, a shape or a parameter)");
      continue;
    }
    bool wiring = false;
    for (std::uint32_t l = 0; l < b.n_leaves && !wiring; ++l) {
      if (pr.wire(so[a0 + 1 + l]) != sn[b0 + 1 + l]) {
        say(s + " (" + describe(b) + ") reads " + wiring_text(sn[b0 + 1 + l]) + " as operand " + std::to_string(l) +
            ", the cached graph " + wiring_text(so[a0 + 1 + l]));
        wiring = true;
      }
    }
    bool scalars = a1 - a0 == b1 - b0;
    for (std::size_t w = a0 + 1 + a.n_leaves; scalars && w < a1; ++w)
      scalars = so[w] < pr.scalar.size() && pr.scalar[so[w]] == sn[b0 + (w - a0)];
    if (!wiring && !scalars)
      say(s + " (" + describe(b) + ") uses one scalar node where the cached graph has two, or the other way round");
  }
  for (std::size_t k = 0; k < pr.pairs(); ++k) {  // kept results, pair by pair
    const auto [io, i] = pr.at(k);
    const bool was = bit(so, to, io), is = bit(sn, tn, i);
    if (was != is)
      say("the result of " + statement_text(i, now.stmts[i].where) + " (" + describe(now.stmts[i]) + ") is " +
          (is ? "kept (a tensor outside the step holds it); in the cached graph it was dead"
              : "dead (nothing outside the step holds it); in the cached graph it was kept"));
  }
  for (std::uint32_t x = 0; x < old.n_external; ++x) {  // inputs, each by its number in each step
    const std::uint64_t y = pr.input[x];
    if (y == pairing::none) continue;
    const bool was = bit(so, old.donation, x), is = bit(sn, now.donation, y);
    if (was != is)
      say("input " + std::to_string(y) + (is ? " may be overwritten in place now (only the step holds it)"
                                              : " may not be overwritten in place now (another handle to it is alive)"));
  }
  if (more) out.push_back("... and " + std::to_string(more) + " more");
  if (out.empty()) out.push_back("no difference found in its statements, their wiring, what they keep or what they overwrite");
  return diff;
}

}  // namespace xtpu::detail
