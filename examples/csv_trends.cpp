// csv_trends: a table from a CSV file, fitted on the device. The file is matplotlib's sample of
// the share of US bachelor's degrees conferred to women, by field, 1970-2011 (Debian's
// python-matplotlib-data: 42 years x 17 fields, with a header row). xtpu::data::read_csv reads
// it into an xtensor array, strictly (a bad cell is an error naming its line and column); its
// shape is checked against the program's static one when it moves to the device. Each field
// gets a straight-line trend, share = intercept + slope * t (t: decades from the mean year),
// all 17 fitted at once by plain gradient descent on the summed mean squared error — one
// compiled step, run 60 times. Self-checking: exits non-zero unless every slope and intercept
// is within 1e-3 percentage points of the least-squares solution (the normal equations, solved
// on the host in double) and the step compiled once.
// Usage: csv_trends [--csv FILE] [--steps N]
#include <xtpu/xtpu.hpp>

#include <CLI/CLI.hpp>
#include <xtensor/xview.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {
constexpr std::size_t years = 42, fields = 17;

struct trends {  // share (years, fields) = intercept + t (years, 1) * slope
  xtpu::nn::parameter<float, fields> intercept{xtpu::zeros<float, fields>()};
  xtpu::nn::parameter<float, fields> slope{xtpu::zeros<float, fields>()};
};
}  // namespace
BOOST_HANA_ADAPT_STRUCT(trends, intercept, slope);

int fit(const std::string& csv, int steps);

int main(int argc, char** argv) {
  CLI::App app{"Fits a straight-line trend to every column of a CSV table with xtpu"};
  std::string csv = "/usr/share/matplotlib/mpl-data/sample_data/percent_bachelors_degrees_women_usa.csv";
  int steps = 60;
  app.add_option("--csv", csv, "a table of 42 rows: a Year column and 17 value columns")->capture_default_str();
  app.add_option("--steps", steps, "gradient-descent steps")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return fit(csv, steps);
  } catch (const xtpu::error& e) {  // a bad file (data_error) or one of another shape (shape_error)
    std::fprintf(stderr, "csv_trends: %s\n", e.what());
    return 2;
  }
}

int fit(const std::string& csv, int steps) {
  const auto table = xtpu::data::read_csv<float>(csv);  // names from the header, values (rows, columns)
  const std::size_t year = table.column("Year");
  std::vector<std::string> names;
  std::vector<std::size_t> value_columns;
  for (std::size_t c = 0; c < table.names.size(); ++c)
    if (c != year) names.push_back(table.names[c]), value_columns.push_back(c);
  const xt::xtensor<float, 2> values = xt::view(table.values, xt::all(), xt::keep(value_columns));
  // t: decades from the mean year, so that intercept and slope do not interact
  const xt::xtensor<float, 1> year_col = xt::view(table.values, xt::all(), year);
  double mean_year = 0;
  for (float y : year_col) mean_year += y;
  mean_year /= static_cast<double>(year_col.size());
  xt::xtensor<float, 2> t_host = xt::zeros<float>({year_col.size(), std::size_t{1}});
  for (std::size_t i = 0; i < year_col.size(); ++i) t_host(i, 0) = static_cast<float>((year_col(i) - mean_year) / 10);

  // to the device: shape_error unless the file is (42, 1 + 17), named with both shapes
  const xtpu::tensor<float, years, 1> t = xtpu::from_host(t_host);
  const xtpu::tensor<float, years, fields> share = xtpu::from_host(values);
  trends m;
  xtpu::optim::sgd opt(m, {.lr = 0.5f});  // the loss's curvature is 2 mean(t^2) ~ 2.9 in a slope, 2 in an intercept
  xtpu::mark_step();

  std::int64_t compiles = -1;
  double loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    // (years, 1) * (fields) + (fields) -> (years, fields); each field's MSE, summed
    const xtpu::tensor<float> loss = xtpu::sum(xtpu::mean<0>(xtpu::square(t * m.slope + m.intercept - share)));
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
    if (step == 1) compiles = xtpu::metrics::counter("UncachedCompile");
    if (step % 20 == 0 || step + 1 == steps) {
      loss_value = static_cast<double>(loss.item());
      std::printf("step %3d  summed MSE %10.4f\n", step, loss_value);
    }
  }
  const bool compiled_once = compiles < 0 || xtpu::metrics::counter("UncachedCompile") == compiles;

  // the least-squares line of each field: slope = sum t (y - mean y) / sum t^2, intercept = mean y
  const auto slope = m.slope.to_host(), intercept = m.intercept.to_host();
  double worst = 0;
  struct row {
    std::string name;
    double first, last, per_decade;
  };
  std::vector<row> rows;
  double tt = 0;  // sum t^2: every field's denominator
  for (std::size_t i = 0; i < years; ++i) tt += static_cast<double>(t_host(i, 0)) * t_host(i, 0);
  for (std::size_t f = 0; f < fields; ++f) {
    double mean_y = 0, ty = 0;
    for (std::size_t i = 0; i < years; ++i) mean_y += values(i, f);
    mean_y /= years;
    for (std::size_t i = 0; i < years; ++i) ty += static_cast<double>(t_host(i, 0)) * (values(i, f) - mean_y);
    worst = std::max({worst, std::abs(slope(f) - ty / tt), std::abs(intercept(f) - mean_y)});
    rows.push_back({names[f], intercept(f) + slope(f) * t_host(0, 0), intercept(f) + slope(f) * t_host(years - 1, 0), slope(f)});
  }
  std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.per_decade > b.per_decade; });
  std::printf("\n| field | %d (trend) | %d (trend) | per decade |\n|---|---:|---:|---:|\n", static_cast<int>(year_col(0)),
              static_cast<int>(year_col(years - 1)));
  for (const auto& r : rows) std::printf("| %s | %.1f %% | %.1f %% | %+.2f points |\n", r.name.c_str(), r.first, r.last, r.per_decade);
  const bool fitted = worst <= 1e-3;
  std::printf("\ncsv_trends: %zu years x %zu fields of %s; after %d steps the lines are %s the least-squares ones "
              "(largest difference %.2e points); compiles after the first two steps: %s\n",
              years, fields, csv.c_str(), steps, fitted ? "at" : "NOT at", worst, compiled_once ? "none" : "SOME");
  return fitted && compiled_once ? 0 : 1;
}
