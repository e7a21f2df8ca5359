// xtpu/data/tokens.hpp — token files, and next-token windows over tokens for the loader.
//
// Provides:
//   token_format — how a raw token file holds its tokens: `bytes` (one byte each: any file read
//     as bytes, text included — a byte-level vocabulary of 256), `u16` (little-endian uint16,
//     nanoGPT's train.bin), `i32` (little-endian int32);
//   read_tokens(path, format, vocab = 0) -> std::vector<std::int32_t>: a path ending in .gz is
//     a gzip stream, any other the tokens as they are (never sniffed: a u16 file whose first
//     token is 35615 starts with gzip's magic bytes); with vocab > 0 every token must lie in
//     [0, vocab);
//   token_windows<Seq> — a dataset (the loader's interface: x_type, y_type, x_size, y_size,
//     size(), x(i), y(i))
//     of next-token windows over a token sequence: sample i is x = tokens[i s, i s + Seq) and
//     y = tokens[i s + 1, i s + Seq + 1), the token after each position (s: the stride, Seq
//     unless given); x_type = y_type = tensor<int32_t, Seq>. It holds its own copy of the tokens.
// Shape rule: n tokens give (n - Seq - 1) / s + 1 windows (the last tokens that do not fill a
// window are left out).
// Errors: data_error naming the file and the offset — it cannot be opened, it holds no token,
// its length is not a whole number of tokens (the offset of the part token), a token outside
// [0, vocab) (its value and offset), a negative i32 token, a corrupt or cut-short gzip stream; shape_error —
// fewer than Seq + 1 tokens (both counts), a stride of 0.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "xtpu/data/idx.hpp"
#include "xtpu/error.hpp"
#include "xtpu/lazy/tensor.hpp"

namespace xtpu::data {

enum class token_format { bytes, u16, i32 };

namespace detail {
/// A token file's bytes chunk by chunk, with the offset reached: through zlib for a .gz path,
/// else as they are; failures are data_errors naming the file (and offsets, in the message).
class token_source {
 public:
  explicit token_source(const std::string& path) : path_(path) {
    if (path.ends_with(".gz")) {
      gz_.emplace(path);
    } else if (check_not_a_folder(path), (f_ = std::fopen(path.c_str(), "rb")) == nullptr) {
      throw open_error(path, errno);
    }
  }
  token_source(const token_source&) = delete;
  token_source& operator=(const token_source&) = delete;
  ~token_source() {
    if (f_ != nullptr) std::fclose(f_);
  }
  /// Up to n bytes into p: how many (0 at the end).
  std::size_t read_some(void* p, std::size_t n) {
    if (gz_) return gz_->read_some(p, n);
    const std::size_t got = std::fread(p, 1, n, f_);
    if (got < n && std::ferror(f_) != 0) fail("cannot be read after offset " + std::to_string(offset_ + got));
    offset_ += got;
    return got;
  }
  std::uint64_t offset() const noexcept { return gz_ ? gz_->offset() : offset_; }
  [[noreturn]] void fail(const std::string& what) const { throw file_error(path_, what); }

 private:
  std::string path_;
  std::optional<gz_reader> gz_;
  std::FILE* f_ = nullptr;
  std::uint64_t offset_ = 0;
};
}  // namespace detail

/// Bytes per token of a format.
constexpr std::size_t token_bytes(token_format f) noexcept { return f == token_format::bytes ? 1 : f == token_format::u16 ? 2 : 4; }

/// The tokens of the raw token file at `path` (gzip when it ends in .gz), in order;
/// data_error (file and offset named) for what the header comment lists.
inline std::vector<std::int32_t> read_tokens(const std::string& path, token_format format = token_format::bytes,
                                             std::int64_t vocab = 0) {
  detail::token_source in(path);
  const std::size_t width = token_bytes(format);
  std::vector<std::int32_t> out;
  std::vector<unsigned char> buf(std::size_t{1} << 16);
  std::size_t carry = 0;  // bytes of a part token kept from the last chunk
  for (;;) {
    const std::size_t got = in.read_some(buf.data() + carry, buf.size() - carry);
    const std::size_t have = carry + got;
    const std::size_t whole = have / width * width;
    const std::uint64_t first = in.offset() - have;  // the stream offset of buf[0]
    for (std::size_t i = 0; i < whole; i += width) {
      std::int64_t t;
      if (format == token_format::bytes) {
        t = buf[i];
      } else if (format == token_format::u16) {
        t = std::int64_t{buf[i]} | std::int64_t{buf[i + 1]} << 8;
      } else {
        const std::uint32_t u = std::uint32_t{buf[i]} | std::uint32_t{buf[i + 1]} << 8 | std::uint32_t{buf[i + 2]} << 16 |
                                std::uint32_t{buf[i + 3]} << 24;
        t = static_cast<std::int32_t>(u);
      }
      if (t < 0 || (vocab > 0 && t >= vocab)) {
        in.fail("has token " + std::to_string(t) + " at offset " + std::to_string(first + i) +
                (t < 0 ? ": token ids cannot be negative" : ": outside the vocabulary [0, " + std::to_string(vocab) + ")"));
      }
      out.push_back(static_cast<std::int32_t>(t));
    }
    carry = have - whole;
    if (got == 0) break;
    std::memmove(buf.data(), buf.data() + whole, carry);
  }
  if (carry != 0) {
    in.fail("ends at offset " + std::to_string(in.offset()) + " inside a token: " + std::to_string(carry) + " of its " +
            std::to_string(width) + " bytes from offset " + std::to_string(in.offset() - carry) + " (truncated?)");
  }
  if (out.empty()) in.fail("holds no token");
  return out;
}

/// Next-token windows of Seq tokens (see the header comment).
template <std::size_t Seq>
class token_windows {
 public:
  using x_type = tensor<std::int32_t, Seq>;
  using y_type = tensor<std::int32_t, Seq>;
  static constexpr std::size_t x_size = Seq, y_size = Seq;

  explicit token_windows(std::vector<std::int32_t> tokens, std::size_t stride = Seq) : t_(std::move(tokens)), stride_(stride) {
    if (stride_ == 0) throw shape_error("xtpu: token_windows: a stride of 0");
    if (t_.size() < Seq + 1) {
      throw shape_error("xtpu: token_windows<" + std::to_string(Seq) + ">: " + std::to_string(t_.size()) +
                        " tokens, fewer than one window needs (" + std::to_string(Seq + 1) + ": Seq inputs and the next)");
    }
    n_ = (t_.size() - Seq - 1) / stride_ + 1;
  }
  std::size_t size() const noexcept { return n_; }
  std::size_t stride() const noexcept { return stride_; }
  const std::vector<std::int32_t>& tokens() const noexcept { return t_; }
  /// Window i's inputs and its next tokens; i < size().
  std::span<const std::int32_t> x(std::size_t i) const noexcept { return {t_.data() + i * stride_, Seq}; }
  std::span<const std::int32_t> y(std::size_t i) const noexcept { return {t_.data() + i * stride_ + 1, Seq}; }

 private:
  std::vector<std::int32_t> t_;
  std::size_t stride_;
  std::size_t n_ = 0;
};

}  // namespace xtpu::data
