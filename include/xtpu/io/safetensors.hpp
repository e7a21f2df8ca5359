// xtpu/io/safetensors.hpp — the safetensors file format (what PyTorch, JAX and Hugging Face read).
//
// Provides: safetensors_dtype_v<T> ("F32", "BF16", "I32", "BOOL" for xtpu's element types);
// stored_tensor (a name, dtype, shape and bytes to write); write_safetensors(path, tensors,
// metadata) — atomic: a temporary file beside `path`, fsync, rename, fsync of the folder, so a
// crash leaves the previous file whole; safetensors_file::read(path) — the file in memory,
// checked, with find(name), names() and metadata().
// Format: an 8-byte little-endian header length N, N bytes of JSON ({"name": {"dtype",
// "shape", "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}}, padded with
// spaces to a multiple of 8), then the data: each tensor row-major and little-endian, the
// offsets relative to the data's start, covering it without gaps or overlaps.
// Errors: checkpoint_error naming the file and what is wrong: it cannot be opened, written or
// renamed (the OS's reason); not a safetensors file at all (no JSON header after its first 8
// bytes); shorter than its header says; a header that is not a JSON object
// of such entries (nlohmann-json's message); an unknown dtype; a byte length that is not the
// shape's (sizes that are not whole numbers, or too large, included); offsets outside the
// data, overlapping or leaving gaps (a name given twice shows as one of these, since the JSON
// parser keeps the last); for the writer, a name given twice or bytes that are not the shape's.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "xtpu/dtype/bf16.hpp"
#include "xtpu/error.hpp"

namespace xtpu::io {

/// The safetensors dtype of xtpu element type T.
template <class T>
inline constexpr const char* safetensors_dtype_v = std::is_same_v<T, float>           ? "F32"
                                                   : std::is_same_v<T, bf16>          ? "BF16"
                                                   : std::is_same_v<T, std::int32_t>  ? "I32"
                                                   : std::is_same_v<T, bool>          ? "BOOL"
                                                                                      : nullptr;

/// One tensor of a file: to write (bytes points at the caller's data) or as read (into the file's
/// buffer, valid while its safetensors_file lives).
struct stored_tensor {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  std::span<const std::byte> bytes;
};

namespace detail {
inline std::size_t dtype_bytes(std::string_view d) noexcept {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "BF16" || d == "F16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

[[noreturn]] inline void fail(const std::string& path, const std::string& what) {
  throw checkpoint_error("xtpu: checkpoint '" + path + "': " + what);
}

/// A file descriptor closed on every path out.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

inline void write_all(int fd, const void* p, std::size_t n, const std::string& path) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(path, std::string("cannot write: ") + std::strerror(errno));
    if (w == 0) fail(path, "cannot write: no progress");
    b += w;
    n -= static_cast<std::size_t>(w);
  }
}
}  // namespace detail

/// Writes `tensors` (in that order) and `metadata` to `path`, atomically.
inline void write_safetensors(const std::string& path, const std::vector<stored_tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) detail::fail(path, "the name '" + t.name + "' is given twice");
    std::size_t count = 1;
    for (auto d : t.shape) count *= d;
    if (detail::dtype_bytes(t.dtype) == 0 || t.bytes.size() != count * detail::dtype_bytes(t.dtype)) {
      detail::fail(path, "'" + t.name + "' is " + t.dtype + " " + xtpu::detail::shape_text(t.shape) + " but " +
                             std::to_string(t.bytes.size()) + " bytes are given");
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string tmp = path + ".tmp.XXXXXX";  // beside the target: the rename stays on one file system
  try {
    detail::fd_guard f{::mkstemp(tmp.data())};
    if (f.fd < 0) detail::fail(path, "cannot create '" + tmp + "': " + std::strerror(errno));
    ::fchmod(f.fd, 0644);
    detail::write_all(f.fd, len, 8, path);
    detail::write_all(f.fd, text.data(), text.size(), path);
    for (const auto& t : tensors) detail::write_all(f.fd, t.bytes.data(), t.bytes.size(), path);
    if (::fsync(f.fd) != 0) detail::fail(path, std::string("cannot sync: ") + std::strerror(errno));
    if (::close(std::exchange(f.fd, -1)) != 0) detail::fail(path, std::string("cannot close: ") + std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      detail::fail(path, "cannot rename '" + tmp + "' to it: " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  detail::fd_guard dir{::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0) ::fsync(dir.fd);  // the rename itself survives a crash
}

/// A safetensors file read whole and checked.
class safetensors_file {
 public:
  safetensors_file(const safetensors_file&) = delete;  // the tensors point into the buffer
  safetensors_file& operator=(const safetensors_file&) = delete;
  safetensors_file(safetensors_file&&) noexcept = default;
  safetensors_file& operator=(safetensors_file&&) noexcept = default;
  static safetensors_file read(const std::string& path) {
    safetensors_file f;
    f.path_ = path;
    {
      std::FILE* in = std::fopen(path.c_str(), "rb");
      if (in == nullptr) detail::fail(path, std::string("cannot open: ") + std::strerror(errno));
      std::fseek(in, 0, SEEK_END);
      const long size = std::ftell(in);
      std::fseek(in, 0, SEEK_SET);
      f.buffer_.resize(size > 0 ? static_cast<std::size_t>(size) : 0);
      const std::size_t got = std::fread(f.buffer_.data(), 1, f.buffer_.size(), in);
      std::fclose(in);
      if (size < 0 || got != f.buffer_.size()) detail::fail(path, "cannot read it whole");
    }
    if (f.buffer_.size() < 8) detail::fail(path, "is " + std::to_string(f.buffer_.size()) + " bytes: no 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | std::to_integer<std::uint64_t>(f.buffer_[static_cast<std::size_t>(i)]);
    if (n > f.buffer_.size() - 8) {
      // a JSON header starts with '{': without one the file is something else (a text, an archive)
      if (f.buffer_.size() > 8 && f.buffer_[8] != std::byte{'{'})
        detail::fail(path, "is not a safetensors file: its first 8 bytes are no header length (they say " + std::to_string(n) +
                               " bytes, and " + std::to_string(f.buffer_.size() - 8) + " follow) and no JSON header follows them");
      detail::fail(path, "its header length is " + std::to_string(n) + " bytes, but only " +
                             std::to_string(f.buffer_.size() - 8) + " follow (truncated)");
    }
    const auto* text = reinterpret_cast<const char*>(f.buffer_.data() + 8);
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text, text + n);
    } catch (const nlohmann::json::exception& e) {
      detail::fail(path, std::string("its header is not JSON: ") + e.what());
    }
    if (!header.is_object()) detail::fail(path, "its header is not a JSON object");
    const std::size_t data_start = 8 + static_cast<std::size_t>(n), data_size = f.buffer_.size() - data_start;
    std::vector<std::pair<std::size_t, std::size_t>> spans;  // [begin, end) of each tensor, to check coverage
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) detail::fail(path, "__metadata__ is not an object of strings");
        for (const auto& [k, v] : entry.items()) {
          if (!v.is_string()) detail::fail(path, "__metadata__ '" + k + "' is not a string");
          f.metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      stored_tensor t;
      t.name = name;
      std::size_t begin = 0, end = 0;
      // every size and offset a whole number >= 0 (nlohmann's get<size_t> would take -1 or 2.7)
      // (name is passed, not captured: clang++ 14 cannot capture a structured binding)
      const auto whole_numbers = [&path](const std::string& name, const nlohmann::json& a, const char* what) {
        if (!a.is_array() || !std::all_of(a.begin(), a.end(), [](const auto& v) { return v.is_number_unsigned(); }))
          detail::fail(path, "'" + name + "' has " + what + " " + a.dump() + ": expected a list of whole numbers >= 0");
        return a.get<std::vector<std::size_t>>();
      };
      if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
          !entry.contains("data_offsets")) {
        detail::fail(path, "the entry '" + name + "' is not {dtype, shape, data_offsets}: " + entry.dump());
      }
      t.dtype = entry["dtype"].get<std::string>();
      t.shape = whole_numbers(name, entry["shape"], "shape");
      const auto offsets = whole_numbers(name, entry["data_offsets"], "data_offsets");
      if (offsets.size() != 2) detail::fail(path, "'" + name + "' has data_offsets of " + std::to_string(offsets.size()) + " numbers");
      begin = offsets[0];
      end = offsets[1];
      const std::size_t elem = detail::dtype_bytes(t.dtype);
      if (elem == 0) detail::fail(path, "'" + name + "' has the unknown dtype '" + t.dtype + "'");
      std::size_t count = elem;  // the byte length, checked before each product could overflow
      for (auto d : t.shape) {
        if (d != 0 && count > data_size / d) {
          detail::fail(path, "'" + name + "' is " + t.dtype + " " + xtpu::detail::shape_text(t.shape) + ": more bytes than the " +
                                 std::to_string(data_size) + " of data");
        }
        count *= d;
      }
      count /= elem;
      if (begin > end || end > data_size) {
        detail::fail(path, "'" + name + "' has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                               "] outside the " + std::to_string(data_size) + " bytes of data (truncated?)");
      }
      if (end - begin != count * elem) {
        detail::fail(path, "'" + name + "' is " + t.dtype + " " + xtpu::detail::shape_text(t.shape) + ", " +
                               std::to_string(count * elem) + " bytes, but its data_offsets span " +
                               std::to_string(end - begin));
      }
      t.bytes = std::span<const std::byte>(f.buffer_.data() + data_start + begin, end - begin);
      spans.emplace_back(begin, end);
      f.tensors_.push_back(std::move(t));
    }
    std::sort(spans.begin(), spans.end());
    std::size_t at = 0;
    for (const auto& [b, e] : spans) {
      if (b != at) detail::fail(path, "its tensors' data overlap or leave a gap at byte " + std::to_string(std::min(b, at)) + " of the data");
      at = e;
    }
    if (at != data_size) detail::fail(path, "has " + std::to_string(data_size - at) + " bytes after its last tensor");
    std::sort(f.tensors_.begin(), f.tensors_.end(),
              [](const stored_tensor& a, const stored_tensor& b) { return a.bytes.data() < b.bytes.data(); });
    return f;
  }

  const std::string& path() const noexcept { return path_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// The tensors in the order of their data.
  const std::vector<stored_tensor>& tensors() const noexcept { return tensors_; }
  const stored_tensor* find(std::string_view name) const noexcept {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }

 private:
  safetensors_file() = default;
  std::string path_;
  std::vector<std::byte> buffer_;
  std::map<std::string, std::string> metadata_;
  std::vector<stored_tensor> tensors_;
};

}  // namespace xtpu::io
