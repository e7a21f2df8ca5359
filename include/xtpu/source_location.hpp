// xtpu/source_location.hpp — where a call came from.
//
// Provides: xtpu::source_location, the part of std::source_location that g++ 12 and clang++ 14
// both give (libstdc++ 12 defines std::source_location only for compilers with
// __builtin_source_location, which clang 14 lacks): file_name(), function_name() (the bare
// name: "main", "TestBody") and line(). As a defaulted parameter,
// `xtpu::source_location where = xtpu::source_location::current()`, it names the caller.
// same_place(a, b): the same function, file and line (what XTPU_DEBUG groups statements by).
// Errors: none.
#pragma once

namespace xtpu {

struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(), const char* function = __builtin_FUNCTION(),
                                           unsigned line = __builtin_LINE()) noexcept {
    source_location l;
    l.file_ = file, l.function_ = function, l.line_ = line;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
};

constexpr bool same_place(const source_location& a, const source_location& b) noexcept {
  auto same = [](const char* x, const char* y) {
    if (x == y) return true;
    for (; *x != '\0' && *x == *y; ++x, ++y) {
    }
    return *x == *y;
  };
  return a.line() == b.line() && same(a.file_name(), b.file_name()) && same(a.function_name(), b.function_name());
}

}  // namespace xtpu
