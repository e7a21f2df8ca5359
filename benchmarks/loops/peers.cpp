// The peers of bench_loops (see peers.hpp). Built -O3 -march=native -fopenmp; the hand loops
// are what a careful C++ programmer writes without intrinsics (libm's expf, OpenMP over the
// outer index from 32 K elements, the grain xtpu's loops split at).
#define XTENSOR_USE_XSIMD
#define XTENSOR_USE_OPENMP
#define XTENSOR_OPENMP_TRESHOLD 32768

#include "peers.hpp"

#include <xtpu/kernels/intrinsics.hpp>  // first: g++ 12.2's AVX-512 header warnings (see there)

#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

namespace peers {
namespace {

constexpr std::size_t grain = 32768;
using tensor2 = xt::xtensor<float, 2>;
using tensor1 = xt::xtensor<float, 1>;

std::vector<float> zeros(std::size_t n) { return std::vector<float>(n, 0.0f); }

tensor2 as_xt(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  tensor2 t = xt::adapt(v, std::array<std::size_t, 2>{rows, cols});
  return t;
}
tensor1 as_xt(const std::vector<float>& v) {
  tensor1 t = xt::adapt(v, std::array<std::size_t, 1>{v.size()});
  return t;
}

// f(0) .. f(count - 1), over OpenMP's threads when the work (count * per elements) reaches the
// grain; below it a plain loop (an `if` clause would still pay for a parallel region)
template <class F>
void for_each(std::size_t count, std::size_t per, F f) {
  if (count * per >= grain) {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < count; ++i) f(i);
  } else {
    for (std::size_t i = 0; i < count; ++i) f(i);
  }
}
// one vectorisable loop over [0, n) per chunk of 4096 (parallel above the grain)
template <class F>
void for_range(std::size_t n, F f) {
  constexpr std::size_t chunk = 4096;
  for_each((n + chunk - 1) / chunk, chunk, [&](std::size_t c) {
    const std::size_t lo = c * chunk, hi = std::min(n, lo + chunk);
    f(lo, hi);
  });
}

// ---- op by op: one pass per op, each writing a temporary ---------------------------------
template <class F>
void map1(float* o, const float* x, std::size_t n, F f) {
  for_range(n, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) o[i] = f(x[i]);
  });
}
template <class F>
void map2(float* o, const float* x, const float* y, std::size_t n, F f) {
  for_range(n, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) o[i] = f(x[i], y[i]);
  });
}
// y broadcast along rows (y has `cols` elements) or along columns (y has `rows` elements)
template <bool PerRow, class F>
void map2b(float* o, const float* x, const float* y, std::size_t rows, std::size_t cols, F f) {
  for_each(rows, cols, [&](std::size_t r) {
    for (std::size_t j = 0; j < cols; ++j) o[r * cols + j] = f(x[r * cols + j], PerRow ? y[r] : y[j]);
  });
}
template <class F>
void row_reduce(float* o, const float* x, std::size_t rows, std::size_t cols, float init, F f) {
  for_each(rows, cols, [&](std::size_t r) {
    float acc = init;
    for (std::size_t j = 0; j < cols; ++j) acc = f(acc, x[r * cols + j]);
    o[r] = acc;
  });
}

const auto add = [](float x, float y) { return x + y; };
const auto sub = [](float x, float y) { return x - y; };
const auto mul = [](float x, float y) { return x * y; };
const auto dvd = [](float x, float y) { return x / y; };
const auto mx = [](float x, float y) { return std::max(x, y); };

// ---- chain: o = max(a*b + c, 0) * d, c of shape (rows, cols) or (cols) ----------------------
std::function<void()> chain(impl how, std::size_t rows, std::size_t cols, bool bcast) {
  const std::size_t n = rows * cols;
  auto a = std::make_shared<std::vector<float>>(inputs(0, n)), b = std::make_shared<std::vector<float>>(inputs(1, n)),
       c = std::make_shared<std::vector<float>>(inputs(2, bcast ? cols : n)),
       d = std::make_shared<std::vector<float>>(inputs(3, n)), o = std::make_shared<std::vector<float>>(zeros(n));
  switch (how) {
    case impl::hand:
      return [=] {
        const float *pa = a->data(), *pb = b->data(), *pc = c->data(), *pd = d->data();
        float* po = o->data();
        if (bcast)
          for_each(rows, cols, [&](std::size_t r) {
            const std::size_t k = r * cols;
            for (std::size_t j = 0; j < cols; ++j) po[k + j] = std::max(pa[k + j] * pb[k + j] + pc[j], 0.0f) * pd[k + j];
          });
        else
          for_range(n, [&](std::size_t lo, std::size_t hi) {
            for (std::size_t i = lo; i < hi; ++i) po[i] = std::max(pa[i] * pb[i] + pc[i], 0.0f) * pd[i];
          });
      };
    case impl::op_by_op: {
      auto t1 = std::make_shared<std::vector<float>>(zeros(n)), t2 = std::make_shared<std::vector<float>>(zeros(n)),
           t3 = std::make_shared<std::vector<float>>(zeros(n));
      return [=] {
        map2(t1->data(), a->data(), b->data(), n, mul);
        if (bcast)
          map2b<false>(t2->data(), t1->data(), c->data(), rows, cols, add);
        else
          map2(t2->data(), t1->data(), c->data(), n, add);
        map1(t3->data(), t2->data(), n, [](float x) { return std::max(x, 0.0f); });
        map2(o->data(), t3->data(), d->data(), n, mul);
      };
    }
    case impl::xtensor: {
      auto xa = std::make_shared<tensor2>(as_xt(*a, rows, cols)), xb = std::make_shared<tensor2>(as_xt(*b, rows, cols)),
           xd = std::make_shared<tensor2>(as_xt(*d, rows, cols)), xo = std::make_shared<tensor2>(as_xt(*o, rows, cols));
      if (bcast) {
        auto xc = std::make_shared<tensor1>(as_xt(*c));
        return [=] { xt::noalias(*xo) = xt::maximum(*xa * *xb + *xc, 0.0f) * *xd; };
      }
      auto xc = std::make_shared<tensor2>(as_xt(*c, rows, cols));
      return [=] { xt::noalias(*xo) = xt::maximum(*xa * *xb + *xc, 0.0f) * *xd; };
    }
  }
  return {};
}

// ---- softmax along the last axis -----------------------------------------------------------
std::function<void()> softmax(impl how, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  auto x = std::make_shared<std::vector<float>>(inputs(0, n)), o = std::make_shared<std::vector<float>>(zeros(n));
  switch (how) {
    case impl::hand:
      return [=] {
        const float* px = x->data();
        float* po = o->data();
        for_each(rows, cols, [&](std::size_t r) {
          const float* xr = px + r * cols;
          float* orow = po + r * cols;
          float m = xr[0];
          for (std::size_t j = 1; j < cols; ++j) m = std::max(m, xr[j]);
          float s = 0.0f;
          for (std::size_t j = 0; j < cols; ++j) s += orow[j] = std::exp(xr[j] - m);
          for (std::size_t j = 0; j < cols; ++j) orow[j] = orow[j] / s;
        });
      };
    case impl::op_by_op: {
      auto m = std::make_shared<std::vector<float>>(zeros(rows)), s = std::make_shared<std::vector<float>>(zeros(rows)),
           t1 = std::make_shared<std::vector<float>>(zeros(n)), t2 = std::make_shared<std::vector<float>>(zeros(n));
      return [=] {
        row_reduce(m->data(), x->data(), rows, cols, -INFINITY, mx);
        map2b<true>(t1->data(), x->data(), m->data(), rows, cols, sub);
        map1(t2->data(), t1->data(), n, [](float v) { return std::exp(v); });
        row_reduce(s->data(), t2->data(), rows, cols, 0.0f, add);
        map2b<true>(o->data(), t2->data(), s->data(), rows, cols, dvd);
      };
    }
    case impl::xtensor: {
      auto xx = std::make_shared<tensor2>(as_xt(*x, rows, cols)), xo = std::make_shared<tensor2>(as_xt(*o, rows, cols));
      auto xe = std::make_shared<tensor2>(as_xt(*o, rows, cols));
      return [=] {
        const tensor2 m = xt::amax(*xx, {1}, xt::keep_dims);
        xt::noalias(*xe) = xt::exp(*xx - m);
        const tensor2 s = xt::sum(*xe, {1}, xt::keep_dims);
        xt::noalias(*xo) = *xe / s;
      };
    }
  }
  return {};
}

// ---- layer norm along the last axis, with gamma and beta of (cols) --------------------------
std::function<void()> layer_norm(impl how, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  auto x = std::make_shared<std::vector<float>>(inputs(0, n)), g = std::make_shared<std::vector<float>>(inputs(1, cols)),
       b = std::make_shared<std::vector<float>>(inputs(2, cols)), o = std::make_shared<std::vector<float>>(zeros(n));
  const float inv = 1.0f / static_cast<float>(cols);
  switch (how) {
    case impl::hand:
      return [=] {
        const float *px = x->data(), *pg = g->data(), *pb = b->data();
        float* po = o->data();
        for_each(rows, cols, [&](std::size_t r) {
          const float* xr = px + r * cols;
          float s = 0.0f;
          for (std::size_t j = 0; j < cols; ++j) s += xr[j];
          const float mu = s * inv;
          float q = 0.0f;
          for (std::size_t j = 0; j < cols; ++j) q += (xr[j] - mu) * (xr[j] - mu);
          const float rstd = 1.0f / std::sqrt(q * inv + ln_eps);
          for (std::size_t j = 0; j < cols; ++j) po[r * cols + j] = (xr[j] - mu) * rstd * pg[j] + pb[j];
        });
      };
    case impl::op_by_op: {
      auto mu = std::make_shared<std::vector<float>>(zeros(rows)), var = std::make_shared<std::vector<float>>(zeros(rows)),
           rs = std::make_shared<std::vector<float>>(zeros(rows)), t1 = std::make_shared<std::vector<float>>(zeros(n)),
           t2 = std::make_shared<std::vector<float>>(zeros(n)), t3 = std::make_shared<std::vector<float>>(zeros(n));
      return [=] {
        row_reduce(mu->data(), x->data(), rows, cols, 0.0f, add);
        map1(mu->data(), mu->data(), rows, [=](float v) { return v * inv; });
        map2b<true>(t1->data(), x->data(), mu->data(), rows, cols, sub);
        map2(t2->data(), t1->data(), t1->data(), n, mul);
        row_reduce(var->data(), t2->data(), rows, cols, 0.0f, add);
        map1(rs->data(), var->data(), rows, [=](float v) { return 1.0f / std::sqrt(v * inv + ln_eps); });
        map2b<true>(t3->data(), t1->data(), rs->data(), rows, cols, mul);
        map2b<false>(t2->data(), t3->data(), g->data(), rows, cols, mul);
        map2b<false>(o->data(), t2->data(), b->data(), rows, cols, add);
      };
    }
    case impl::xtensor: {
      auto xx = std::make_shared<tensor2>(as_xt(*x, rows, cols)), xo = std::make_shared<tensor2>(as_xt(*o, rows, cols));
      auto xg = std::make_shared<tensor1>(as_xt(*g)), xb = std::make_shared<tensor1>(as_xt(*b));
      return [=] {
        const tensor2 mu = xt::mean(*xx, {1}, xt::keep_dims);
        const tensor2 xc = *xx - mu;
        const tensor2 var = xt::mean(xc * xc, {1}, xt::keep_dims);
        xt::noalias(*xo) = xc / xt::sqrt(var + ln_eps) * *xg + *xb;
      };
    }
  }
  return {};
}

// ---- AdamW over rows * cols parameters (step t counts up) -----------------------------------
std::function<void()> adamw(impl how, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  auto p = std::make_shared<std::vector<float>>(inputs(0, n, 0.02f)),
       g = std::make_shared<std::vector<float>>(inputs(1, n, 0.001f)), m = std::make_shared<std::vector<float>>(zeros(n)),
       v = std::make_shared<std::vector<float>>(zeros(n));
  auto t = std::make_shared<int>(0);
  const auto bias = [t] {
    ++*t;
    return std::pair{1.0f - std::pow(b1, float(*t)), 1.0f - std::pow(b2, float(*t))};
  };
  switch (how) {
    case impl::hand:
      return [=] {
        const std::pair<float, float> bc = bias();
        const float c1 = bc.first, c2 = bc.second;  // not a structured binding: clang 14 cannot capture one
        float *pp = p->data(), *pm = m->data(), *pv = v->data();
        const float* pg = g->data();
        for_range(n, [&](std::size_t lo, std::size_t hi) {
          for (std::size_t i = lo; i < hi; ++i) {
            pm[i] = b1 * pm[i] + (1.0f - b1) * pg[i];
            pv[i] = b2 * pv[i] + (1.0f - b2) * pg[i] * pg[i];
            pp[i] = pp[i] - lr * ((pm[i] / c1) / (std::sqrt(pv[i] / c2) + adam_eps) + wd * pp[i]);
          }
        });
      };
    case impl::op_by_op: {
      auto t1 = std::make_shared<std::vector<float>>(zeros(n)), t2 = std::make_shared<std::vector<float>>(zeros(n)),
           t3 = std::make_shared<std::vector<float>>(zeros(n));
      return [=] {
        const std::pair<float, float> bc = bias();
        const float c1 = bc.first, c2 = bc.second;  // not a structured binding: clang 14 cannot capture one
        float *pp = p->data(), *pm = m->data(), *pv = v->data(), *a = t1->data(), *b = t2->data(), *c = t3->data();
        const float* pg = g->data();
        // m = b1*m + (1-b1)*g
        map1(a, pm, n, [](float x) { return b1 * x; });
        map1(b, pg, n, [](float x) { return (1.0f - b1) * x; });
        map2(pm, a, b, n, add);
        // v = b2*v + (1-b2)*g*g
        map1(a, pg, n, [](float x) { return (1.0f - b2) * x; });
        map2(b, a, pg, n, mul);
        map1(a, pv, n, [](float x) { return b2 * x; });
        map2(pv, a, b, n, add);
        // p = p - lr*((m/c1)/(sqrt(v/c2)+eps) + wd*p)
        map1(a, pm, n, [c1](float x) { return x / c1; });
        map1(b, pv, n, [c2](float x) { return x / c2; });
        map1(b, b, n, [](float x) { return std::sqrt(x); });
        map1(b, b, n, [](float x) { return x + adam_eps; });
        map2(a, a, b, n, dvd);
        map1(c, pp, n, [](float x) { return wd * x; });
        map2(a, a, c, n, add);
        map1(a, a, n, [](float x) { return lr * x; });
        map2(pp, pp, a, n, sub);
      };
    }
    case impl::xtensor: {
      auto xp = std::make_shared<tensor2>(as_xt(*p, rows, cols)), xg = std::make_shared<tensor2>(as_xt(*g, rows, cols)),
           xm = std::make_shared<tensor2>(as_xt(*m, rows, cols)), xv = std::make_shared<tensor2>(as_xt(*v, rows, cols));
      return [=] {
        const std::pair<float, float> bc = bias();
        const float c1 = bc.first, c2 = bc.second;  // not a structured binding: clang 14 cannot capture one
        xt::noalias(*xm) = b1 * *xm + (1.0f - b1) * *xg;
        xt::noalias(*xv) = b2 * *xv + (1.0f - b2) * *xg * *xg;
        xt::noalias(*xp) = *xp - lr * ((*xm / c1) / (xt::sqrt(*xv / c2) + adam_eps) + wd * *xp);
      };
    }
  }
  return {};
}

}  // namespace

std::vector<float> inputs(std::size_t k, std::size_t n, float scale) {
  std::mt19937 gen(static_cast<std::uint32_t>(1000 + k));
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void set_threads(int n) { omp_set_num_threads(n); }

std::function<void()> make(std::string_view op, impl how, std::size_t rows, std::size_t cols) {
  if (op == "chain") return chain(how, rows, cols, false);
  if (op == "chain_bcast") return chain(how, rows, cols, true);
  if (op == "softmax") return softmax(how, rows, cols);
  if (op == "layer_norm") return layer_norm(how, rows, cols);
  if (op == "adamw") return adamw(how, rows, cols);
  throw std::invalid_argument("bench_loops: unknown op " + std::string(op));
}

}  // namespace peers
