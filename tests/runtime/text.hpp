// Test helpers for text a test reads back (explain(), XTPU_DEBUG output, reports).
#pragma once

#include <cstddef>
#include <string>

namespace xtpu_test {

/// How many times `what` occurs in `text` (overlapping occurrences counted).
inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace xtpu_test
