// Test helpers for tests that write and read files: a scratch folder of the test process's own
// (removed when it exits) and the message of the exception a call throws.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace xtpu_test {

/// `name` in a folder under the temporary directory that belongs to this process.
inline std::filesystem::path scratch(const std::string& name) {
  static const struct folder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("xtpu_test_" + std::to_string(::getpid()));
    folder() { std::filesystem::create_directories(path); }
    ~folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  return dir.path / name;
}

/// The message of the Error that f throws ("" when it throws none).
template <class Error, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace xtpu_test
