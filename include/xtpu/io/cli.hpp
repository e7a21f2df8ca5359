// xtpu/io/cli.hpp — xtpu::config from a program's command line (CLI11).
//
// Provides: xtpu::cli::config_flags — add_to(app) puts --preset, --device, --chip,
// --memory-fraction, --hbm-gib, --bf16, --check-indices, --plan-cache, --threads, --spin-us,
// --isa, --debug, --debug-file, --trace and --no-recompile-after on a CLI::App; after
// app.parse, resolve() gives the config: the preset's values (or the defaults), then the XTPU_* environment over them, then the flags
// given over both (config::from_env; lazy/config.hpp).
// Not in xtpu.hpp: CLI11 is for programs; include <xtpu/io/cli.hpp>.
// Errors: CLI11's CLI::ValidationError / CLI::ConversionError for a flag's value, naming the
// flag and what is valid (CLI11_PARSE prints it and exits with its code); config_error or
// device_not_available from resolve() for a bad XTPU_* variable (naming it).
#pragma once

#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "xtpu/device/device.hpp"
#include "xtpu/kernels/cpu.hpp"
#include "xtpu/lazy/config.hpp"

namespace xtpu::cli {

/// The flags, each written into its own field of `given` when it is on the command line.
struct config_flags {
  std::string preset;
  config given;  // the flags' values (only those on the command line are used)

  /// Adds the flags to `app` (in an option group "xtpu").
  void add_to(CLI::App& app) {
    std::vector<std::string> presets(std::begin(config::presets), std::end(config::presets));
    std::vector<std::string> generations, paths;
    for (const auto& g : xtpu::generations) generations.emplace_back(g.name);
    for (const auto i : kernels::detail::all_isas)
      if (kernels::supported(i)) paths.emplace_back(xtpu::isa_name(i));
    const CLI::Validator fraction(
        [](std::string& s) -> std::string {
          double v = 0;
          try {
            std::size_t used = 0;
            v = std::stod(s, &used);
            if (used != s.size()) return "not a number: " + s;
          } catch (const std::exception&) {
            return "not a number: " + s;
          }
          return v > 0 && v <= 1 ? std::string() : "Value " + s + " not in (0, 1]";
        },
        "(0, 1]");
    auto* g = app.add_option_group("xtpu", "the emulated TPU and the runtime (xtpu::config)");
    g->add_option("--preset", preset, "quick_test, development, training or inference (then XTPU_* and these flags)")
        ->check(CLI::IsMember(presets));
    flag(g->add_option("--device", given.device, "the TPU generation")->check(CLI::IsMember(generations)), &config::device);
    flag(g->add_option("--chip", given.device_index, "which chip of it")->check(CLI::Range(0, xtpu::detail::max_chips - 1)),
         &config::device_index);
    flag(g->add_option("--memory-fraction", given.memory_fraction, "of HBM allocations may use")->check(fraction),
         &config::memory_fraction);
    flag(g->add_option("--hbm-gib", given.hbm_gib, "the chip's HBM (default: the generation's)")->check(CLI::PositiveNumber),
         &config::hbm_gib);
    flag(g->add_option("--bf16", given.use_bf16, "float tensors stored as bf16 values (XTPU_USE_BF16): true or false"),
         &config::use_bf16);
    flag(g->add_option("--check-indices", given.check_indices, "ids and labels checked when recorded (XTPU_CHECK_INDICES): true or false"),
         &config::check_indices);
    const auto& cache = xtpu::detail::plan_cache::cache_setting;
    flag(g->add_option("--plan-cache", given.plan_cache, "compiled plans kept (XTPU_CACHE_SIZE)")
             ->check(CLI::Range(static_cast<std::size_t>(cache.lo), static_cast<std::size_t>(cache.hi))),
         &config::plan_cache);
    flag(g->add_option("--threads", given.num_threads, "threads a matmul may use")->check(CLI::Range(1, kernels::max_threads)),
         &config::num_threads);
    const auto& spin = kernels::detail::spin_setting;
    flag(g->add_option("--spin-us", given.spin_us, "microseconds a waiting pool thread spins before it sleeps (XTPU_SPIN_US; 0: at once)")
             ->check(CLI::Range(static_cast<int>(spin.lo), static_cast<int>(spin.hi))),
         &config::spin_us);
    flag(g->add_option("--isa", given.isa, "the host path (every path gives the same bits)")->check(CLI::IsMember(paths)),
         &config::isa);
    flag(g->add_option("--debug", given.debug, "XTPU_DEBUG: 0, 1 (every compile explained), 2 (every step)")
             ->check(CLI::Range(0, 2)),
         &config::debug);
    flag(g->add_option("--debug-file", given.debug_file, "where debug output is appended (default: standard error)"),
         &config::debug_file);
    flag(g->add_option("--trace", given.trace, "a Chrome trace-event file written at exit (Perfetto)"), &config::trace);
    flag(g->add_option("--no-recompile-after", given.no_recompile_after, "steps after which a new plan is an error")
             ->check(CLI::NonNegativeNumber),
         &config::no_recompile_after);
  }

  /// The preset (or the defaults), the environment over it, the flags given over both.
  config resolve() const {
    config c = (preset.empty() ? config{} : config::preset(preset)).from_env();
    for (const auto& f : fields_)
      if (f.option->count() > 0) f.copy(given, c);
    return c;
  }

 private:
  /// Remembers that option o, when given, sets field m of the config.
  template <class T>
  void flag(const CLI::Option* o, T config::*m) {
    fields_.push_back({o, [m](const config& from, config& to) { to.*m = from.*m; }});
  }
  struct field {
    const CLI::Option* option;
    std::function<void(const config&, config&)> copy;
  };
  std::vector<field> fields_;
};

}  // namespace xtpu::cli
