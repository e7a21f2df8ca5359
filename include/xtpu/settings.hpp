// xtpu/settings.hpp — the one rule every run-time setting is checked by.
//
// Provides: xtpu::config_error; xtpu::settings::{setting, invalid, integer, real, choice, one_of,
// from_env, switch_from_env}; lazy/step.hpp adds settings::check_environment() (every variable at once).
// A setting has a name (what `xtpu::...` setters call it), an environment variable, its setter
// and a valid range. Its value — from the environment at start-up, or from a setter — is
// checked here, and a bad one is one typed error naming where the value came from (the
// variable, or the setter's call), the bad value, the setting and the valid range:
//   xtpu: XTPU_NUM_THREADS='0' is not valid for num_threads: expected an integer in [1, 256]
//   xtpu: xtpu::kernels::set_num_threads(0) is not valid for num_threads: expected an integer in [1, 256]
// The settings today (docs/settings.md): XTPU_DEVICE, XTPU_MEMORY_FRACTION, XTPU_ISA,
// XTPU_NUM_THREADS, XTPU_SPIN_US, XTPU_CACHE_SIZE, XTPU_USE_BF16, XTPU_CHECK_INDICES,
// XTPU_DEBUG (and XTPU_DEBUG_FILE and XTPU_TRACE, paths).
// Errors: config_error (every setting but XTPU_DEVICE), device_not_available (XTPU_DEVICE).
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "xtpu/error.hpp"

namespace xtpu {

/// A setting (environment variable or setter) with a value outside its valid range.
class config_error : public error {
  using error::error;
};

namespace settings {

/// What a setting is called (its name, its environment variable, its setter) and, for a
/// number, its valid range [lo, hi] — (lo, hi] with lo_open — the one place that range is written.
struct setting {
  std::string_view name, env;
  double lo = 0, hi = 0;
  bool lo_open = false;
  std::string_view setter = {};  // the function a program calls, if it has one
};

/// Where a value came from: the environment (or a command line: the setting's `env`), or a
/// call of the setting's setter.
enum class source { environment, call };

/// Throws the error for a bad value of `s` (the one place its message is written).
template <class Error = config_error>
[[noreturn]] void invalid(const setting& s, std::string_view value, std::string_view valid,
                          source from = source::environment) {
  std::ostringstream os;
  os << "xtpu: ";
  if (from == source::call && !s.setter.empty()) os << s.setter << "(" << value << ")";
  else os << s.env << "='" << value << "'";
  os << " is not valid for " << s.name << ": expected " << valid;
  throw Error(os.str());
}

namespace detail {
inline std::string range_text(const setting& s, bool integer) {
  std::ostringstream os;
  os << (integer ? "an integer in " : "a number in ") << (s.lo_open ? "(" : "[");
  if (integer) os << static_cast<std::int64_t>(s.lo) << ", " << static_cast<std::int64_t>(s.hi) << "]";
  else os << s.lo << ", " << s.hi << "]";
  return os.str();
}
inline bool in_range(const setting& s, double v) {
  return (s.lo_open ? v > s.lo : v >= s.lo) && v <= s.hi;  // NaN is in no range
}
}  // namespace detail

/// The environment variable's text, if it is set and not empty.
inline std::optional<std::string_view> from_env(const setting& s) {
  const char* e = std::getenv(std::string(s.env).c_str());
  if (e == nullptr || *e == '\0') return std::nullopt;
  return std::string_view(e);
}

namespace detail {
template <class I>
I checked_call(const setting& s, I v) {
  if (!in_range(s, static_cast<double>(v))) invalid(s, std::to_string(v), range_text(s, true), source::call);
  return v;
}
}  // namespace detail
/// An integer in the setting's range, given to a setter.
inline std::int64_t integer(const setting& s, std::int64_t v) { return detail::checked_call(s, v); }
/// The same for a count (std::size_t): shown as given, however large.
template <std::unsigned_integral U>
  requires(!std::same_as<U, bool>)
U integer(const setting& s, U v) {
  return detail::checked_call(s, v);
}
/// An integer in the setting's range from text, all of it ("8x", " 8", "abc" are errors).
inline std::int64_t integer(const setting& s, std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || !detail::in_range(s, static_cast<double>(v)))
    invalid(s, text, detail::range_text(s, true));
  return v;
}

/// An on/off setting's value from the environment ("0" or "1": an integer in the setting's
/// range [0, 1]), if the variable is set.
inline std::optional<bool> switch_from_env(const setting& s) {
  if (const auto e = from_env(s)) return integer(s, *e) != 0;
  return std::nullopt;
}

/// A real number in the setting's range, given to a setter (shown as its shortest exact text:
/// 1.0000001, not 1).
inline double real(const setting& s, double v) {
  if (!detail::in_range(s, v)) {
    char text[32];
    const auto end = std::to_chars(text, text + sizeof text, v).ptr;
    invalid(s, std::string_view(text, static_cast<std::size_t>(end - text)), detail::range_text(s, false), source::call);
  }
  return v;
}
/// The same from text, all of it, in the C locale's format ("0.5"; " 0.5", "0x1p-1", "nan" are errors).
inline double real(const setting& s, std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (ec != std::errc{} || end != text.data() + text.size() || !detail::in_range(s, v))
    invalid(s, text, detail::range_text(s, false));
  return v;
}

/// "one of a, b, c"
template <class Range>
std::string one_of(const Range& choices) {
  std::string valid = "one of ";
  std::size_t i = 0;
  for (std::string_view c : choices) valid += (i++ ? ", " : "") + std::string(c);
  return valid;
}

/// One of `choices` (listed in the error); returns its position.
template <class Error = config_error, class Range>
std::size_t choice(const setting& s, std::string_view text, const Range& choices) {
  std::size_t i = 0;
  for (std::string_view c : choices) {
    if (c == text) return i;
    ++i;
  }
  invalid<Error>(s, text, one_of(choices));
}
template <class Error = config_error>
std::size_t choice(const setting& s, std::string_view text, std::initializer_list<std::string_view> choices) {
  return choice<Error, std::initializer_list<std::string_view>>(s, text, choices);
}

}  // namespace settings
}  // namespace xtpu
