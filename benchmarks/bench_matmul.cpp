// Matmul suite: xtpu's systolic emulator next to oneDNN (bf16 and f32), OpenBLAS sgemm and
// Eigen, in one run, over square 128..2048 and MLP/transformer shapes, 1 and 2 threads.
// Prints GFLOP/s per implementation and, per shape, the ratios to oneDNN bf16; --csv=FILE
// writes the table for scripts/plot_matmul.py.
//
// oneDNN's bf16 matmul uses AMX where the CPU has it. AMX's TDPBF16PS rounds each pair sum
// once (measured: see docs/mxu.md), which is not DESIGN.md §4's arithmetic, so it is reported
// as is and, for the like-for-like ratio, oneDNN is also run restricted to AVX512_CORE_BF16
// (vdpbf16ps, the instruction whose arithmetic the MXU model is) in a child process of this
// run (ONEDNN_MAX_CPU_ISA can only be set before oneDNN's first primitive).
#include <xtpu/kernels/matmul.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dnnl.hpp>
#include <omp.h>

#include <Eigen/Core>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct shape {
  const char* name;
  std::size_t batch, M, K, N;
  bool a_transposed = false;  // A stored (K, M): matmul(transpose(h), g), a weight's gradient
  double flops() const { return 2.0 * double(batch) * double(M) * double(K) * double(N); }
};
const shape shapes[] = {
    {"128^3", 1, 128, 128, 128},          {"256^3", 1, 256, 256, 256},      {"512^3", 1, 512, 512, 512},
    {"1024^3", 1, 1024, 1024, 1024},      {"2048^3", 1, 2048, 2048, 2048},  {"mlp 128x784x512", 1, 128, 784, 512},
    {"head 128x512x10", 1, 128, 512, 10}, {"ffn 1024x256x1024", 1, 1024, 256, 1024},
    {"attn 8x128x64x128", 8, 128, 64, 128},    {"head grad 512x128x10", 1, 512, 128, 10, true},
};

struct operands {
  std::vector<float> a, b, c;
  std::vector<std::uint16_t> ab, bb;
  explicit operands(const shape& s)
      : a(s.batch * s.M * s.K), b(s.batch * s.K * s.N), c(s.batch * s.M * s.N), ab(a.size()), bb(b.size()) {
    std::uint64_t x = 12345;
    auto next = [&] {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(x >> 40) / float(1 << 24) - 0.5f;
    };
    for (std::size_t i = 0; i < a.size(); ++i) ab[i] = xtpu::bf16(a[i] = next()).bits();
    for (std::size_t i = 0; i < b.size(); ++i) bb[i] = xtpu::bf16(b[i] = next()).bits();
  }
};

void set_threads(int t) {
  xtpu::kernels::set_num_threads(t);
  openblas_set_num_threads(t);
  omp_set_num_threads(t);
  Eigen::setNbThreads(t);
}

void report(benchmark::State& st, const shape& s) {
  st.counters["GFLOP/s"] = benchmark::Counter(s.flops() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- implementations ---------------------------------------------------------------------

void xtpu_pass(benchmark::State& st, const shape& s, int threads, bool bf16_inputs, xtpu::precision p) {
  set_threads(threads);
  operands o(s);
  const xtpu::isa path = xtpu::kernels::active_isa();
  for (auto _ : st) {
    xtpu::mxu::for_each_batch(s.batch, 2.0 * double(s.M * s.N * s.K), threads, [&](std::size_t bi, int t) {
      float* c = o.c.data() + bi * s.M * s.N;
      if (p == xtpu::precision::default_) {
        const std::size_t rs = s.a_transposed ? 1 : s.K, cs = s.a_transposed ? s.M : 1;
        const xtpu::mxu::matrix_view a = bf16_inputs ? xtpu::mxu::matrix_view{o.ab.data() + bi * s.M * s.K, true, rs, cs}
                                                     : xtpu::mxu::matrix_view{o.a.data() + bi * s.M * s.K, false, rs, cs};
        const xtpu::mxu::matrix_view b = bf16_inputs ? xtpu::mxu::matrix_view{o.bb.data() + bi * s.K * s.N, true, s.N, 1}
                                                     : xtpu::mxu::matrix_view{o.b.data() + bi * s.K * s.N, false, s.N, 1};
        xtpu::mxu::pass(a, b, c, s.N, s.M, s.N, s.K, path, t);
      } else {
        xtpu::mxu::multi_pass(p, o.a.data() + bi * s.M * s.K, o.b.data() + bi * s.K * s.N, c, s.M, s.N, s.K, path, t);
      }
    });
    benchmark::DoNotOptimize(o.c.data());
  }
  report(st, s);
}

void onednn(benchmark::State& st, const shape& s, int threads, bool bf16) {
  set_threads(threads);
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::dim B = static_cast<memory::dim>(s.batch), M = static_cast<memory::dim>(s.M),
                    K = static_cast<memory::dim>(s.K), N = static_cast<memory::dim>(s.N);
  memory::desc a({B, M, K}, dt, s.a_transposed ? memory::format_tag::acb : memory::format_tag::abc), b({B, K, N}, dt, memory::format_tag::abc),
      c({B, M, N}, memory::data_type::f32, memory::format_tag::abc);
  std::optional<matmul> made;
  try {
    made.emplace(matmul::primitive_desc(matmul::desc(a, b, c), eng));
  } catch (const dnnl::error& e) {  // oneDNN 2.6 has no bf16 matmul on a CPU without AVX-512
    st.SkipWithError((std::string("oneDNN: no ") + (bf16 ? "bf16" : "f32") + " matmul on this CPU (" + e.what() + ")").c_str());
    return;
  }
  matmul& mm = *made;
  operands o(s);
  memory A(a, eng, bf16 ? static_cast<void*>(o.ab.data()) : o.a.data()),
      Bm(b, eng, bf16 ? static_cast<void*>(o.bb.data()) : o.b.data()), C(c, eng, o.c.data());
  for (auto _ : st) {
    mm.execute(strm, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, Bm}, {DNNL_ARG_DST, C}});
    strm.wait();
  }
  report(st, s);
}

void openblas(benchmark::State& st, const shape& s, int threads) {
  set_threads(threads);
  operands o(s);
  const int M = int(s.M), N = int(s.N), K = int(s.K);
  for (auto _ : st) {
    for (std::size_t bi = 0; bi < s.batch; ++bi)
      cblas_sgemm(CblasRowMajor, s.a_transposed ? CblasTrans : CblasNoTrans, CblasNoTrans, M, N, K, 1.0f,
                  o.a.data() + bi * s.M * s.K, s.a_transposed ? M : K,
                  o.b.data() + bi * s.K * s.N, N, 0.0f, o.c.data() + bi * s.M * s.N, N);
    benchmark::DoNotOptimize(o.c.data());
  }
  report(st, s);
}

template <class T>
void eigen(benchmark::State& st, const shape& s, int threads) {
  set_threads(threads);
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  // a transposed A is stored (K, M) and read as a[bi].transpose()
  std::vector<Mat> a(s.batch, s.a_transposed ? Mat(s.K, s.M) : Mat(s.M, s.K)), b(s.batch, Mat(s.K, s.N)),
      c(s.batch, Mat(s.M, s.N));
  operands o(s);
  for (std::size_t bi = 0; bi < s.batch; ++bi) {
    for (std::size_t i = 0; i < s.M * s.K; ++i) a[bi].data()[i] = T(o.a[bi * s.M * s.K + i]);
    for (std::size_t i = 0; i < s.K * s.N; ++i) b[bi].data()[i] = T(o.b[bi * s.K * s.N + i]);
  }
  for (auto _ : st) {
    for (std::size_t bi = 0; bi < s.batch; ++bi) {
      if (s.a_transposed) c[bi].noalias() = a[bi].transpose() * b[bi];
      else c[bi].noalias() = a[bi] * b[bi];
    }
    benchmark::DoNotOptimize(c[0].data());
  }
  report(st, s);
}

// ---- registration ------------------------------------------------------------------------

std::string key(const std::string& impl, const shape& s, int t) {
  return impl + "/" + s.name + "/t" + std::to_string(t);
}

void register_all(bool onednn_only) {
  for (const auto& s : shapes)
    for (int t : {1, 2}) {
      auto add = [&](const std::string& impl, auto fn) {
        benchmark::RegisterBenchmark(key(impl, s, t).c_str(), fn)->UseRealTime()->MinTime(0.2)->Unit(benchmark::kMicrosecond);
      };
      add("onednn_bf16", [s, t](benchmark::State& st) { onednn(st, s, t, true); });
      if (onednn_only) continue;
      add("xtpu_bf16", [s, t](benchmark::State& st) { xtpu_pass(st, s, t, true, xtpu::precision::default_); });
      add("xtpu_f32", [s, t](benchmark::State& st) { xtpu_pass(st, s, t, false, xtpu::precision::default_); });
      if (s.flops() <= 2.2e9 && !s.a_transposed)  // multi_pass reads row-major operands
        add("xtpu_highest", [s, t](benchmark::State& st) { xtpu_pass(st, s, t, false, xtpu::precision::highest); });
      add("onednn_f32", [s, t](benchmark::State& st) { onednn(st, s, t, false); });
      add("openblas_sgemm", [s, t](benchmark::State& st) { openblas(st, s, t); });
      add("eigen_f32", [s, t](benchmark::State& st) { eigen<float>(st, s, t); });
      if (s.flops() <= 3e8) add("eigen_bf16", [s, t](benchmark::State& st) { eigen<Eigen::bfloat16>(st, s, t); });
    }
}

/// Keeps every run's GFLOP/s by name, for the ratio table.
class collector : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> gflops;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      auto it = r.counters.find("GFLOP/s");
      if (it != r.counters.end()) gflops[r.run_name.function_name] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

/// oneDNN restricted to AVX512_CORE_BF16, measured by a child run of this same binary.
std::map<std::string, double> onednn_avx512_bf16(const char* self) {
  std::map<std::string, double> r;
  const std::string cmd = std::string("ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ") + self +
                          " --onednn-child --benchmark_format=json 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return r;
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p.get())) out.append(buf, n);
  // minimal JSON scan: "name": "onednn_bf16/...", ... "GFLOP/s": 1.0e+11
  for (std::size_t at = 0; (at = out.find("\"name\": \"", at)) != std::string::npos;) {
    at += 9;
    std::string name = out.substr(at, out.find('"', at) - at);
    name = name.substr(0, name.find("/min_time"));
    const std::size_t g = out.find("\"GFLOP/s\": ", at), next = out.find("\"name\": \"", at);
    if (g != std::string::npos && (next == std::string::npos || g < next))
      r[name] = std::strtod(out.c_str() + g + 11, nullptr);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS 0.3.21 does not know this CPU's model and picks its Prescott (SSE3) kernels; a
  // peer measured that way would flatter xtpu. Re-run with the AVX-512 kernels it does have.
  if (!std::getenv("OPENBLAS_CORETYPE") && std::string(openblas_get_corename()) == "Prescott" &&
      xtpu::kernels::supported(xtpu::isa::avx512)) {
    std::fprintf(stderr, "bench_matmul: OpenBLAS detected 'Prescott'; re-running with OPENBLAS_CORETYPE=SkylakeX\n");
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    execv("/proc/self/exe", argv);
  }
  bool child = false;
  std::string csv;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--onednn-child") == 0) child = true;
    else if (std::strncmp(argv[i], "--csv=", 6) == 0) csv = argv[i] + 6;
    else args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  register_all(child);
  if (child) {
    benchmark::RunSpecifiedBenchmarks();
    return 0;
  }
  const auto capped = onednn_avx512_bf16(argv[0]);
  std::printf("xtpu path: %s; oneDNN %d.%d; OpenBLAS core %s\n",
              std::string(xtpu::isa_name(xtpu::kernels::active_isa())).c_str(), dnnl::version()->major,
              dnnl::version()->minor, openblas_get_corename());
  collector rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  auto g = rep.gflops;
  for (const auto& [name, v] : capped) g["onednn_bf16_avx512/" + name.substr(name.find('/') + 1)] = v;

  const char* impls[] = {"xtpu_bf16", "xtpu_f32", "xtpu_highest", "onednn_bf16", "onednn_bf16_avx512", "onednn_f32",
                         "openblas_sgemm", "eigen_f32", "eigen_bf16"};
  std::printf("\nGFLOP/s (ratio = xtpu_bf16 / peer; highest is compared with peer / 6; f32/df32 = xtpu_f32 /\n"
              "oneDNN f32, the like-for-like ratio on a CPU without AVX-512 bf16, where oneDNN has no bf16 matmul)\n");
  std::printf("%-20s %2s", "shape", "t");
  for (const char* i : impls) std::printf(" %13s", i);
  std::printf(" | %9s %9s %9s %9s %9s\n", "/dnnl", "/dnnl512", "f32/d512", "hst/d512", "f32/df32");
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    out << "shape,threads,impl,gflops\n";
  }
  for (const auto& s : shapes)
    for (int t : {1, 2}) {
      std::printf("%-20s %2d", s.name, t);
      auto val = [&](const std::string& impl) {
        auto it = g.find(key(impl, s, t));
        return it == g.end() ? 0.0 : it->second;
      };
      for (const char* i : impls) {
        const double v = val(i);
        if (v > 0) std::printf(" %13.1f", v);
        else std::printf(" %13s", "-");
        if (out && v > 0) out << '"' << s.name << "\"," << t << ',' << i << ',' << v << '\n';
      }
      const double x = val("xtpu_bf16"), d = val("onednn_bf16"), d5 = val("onednn_bf16_avx512");
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      std::printf(" | %9.2f %9.2f %9.2f %9.2f %9.2f\n", ratio(x, d), ratio(x, d5), ratio(val("xtpu_f32"), d5),
                  ratio(val("xtpu_highest"), d5 / 6), ratio(val("xtpu_f32"), val("onednn_f32")));
    }
  for (const auto& s : shapes)
    if (std::string(s.name) == "1024^3")
      std::printf("\n2 threads / 1 thread at 1024^3: xtpu_bf16 %.2fx\n",
                  g[key("xtpu_bf16", s, 2)] / std::max(1e-9, g[key("xtpu_bf16", s, 1)]));
  return 0;
}
