// xtpu/data/csv.hpp — numeric CSV files as xtensor arrays, strictly parsed.
//
// Provides: read_csv<T>(path, csv_options) -> csv_table<T> for T float, double or std::int32_t:
// `values`, an xt::xtensor<T, 2> (rows x columns, ready for data::dataset::from_xtensor or
// from_host), `names` (the header's cells, when there is one) and column(name) (the index of a
// named column). csv_options: the delimiter (','), whether the first row is a header (yes),
// the comment prefix of lines to skip ("#"), and the value an empty cell stands for (none:
// an empty cell is an error; NaN makes missing values explicit for float and double).
// Format (RFC 4180 as far as numbers need it): one row per line (LF or CRLF), cells separated
// by the delimiter, a cell may be quoted ("..." with "" for a quote); blank lines and comment
// lines are skipped; spaces and tabs around a cell are ignored. A number is what std::from_chars
// reads for T, the whole cell (so "1.5kg" and "1e" are errors, not 1.5 and 1); "nan", "inf"
// and "-inf" are numbers for float and double. A path ending in .gz is read through zlib.
// Shape rule: every row has as many cells as the first (the header, if there is one).
// Errors: data_error naming the file, and for a cell its line, column and byte offset — it
// cannot be opened or read, a cell is not a number of T (its text, quoted), an empty cell
// without csv_options::missing, a row with another number of cells (both counts), a quote
// left open at the end of a line, no rows of values; column(name) of no column: data_error
// listing the names.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include "xtpu/data/idx.hpp"
#include "xtpu/data/tokens.hpp"
#include "xtpu/error.hpp"

namespace xtpu::data {

template <class T>
struct csv_options {
  char delimiter = ',';
  bool header = true;         // the first row names the columns
  std::string comment = "#";  // lines starting with it are skipped ("" : none)
  std::optional<T> missing{};  // what an empty cell stands for; none: an empty cell is an error
};

template <class T>
struct csv_table {
  std::vector<std::string> names;  // the header's cells (empty without a header)
  xt::xtensor<T, 2> values;        // (rows, columns)

  /// The index of the column named `name`; data_error naming the columns there are.
  std::size_t column(std::string_view name) const {
    for (std::size_t c = 0; c < names.size(); ++c)
      if (names[c] == name) return c;
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "\"" : ", \"") + n + "\"";
    throw data_error("xtpu: csv: no column \"" + std::string(name) + "\"; the columns are " +
                     (list.empty() ? std::string("unnamed (read without a header)") : list));
  }
};

namespace detail {
/// The name of T in messages.
template <class T>
constexpr const char* csv_type_name() noexcept {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else return "int32";
}

/// One line's cells, unquoted; `offsets[i]` is cell i's byte offset in the line. A quote left
/// open returns false.
inline bool split_csv_line(std::string_view line, char delimiter, std::vector<std::string>& cells,
                           std::vector<std::size_t>& offsets) {
  cells.clear();
  offsets.clear();
  std::size_t i = 0;
  for (;;) {
    offsets.push_back(i);
    std::string cell;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t') && line[i] != delimiter) ++i;
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) return false;
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell += '"';
            ++i;
          } else {
            ++i;
            break;
          }
        } else {
          cell += line[i];
        }
      }
      while (i < line.size() && line[i] != delimiter) cell += line[i++];  // after the quote: kept, so it fails as a number
    } else {
      while (i < line.size() && line[i] != delimiter) cell += line[i++];
    }
    while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\t')) cell.pop_back();
    cells.push_back(std::move(cell));
    if (i >= line.size()) return true;
    ++i;  // the delimiter
  }
}

/// The whole cell as a T, or nothing.
template <class T>
std::optional<T> parse_csv_number(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);  // from_chars takes no '+'
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}
}  // namespace detail

/// The CSV file at `path` (gzip when it ends in .gz) as a table of T; data_error (file, line,
/// column, offset) for what the header comment lists.
template <class T>
csv_table<T> read_csv(const std::string& path, const csv_options<T>& o = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t>,
                "xtpu E506 read_csv: the element type must be float, double or std::int32_t");
  std::string text;
  {
    detail::token_source in(path);
    char buf[1 << 16];
    for (std::size_t got; (got = in.read_some(buf, sizeof buf)) != 0;) text.append(buf, got);
  }
  const auto fail = [&](const std::string& what) { throw detail::file_error(path, what); };
  csv_table<T> t;
  std::vector<T> values;
  std::vector<std::string> cells;
  std::vector<std::size_t> offsets;
  std::size_t columns = 0, rows = 0, line_no = 0;
  bool first = true;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    const std::size_t at = begin;  // the line's byte offset
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (!o.comment.empty() && line.starts_with(o.comment)) continue;
    const std::string where = "line " + std::to_string(line_no);
    if (!detail::split_csv_line(line, o.delimiter, cells, offsets))
      fail("has a quote left open at the end of " + where + " (offset " + std::to_string(at + line.size()) + ")");
    if (first) {
      columns = cells.size();
      first = false;
      if (o.header) {
        t.names = cells;
        continue;
      }
    }
    if (cells.size() != columns) {
      fail(where + " (offset " + std::to_string(at) + ") has " + std::to_string(cells.size()) + " cells; " +
           (o.header ? "the header has " : "the first row has ") + std::to_string(columns));
    }
    for (std::size_t c = 0; c < cells.size(); ++c) {
      std::optional<T> v = cells[c].empty() ? o.missing : detail::parse_csv_number<T>(cells[c]);
      if (!v) {
        const std::string cell = where + ", column " + std::to_string(c + 1) + " (offset " + std::to_string(at + offsets[c]) + ")";
        fail(cells[c].empty() ? cell + " is empty (csv_options::missing gives empty cells a value)"
                              : cell + ": \"" + cells[c] + "\" is not a " + detail::csv_type_name<T>());
      }
      values.push_back(*v);
    }
    ++rows;
  }
  if (rows == 0) fail("holds no rows of values");
  t.values = xt::adapt(values, std::array<std::size_t, 2>{rows, columns});
  return t;
}

}  // namespace xtpu::data
