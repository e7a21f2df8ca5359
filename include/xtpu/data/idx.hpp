// xtpu/data/idx.hpp — IDX files (the MNIST format), plain or gzip-compressed.
//
// Provides: read_idx<T>(path) -> xt::xarray<T> of the file's own shape, for T one of the
// format's element types (std::uint8_t 0x08, std::int8_t 0x09, std::int16_t 0x0B,
// std::int32_t 0x0C, float 0x0D, double 0x0E); idx_type_code_v<T>.
// Format: bytes 0-1 zero, byte 2 the element type code, byte 3 the rank r (1..6), r big-endian
// uint32 sizes, then the elements row-major, big-endian; nothing after them. A gzip file is
// read through zlib (a plain file passes through it unchanged), so offsets count bytes of the
// uncompressed stream.
// Errors: data_error naming the file and the offset — it cannot be opened, bytes 0-1 are not
// zero, the type code is not T's (both named), a rank outside 1..6, a size of zero or a total
// over 2^40 bytes (checked before any product can overflow), a plain file whose length is not
// what its header promises (before anything is allocated), a gzip stream that ends before the
// data does (how many bytes were promised and read), bytes after the data, a corrupt gzip
// stream (zlib's message), data too large to allocate.
#pragma once

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "xtpu/error.hpp"

namespace xtpu::data {

/// The IDX type code of element type T (0 for a type the format cannot hold).
template <class T>
inline constexpr int idx_type_code_v = std::is_same_v<T, std::uint8_t>    ? 0x08
                                       : std::is_same_v<T, std::int8_t>   ? 0x09
                                       : std::is_same_v<T, std::int16_t>  ? 0x0B
                                       : std::is_same_v<T, std::int32_t>  ? 0x0C
                                       : std::is_same_v<T, float>         ? 0x0D
                                       : std::is_same_v<T, double>        ? 0x0E
                                                                          : 0;

namespace detail {

inline const char* idx_type_name(int code) noexcept {
  switch (code) {
    case 0x08: return "unsigned byte (0x08)";
    case 0x09: return "signed byte (0x09)";
    case 0x0B: return "int16 (0x0B)";
    case 0x0C: return "int32 (0x0C)";
    case 0x0D: return "float32 (0x0D)";
    case 0x0E: return "float64 (0x0E)";
    default: return "an unknown type";
  }
}

/// The data_error for the file at `path`: "xtpu: '<path>' <what>" (every reader's failures).
inline data_error file_error(const std::string& path, const std::string& what) {
  return data_error("xtpu: '" + path + "' " + what);
}
/// The data_error for a file that cannot be opened (`err`: errno, 0 when zlib failed to start).
inline data_error open_error(const std::string& path, int err) {
  return data_error("xtpu: cannot open '" + path + "': " + (err != 0 ? std::strerror(err) : "zlib could not start"));
}

/// open_error for a path that names a folder (which opens, and then fails its first read).
inline void check_not_a_folder(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw open_error(path, EISDIR);
}

/// A file read front to back through zlib, with the offset of the next byte; every failure is
/// a data_error that names the file and that offset.
class gz_reader {
 public:
  explicit gz_reader(const std::string& path) : path_(path), f_((check_not_a_folder(path), gzopen(path.c_str(), "rb"))) {
    if (f_ == nullptr) throw open_error(path_, errno);
  }
  gz_reader(const gz_reader&) = delete;
  gz_reader& operator=(const gz_reader&) = delete;
  ~gz_reader() {
    if (f_ != nullptr) gzclose(f_);
  }

  /// Reads n bytes into p or throws: `what` says what they were to be.
  void read(void* p, std::size_t n, const char* what) {
    const std::uint64_t start = offset_;
    if (read_some(p, n) < n) {
      fail("ends at offset " + std::to_string(offset_) + ": " + what + " needs " + std::to_string(n) +
           " bytes from offset " + std::to_string(start) + " (truncated?)");
    }
  }
  /// Up to n bytes into p: how many (fewer only at the end of the stream; 0 there).
  std::size_t read_some(void* p, std::size_t n) {
    auto* out = static_cast<unsigned char*>(p);
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 16));
      const int got = gzread(f_, out + done, chunk);
      if (got < 0) corrupt();
      if (got == 0) {
        check_whole();
        break;
      }
      offset_ += static_cast<std::uint64_t>(got);
      done += static_cast<std::size_t>(got);
    }
    return done;
  }
  std::uint32_t read_be32(const char* what) {
    unsigned char b[4];
    read(b, 4, what);
    return std::uint32_t{b[0]} << 24 | std::uint32_t{b[1]} << 16 | std::uint32_t{b[2]} << 8 | b[3];
  }
  /// For a plain (uncompressed) file: `bytes` more must be all that is left, checked against
  /// its length (a gzip stream's length is only known by reading it).
  void expect_size(std::uint64_t bytes) const {
    if (gzdirect(f_) == 0) return;
    std::FILE* f = std::fopen(path_.c_str(), "rb");
    if (f == nullptr) return;
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    std::fclose(f);
    if (size >= 0 && static_cast<std::uint64_t>(size) != offset_ + bytes) {
      fail("is " + std::to_string(size) + " bytes, but its header promises " + std::to_string(offset_ + bytes) +
           " (" + std::to_string(bytes) + " bytes of data from offset " + std::to_string(offset_) + ")");
    }
  }
  /// Nothing may follow what was read.
  void expect_end() {
    unsigned char b;
    const int got = gzread(f_, &b, 1);
    if (got < 0) corrupt();
    if (got > 0) fail("has bytes after its data, from offset " + std::to_string(offset_) + " (not an IDX file?)");
    check_whole();
  }
  [[noreturn]] void fail(const std::string& what) const { throw file_error(path_, what); }
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  /// At the end of what zlib gave: a gzip stream cut short (its last block, its CRC or its
  /// length missing) reads as an early end, and only gzerror says so.
  void check_whole() const {
    int code = Z_OK;
    gzerror(f_, &code);
    if (code == Z_BUF_ERROR) {
      fail("is a gzip stream cut short: it ends at offset " + std::to_string(offset_) +
           " of its uncompressed data (truncated?)");
    }
  }
  [[noreturn]] void corrupt() const {
    int code = 0;
    const char* msg = gzerror(f_, &code);
    std::string text = msg != nullptr && *msg ? msg : "zlib error " + std::to_string(code);
    if (text.starts_with(path_ + ": ")) text.erase(0, path_.size() + 2);  // zlib prefixes the path
    fail("is corrupt after offset " + std::to_string(offset_) + " of its uncompressed data: " + text);
  }

  std::string path_;
  gzFile f_;
  std::uint64_t offset_ = 0;
};

}  // namespace detail

/// The IDX file at `path` (plain or gzip) as an xt::xarray<T> of the file's shape; data_error
/// (file and offset named) for anything else — see the header comment.
template <class T>
xt::xarray<T> read_idx(const std::string& path) {
  static_assert(idx_type_code_v<T> != 0,
                "xtpu E504 read_idx: T must be an IDX element type (uint8_t, int8_t, int16_t, int32_t, float, double)");
  detail::gz_reader in(path);
  unsigned char magic[4];
  in.read(magic, 4, "the IDX magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    in.fail("is not an IDX file: bytes 0-1 are " + std::to_string(magic[0]) + " " + std::to_string(magic[1]) +
            ", not 0 0");
  }
  if (magic[2] != idx_type_code_v<T>) {
    in.fail("holds " + std::string(detail::idx_type_name(magic[2])) + " elements (offset 2); read_idx<T> reads " +
            detail::idx_type_name(idx_type_code_v<T>));
  }
  const int rank = magic[3];
  if (rank < 1 || rank > 6) in.fail("has rank " + std::to_string(rank) + " at offset 3; xtpu reads ranks 1 to 6");
  std::vector<std::size_t> shape(static_cast<std::size_t>(rank));
  std::uint64_t count = 1;
  for (auto& d : shape) {
    const std::uint64_t at = in.offset();
    d = in.read_be32("a dimension");
    if (d == 0 || count > (std::uint64_t{1} << 40) / sizeof(T) / d) {  // checked before it is multiplied
      in.fail("has dimension " + std::to_string(d) + " at offset " + std::to_string(at) +
              (d == 0 ? ": sizes must be positive" : ": the data would pass 2^40 bytes"));
    }
    count *= d;
  }
  in.expect_size(count * sizeof(T));  // a plain file's length, before allocating for it
  xt::xarray<T> out;
  try {
    out = xt::xarray<T>::from_shape(shape);
  } catch (const std::bad_alloc&) {
    in.fail("promises " + std::to_string(count * sizeof(T)) + " bytes of data: more than this machine can allocate");
  }
  in.read(out.data(), count * sizeof(T), "the data");
  if constexpr (sizeof(T) > 1 && std::endian::native == std::endian::little) {  // big-endian on disk
    auto* bytes = reinterpret_cast<unsigned char*>(out.data());
    for (std::uint64_t i = 0; i < count; ++i)
      for (std::size_t j = 0; j < sizeof(T) / 2; ++j) std::swap(bytes[i * sizeof(T) + j], bytes[i * sizeof(T) + sizeof(T) - 1 - j]);
  }
  in.expect_end();
  return out;
}

}  // namespace xtpu::data
