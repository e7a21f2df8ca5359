// The data layer: IDX files (plain and gzip, written here byte by byte from the published
// format, not by the reader's own code), their errors with file and offset, CSV files, datasets, and the
// loader and sequence buckets — every sample once per epoch, a fixed seeded order, shards, a
// padded last batch, prefetching on a thread with the same batches as without, resuming from a
// position, an out_of_memory during a transfer that loses nothing; Fashion-MNIST from Debian's
// package.
#include "files.hpp"
#include "reference.hpp"

#include <gtest/gtest.h>
#include <xtensor/xview.hpp>
#include <zlib.h>


#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

using namespace xtpu_test;

namespace {
namespace fs = std::filesystem;


void be32(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
}
/// An IDX file's bytes: the magic (type code, rank), the sizes, then `data` as given.
std::vector<unsigned char> idx_bytes(unsigned char code, const std::vector<std::uint32_t>& dims,
                                     const std::vector<unsigned char>& data) {
  std::vector<unsigned char> out = {0, 0, code, static_cast<unsigned char>(dims.size())};
  for (auto d : dims) be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}
std::string write_plain(const std::string& name, const std::vector<unsigned char>& bytes) {
  const fs::path p = scratch(name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return p.string();
}
std::string write_gzip(const std::string& name, const std::vector<unsigned char>& bytes) {
  const fs::path p = scratch(name);
  gzFile f = gzopen(p.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
  return p.string();
}
std::vector<unsigned char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// 2 images of 2 x 3 pixels, values 0..11 (uint8).
std::vector<unsigned char> small_images() {
  std::vector<unsigned char> px(12);
  for (unsigned char i = 0; i < 12; ++i) px[i] = i;
  return idx_bytes(0x08, {2, 2, 3}, px);
}
}  // namespace

// ---- IDX ---------------------------------------------------------------------------------

TEST(Idx, ReadsUnsignedBytesPlainAndGzipped) {
  for (const auto& path : {write_plain("u8.idx", small_images()), write_gzip("u8.idx.gz", small_images())}) {
    const xt::xarray<std::uint8_t> a = xtpu::data::read_idx<std::uint8_t>(path);
    ASSERT_EQ(a.dimension(), 3u) << path;
    EXPECT_EQ(a.shape()[0], 2u);
    EXPECT_EQ(a.shape()[1], 2u);
    EXPECT_EQ(a.shape()[2], 3u);
    for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(a.data()[i], i);
    EXPECT_EQ(a(1, 0, 2), 8);
  }
}

TEST(Idx, ReadsBigEndianIntsAndFloats) {
  std::vector<unsigned char> ints;
  be32(ints, 0x01020304u);
  be32(ints, 0xFFFFFFFEu);  // -2
  EXPECT_EQ(xtpu::data::read_idx<std::int32_t>(write_plain("i32.idx", idx_bytes(0x0C, {2}, ints))),
            (xt::xarray<std::int32_t>{0x01020304, -2}));
  std::vector<unsigned char> floats;
  be32(floats, 0x3FC00000u);  // 1.5f
  be32(floats, 0xC0200000u);  // -2.5f
  be32(floats, 0x7F800000u);  // inf
  const auto f = xtpu::data::read_idx<float>(write_gzip("f32.idx.gz", idx_bytes(0x0D, {1, 3}, floats)));
  ASSERT_EQ(f.shape()[1], 3u);
  EXPECT_EQ(f(0, 0), 1.5f);
  EXPECT_EQ(f(0, 1), -2.5f);
  EXPECT_EQ(f(0, 2), std::numeric_limits<float>::infinity());
  std::vector<unsigned char> shorts = {0x80, 0x01};  // -32767
  EXPECT_EQ(xtpu::data::read_idx<std::int16_t>(write_plain("i16.idx", idx_bytes(0x0B, {1}, shorts)))(0), -32767);
}

TEST(Idx, EachBadFileIsADataErrorNamingTheFileAndTheOffset) {
  const std::string missing = scratch("no-such-file.idx").string();
  std::string m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(missing); });
  EXPECT_TRUE(has(m, "cannot open '" + missing + "'")) << m;
  EXPECT_TRUE(has(m, "No such file")) << m;
  const std::string folder = scratch("a-folder").string();  // opens, then fails to read: said first
  std::filesystem::create_directories(folder);
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(folder); });
  EXPECT_EQ(m, "xtpu: cannot open '" + folder + "': Is a directory");
  m = error_message<xtpu::data_error>([&] { (void)xtpu::data::read_tokens(folder); });
  EXPECT_EQ(m, "xtpu: cannot open '" + folder + "': Is a directory");

  auto bad = small_images();
  bad[1] = 7;
  const std::string magic = write_plain("magic.idx", bad);
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(magic); });
  EXPECT_TRUE(has(m, "'" + magic + "' is not an IDX file: bytes 0-1 are 0 7")) << m;

  const std::string ints = write_plain("type.idx", idx_bytes(0x0C, {1}, {0, 0, 0, 1}));
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(ints); });
  EXPECT_TRUE(has(m, "holds int32 (0x0C) elements (offset 2); read_idx<T> reads unsigned byte (0x08)")) << m;

  const std::string rank = write_plain("rank.idx", {0, 0, 8, 7});
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(rank); });
  EXPECT_TRUE(has(m, "has rank 7 at offset 3")) << m;

  const std::string zero = write_plain("zero.idx", idx_bytes(0x08, {3, 0}, {}));
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(zero); });
  EXPECT_TRUE(has(m, "has dimension 0 at offset 8")) << m;

  auto cut = small_images();  // header 16 bytes + 12 of data: keep 5 of the data
  cut.resize(21);
  // a plain file's length is checked against its header before anything is allocated
  const std::string cut_plain = write_plain("cut.idx", cut), cut_gz = write_gzip("cut.idx.gz", cut);
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(cut_plain); });
  EXPECT_TRUE(has(m, "'" + cut_plain + "' is 21 bytes, but its header promises 28 (12 bytes of data from offset 16)")) << m;
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(cut_gz); });
  EXPECT_TRUE(has(m, "'" + cut_gz + "' ends at offset 21: the data needs 12 bytes from offset 16")) << m;

  auto longer = small_images();
  longer.push_back(1);
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(write_plain("long.idx", longer)); });
  EXPECT_TRUE(has(m, "is 29 bytes, but its header promises 28")) << m;
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(write_gzip("long.idx.gz", longer)); });
  EXPECT_TRUE(has(m, "has bytes after its data, from offset 28")) << m;

  // sizes whose product would overflow 64 bits (2^20 x 2^20 x 2^24 = 2^64) or pass 2^40 bytes:
  // refused at the dimension that passes, before any product or allocation
  for (const auto& [dims, at] : std::vector<std::pair<std::vector<std::uint32_t>, int>>{
           {{1u << 10, 1u << 10, 1u << 24}, 12}, {{1u << 31, 1u << 31}, 8}, {{1u << 20, 1u << 20, 1u << 24}, 8}}) {
    const std::string huge = write_gzip("huge.idx.gz", idx_bytes(0x0D, dims, {}));
    m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<float>(huge); });
    EXPECT_TRUE(has(m, "at offset " + std::to_string(at) + ": the data would pass 2^40 bytes")) << m;
  }

  // a gzip stream with its deflate data damaged: zlib's own message, after a named offset
  std::vector<unsigned char> big(64 * 1024);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  auto gz = bytes_of(write_gzip("big.idx.gz", idx_bytes(0x08, {64, 1024}, big)));
  for (std::size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) gz[i] ^= 0x5A;
  const std::string corrupt = write_plain("corrupt.idx.gz", gz);
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(corrupt); });
  EXPECT_TRUE(has(m, "'" + corrupt + "' is corrupt after offset")) << m;
  // and one cut short: the stream ends early
  gz = bytes_of(write_gzip("big2.idx.gz", idx_bytes(0x08, {64, 1024}, big)));
  gz.resize(gz.size() / 2);
  const std::string half = write_plain("half.idx.gz", gz);
  m = error_message<xtpu::data_error>([&] { xtpu::data::read_idx<std::uint8_t>(half); });
  EXPECT_TRUE(has(m, "'" + half + "'")) << m;
  EXPECT_TRUE(has(m, "ends at offset") || has(m, "is corrupt after offset")) << m;
}

// ---- datasets ------------------------------------------------------------------------------

using sample_x = xtpu::tensor<float, 3>;
using sample_y = xtpu::tensor<std::int32_t>;
using small_set = xtpu::data::dataset<sample_x, sample_y>;

/// n samples: x(i) = (i, i + 0.25, i + 0.5), y(i) = i.
small_set numbered(std::size_t n) {
  std::vector<float> x(3 * n);
  std::vector<std::int32_t> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < 3; ++j) x[3 * i + j] = static_cast<float>(i) + 0.25f * static_cast<float>(j);
    y[i] = static_cast<std::int32_t>(i);
  }
  return {std::move(x), std::move(y)};
}

TEST(Dataset, SizesMustBeNSamplesOfTheTypesShapes) {
  EXPECT_EQ(numbered(5).size(), 5u);
  EXPECT_EQ(numbered(5).x(2)[1], 2.25f);
  try {
    small_set bad(std::vector<float>(7), std::vector<std::int32_t>(2));
    FAIL();
  } catch (const xtpu::shape_error& e) {
    EXPECT_TRUE(has(e.what(), "7 input elements and 2 target elements are not N samples of 3 and 1")) << e.what();
  }
  EXPECT_THROW(small_set(std::vector<float>(6), std::vector<std::int32_t>(3)), xtpu::shape_error);
  EXPECT_THROW(small_set(std::vector<float>{}, std::vector<std::int32_t>{}), xtpu::shape_error);

  const xt::xarray<double> xs = {{1, 2, 3}, {4, 5, 6}};
  const xt::xarray<int> ys = {7, 8};
  const auto d = small_set::from_xtensor(xs, ys);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.x(1)[2], 6.0f);
  EXPECT_EQ(d.y(1)[0], 8);
  try {
    small_set::from_xtensor(xt::xarray<float>::from_shape({2, 4}), ys);
    FAIL();
  } catch (const xtpu::shape_error& e) {
    EXPECT_TRUE(has(e.what(), "the input array has shape (2, 4), expected (N, 3)")) << e.what();
  }
  EXPECT_THROW(small_set::from_xtensor(xs, xt::xarray<int>{1, 2, 3}), xtpu::shape_error);
}

// ---- token files and next-token windows ---------------------------------------------------

TEST(Tokens, ReadsBytesU16AndI32LittleEndianPlainAndGzipped) {
  using xtpu::data::read_tokens;
  using xtpu::data::token_format;
  const std::string text = "ab\n\xff";
  const std::vector<unsigned char> raw(text.begin(), text.end());
  EXPECT_EQ(read_tokens(write_plain("t.txt", raw)), (std::vector<std::int32_t>{97, 98, 10, 255}));
  EXPECT_EQ(read_tokens(write_gzip("t.txt.gz", raw)), (std::vector<std::int32_t>{97, 98, 10, 255}));
  // u16: 0x0102 = 258, 0xFFFF; i32: 70000, 1 (written byte by byte, little-endian)
  EXPECT_EQ(read_tokens(write_plain("t.u16", {0x02, 0x01, 0xFF, 0xFF}), token_format::u16),
            (std::vector<std::int32_t>{258, 65535}));
  EXPECT_EQ(read_tokens(write_gzip("t.i32.gz", {0x70, 0x11, 0x01, 0x00, 1, 0, 0, 0}), token_format::i32),
            (std::vector<std::int32_t>{70000, 1}));
  // a plain file is never taken for gzip: this u16 file starts with gzip's magic bytes 1f 8b
  EXPECT_EQ(read_tokens(write_plain("magic.u16", {0x1F, 0x8B, 7, 0}), token_format::u16), (std::vector<std::int32_t>{35615, 7}));
  // more than one read's worth (64 KiB)
  std::vector<unsigned char> big;
  for (std::uint32_t i = 0; i < 50000; ++i) big.insert(big.end(), {static_cast<unsigned char>(i), static_cast<unsigned char>(i >> 8)});
  const auto t = read_tokens(write_gzip("big.u16.gz", big), token_format::u16);
  ASSERT_EQ(t.size(), 50000u);
  EXPECT_EQ(t[32767], 32767);
  EXPECT_EQ(t[49999], 49999);
}

TEST(Tokens, EachBadFileIsADataErrorNamingTheFileAndTheOffset) {
  using xtpu::data::read_tokens;
  using xtpu::data::token_format;
  const auto msg = [](auto f) { return error_message<xtpu::data_error>(f); };
  const std::string part = write_plain("part.u16", {1, 0, 2, 0, 3});
  std::string m = msg([&] { read_tokens(part, token_format::u16); });
  EXPECT_TRUE(has(m, "'" + part + "' ends at offset 5 inside a token: 1 of its 2 bytes from offset 4")) << m;
  m = msg([&] { read_tokens(write_plain("vocab.u16", {1, 0, 0x10, 0x27}), token_format::u16, 5000); });
  EXPECT_TRUE(has(m, "has token 10000 at offset 2: outside the vocabulary [0, 5000)")) << m;
  m = msg([&] { read_tokens(write_plain("neg.i32", {0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF}), token_format::i32); });
  EXPECT_TRUE(has(m, "has token -1 at offset 4: token ids cannot be negative")) << m;
  m = msg([&] { read_tokens(write_plain("empty.txt", {})); });
  EXPECT_TRUE(has(m, "holds no token")) << m;
  m = msg([&] { read_tokens(scratch("missing.txt").string()); });
  EXPECT_TRUE(has(m, "cannot open")) << m;
  // a gzip stream cut short (zlib reads it to where it stops, then reports the early end)
  auto gz = bytes_of(write_gzip("whole.gz", std::vector<unsigned char>(4000, 7)));
  gz.resize(gz.size() / 2);
  m = msg([&] { read_tokens(write_plain("cut.gz", gz)); });
  EXPECT_TRUE(has(m, "cut.gz' is a gzip stream cut short: it ends at offset")) << m;
}

TEST(Tokens, WindowsAreTheNextTokenPairsAndFeedTheLoader) {
  using windows = xtpu::data::token_windows<4>;
  std::vector<std::int32_t> t(11);
  for (std::int32_t i = 0; i < 11; ++i) t[static_cast<std::size_t>(i)] = 100 + i;
  const windows w(t);  // stride 4: windows at 0 and 4 (8 would need tokens up to 12)
  EXPECT_EQ(w.size(), 2u);
  EXPECT_EQ(std::vector<std::int32_t>(w.x(1).begin(), w.x(1).end()), (std::vector<std::int32_t>{104, 105, 106, 107}));
  EXPECT_EQ(std::vector<std::int32_t>(w.y(1).begin(), w.y(1).end()), (std::vector<std::int32_t>{105, 106, 107, 108}));
  EXPECT_EQ(windows(t, 1).size(), 7u);  // every start 0..6
  const std::string m = error_message<xtpu::shape_error>([] { windows(std::vector<std::int32_t>(4)); });
  EXPECT_TRUE(has(m, "token_windows<4>: 4 tokens, fewer than one window needs (5")) << m;
  EXPECT_THROW(windows(t, 0), xtpu::shape_error);

  const windows w1(t, 1);
  xtpu::data::loader<2, windows> l(w1, {.shuffle = false});
  static_assert(std::is_same_v<decltype(l)::x_batch, xtpu::tensor<std::int32_t, 2, 4>>);
  std::size_t n = 0;
  for (auto& [x, y] : l) {
    const auto hx = x.to_host();
    const auto hy = y.to_host();
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        EXPECT_EQ(hx(i, j), static_cast<std::int32_t>(100 + 2 * n + i + j));
        EXPECT_EQ(hy(i, j), hx(i, j) + 1);
      }
    ++n;
  }
  EXPECT_EQ(n, 3u);  // 7 windows: 3 whole batches
}

// ---- buckets: sequences of many lengths on a fixed set of shapes ----------------------------

TEST(Buckets, ALengthGoesToTheSmallestBucketThatHoldsIt) {
  using b = xtpu::buckets<4, 8, 16>;
  EXPECT_EQ(b::bucket_of(1), 0u);
  EXPECT_EQ(b::bucket_of(4), 0u);
  EXPECT_EQ(b::bucket_of(5), 1u);
  EXPECT_EQ(b::bucket_of(16), 2u);
  EXPECT_EQ(b::visit(7, [](auto l) { return decltype(l)::value; }), 8u);
  EXPECT_EQ(b::visit_index(2, [](auto l) { return decltype(l)::value; }), 16u);
  EXPECT_THROW(b::visit_index(3, [](auto) {}), xtpu::shape_error);
  const std::string m = error_message<xtpu::shape_error>([] { b::bucket_of(17); });
  EXPECT_TRUE(has(m, "buckets(4, 8, 16): length 17 is longer than the last bucket (16)")) << m;
}

namespace {
using seq_buckets = xtpu::data::sequence_buckets<2, xtpu::buckets<4, 8, 16>>;
/// Sequences of 3, 5, 5, 9, 17 and 2 tokens; sequence i's tokens are 100 i, 100 i + 1, ...
std::vector<std::vector<std::int32_t>> sequences() {
  std::vector<std::vector<std::int32_t>> s;
  for (std::size_t n : {3u, 5u, 5u, 9u, 17u, 2u}) {
    std::vector<std::int32_t> t(n);
    for (std::size_t j = 0; j < n; ++j) t[j] = static_cast<std::int32_t>(100 * s.size() + j);
    s.push_back(t);
  }
  return s;
}
}  // namespace

TEST(Buckets, SequencesArePaddedNextTokenSamplesOfTheirBucket) {
  const seq_buckets d(sequences(), {.shuffle = false});
  // positions n - 1: 2, 4, 4, 8, 16, 1 -> buckets 4 (four sequences), 8, 16
  EXPECT_EQ(d.bucket_size(0), 4u);
  EXPECT_EQ(d.bucket_size(1), 1u);
  EXPECT_EQ(d.bucket_size(2), 1u);
  EXPECT_EQ(d.batches_per_epoch(), 4u);  // 2 + 1 + 1: the last two padded with a row of nothing
  std::set<std::int32_t> seen;
  std::size_t batches = 0;
  d.for_each_batch(0, [&](auto& b) {
    constexpr std::size_t L = std::remove_reference_t<decltype(b)>::length;
    const auto x = b.x.to_host();
    const auto y = b.y.to_host();
    const auto mask = b.mask.to_host();
    for (std::size_t r = 0; r < 2; ++r) {
      if (r >= b.real) {  // a row of padding
        for (std::size_t t = 0; t < L; ++t) {
          EXPECT_EQ(x(r, t), 0);
          EXPECT_EQ(y(r, t), -100);
          EXPECT_EQ(mask(r, t), 0.0f);
        }
        continue;
      }
      const std::int32_t first = x(r, 0);
      seen.insert(first / 100);
      for (std::size_t t = 0; t < L; ++t) {
        const bool real = mask(r, t) == 1.0f;
        if (real) {
          EXPECT_EQ(x(r, t), first + static_cast<std::int32_t>(t));
          EXPECT_EQ(y(r, t), x(r, t) + 1);
        } else {
          EXPECT_EQ(mask(r, t), 0.0f);
          EXPECT_EQ(x(r, t), 0);
          EXPECT_EQ(y(r, t), -100);
        }
      }
    }
    ++batches;
  });
  EXPECT_EQ(batches, 4u);
  EXPECT_EQ(seen, (std::set<std::int32_t>{0, 1, 2, 3, 4, 5}));  // every sequence once

  auto too_long = sequences();
  too_long[3].resize(18);
  std::string m = error_message<xtpu::shape_error>([&] { static_cast<void>(seq_buckets(too_long)); });
  EXPECT_TRUE(has(m, "sequence 3 has 18 tokens: its 17 positions are longer than the last of the buckets (4, 8, 16)")) << m;
  auto too_short = sequences();
  too_short[1].resize(1);
  m = error_message<xtpu::shape_error>([&] { static_cast<void>(seq_buckets(too_short)); });
  EXPECT_TRUE(has(m, "sequence 1 has 1 token(s)")) << m;
  EXPECT_THROW(seq_buckets({}), xtpu::shape_error);
}

TEST(Buckets, TheOrderIsSeededAndAStepCompilesOncePerBucket) {
  const seq_buckets a(sequences(), {.seed = 7}), b(sequences(), {.seed = 7});
  const auto firsts = [](const seq_buckets& d, std::uint64_t epoch) {
    std::vector<std::int32_t> out;
    d.for_each_batch(epoch, [&](auto& bt) {
      const auto x = bt.x.to_host();
      for (std::size_t r = 0; r < bt.real; ++r) out.push_back(x(r, 0));
    });
    return out;
  };
  EXPECT_EQ(firsts(a, 0), firsts(b, 0));
  EXPECT_EQ(firsts(a, 3), firsts(b, 3));
  std::set<std::vector<std::int32_t>> orders;
  for (std::uint64_t e = 0; e < 8; ++e) orders.insert(firsts(a, e));
  EXPECT_GT(orders.size(), 1u);  // epochs differ

  // a step over each batch: one plan per bucket, then none
  xtpu::tensor<float> total = xtpu::zeros<float>();
  xtpu::mark_step();  // (total stored: every step below has the same form)
  const auto before = xtpu::metrics::counter("UncachedCompile");
  const auto epoch = [&](std::uint64_t e) {
    a.for_each_batch(e, [&](auto& bt) {
      total = total + xtpu::sum(xtpu::cast<float>(bt.y) * bt.mask);
      xtpu::mark_step();
    });
  };
  epoch(0);
  const auto compiles = xtpu::metrics::counter("UncachedCompile");
  EXPECT_EQ(compiles - before, 3);  // one plan per bucket
  epoch(1);
  epoch(2);
  EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), compiles);
  // every real target of three epochs: sum over sequences of sum_{j=1}^{n-1} (100 i + j)
  double want = 0;
  const auto s = sequences();
  for (const auto& q : s)
    for (std::size_t j = 1; j < q.size(); ++j) want += q[j];
  EXPECT_EQ(static_cast<double>(total.item()), 3 * want);
}

namespace {
/// The first token of every real row of every batch of one pass, from `from`, and where it ended.
std::vector<std::int32_t> firsts_from(const seq_buckets& d, const xtpu::data::loader_position& from,
                                      std::size_t stop_after = SIZE_MAX,
                                      xtpu::data::loader_position* next = nullptr) {
  std::vector<std::int32_t> out;
  std::size_t n = 0;
  const auto p = d.for_each_batch(from, [&](auto& bt) {
    const auto x = bt.x.to_host();
    for (std::size_t r = 0; r < bt.real; ++r) out.push_back(x(r, 0));
    return ++n < stop_after;
  });
  if (next) *next = p;
  return out;
}
/// 24 sequences of 3..17 tokens (sequence i's tokens start at 100 i): 13 batches of 2 over three buckets.
std::vector<std::vector<std::int32_t>> many_sequences() {
  std::vector<std::vector<std::int32_t>> s;
  for (std::size_t i = 0; i < 24; ++i) {
    std::vector<std::int32_t> t(3 + (i * 7) % 15);
    for (std::size_t j = 0; j < t.size(); ++j) t[j] = static_cast<std::int32_t>(100 * i + j);
    s.push_back(t);
  }
  return s;
}
}  // namespace

TEST(Buckets, PrefetchingGivesTheSameBatchesAsNot) {
  const seq_buckets ahead(many_sequences(), {.seed = 3, .prefetch = 3}), inline_(many_sequences(), {.seed = 3, .prefetch = 0});
  for (std::uint64_t e = 0; e < 3; ++e) EXPECT_EQ(firsts_from(ahead, {e, 0}), firsts_from(inline_, {e, 0})) << "epoch " << e;
  // the batches' indices count this rank's epoch
  std::vector<std::size_t> indices;
  ahead.for_each_batch(0, [&](auto& bt) { indices.push_back(bt.index); });
  EXPECT_EQ(indices.size(), ahead.batches_per_epoch());
  for (std::size_t i = 0; i < indices.size(); ++i) EXPECT_EQ(indices[i], i);
}

TEST(Buckets, ShardsAreDisjointAndEqualAndTogetherTheEpoch) {
  const seq_buckets one(many_sequences(), {.seed = 4});
  const std::size_t all = one.batches_per_epoch();
  std::vector<std::int32_t> together;
  std::set<std::int32_t> seen;
  for (std::size_t world : {2u, 3u, 13u}) {
    std::size_t rows = 0, total_batches = 0;
    seen.clear();
    for (std::size_t rank = 0; rank < world; ++rank) {
      const seq_buckets d(many_sequences(), {.seed = 4, .rank = rank, .world = world});
      EXPECT_EQ(d.batches_per_epoch(), all / world);
      total_batches += d.batches_per_epoch();
      for (std::int32_t f : firsts_from(d, {1, 0})) {
        EXPECT_TRUE(seen.insert(f).second) << "sequence " << f / 100 << " on two ranks (world " << world << ")";
        ++rows;
      }
    }
    EXPECT_EQ(total_batches, all - all % world);
    if (all % world == 0) {
      EXPECT_EQ(rows, many_sequences().size()) << "world " << world;
    }
  }
  // rank r takes positions r, r + world, ... of the one-rank order
  const seq_buckets r1(many_sequences(), {.seed = 4, .rank = 1, .world = 2});
  std::vector<std::int32_t> want, got = firsts_from(r1, {0, 0});
  std::size_t b = 0;
  one.for_each_batch(0, [&](auto& bt) {
    if (b++ % 2 == 1) {
      const auto x = bt.x.to_host();
      for (std::size_t r = 0; r < bt.real; ++r) want.push_back(x(r, 0));
    }
  });
  EXPECT_EQ(got, want);

  std::string m = error_message<xtpu::config_error>([] { static_cast<void>(seq_buckets(many_sequences(), {.rank = 2, .world = 2})); });
  EXPECT_TRUE(has(m, "sequence_buckets: rank 2 of world 2: expected world >= 1 and rank in [0, world)")) << m;
  m = error_message<xtpu::shape_error>([] { static_cast<void>(seq_buckets(sequences(), {.world = 5})); });
  EXPECT_TRUE(has(m, "4 batches of 2 for 5 ranks")) << m;
}

TEST(Buckets, BreakingOffAndResumingFromAPositionContinuesTheSameSequence) {
  const seq_buckets d(many_sequences(), {.seed = 9});
  const auto whole = firsts_from(d, {2, 0});
  xtpu::data::loader_position p;
  auto part = firsts_from(d, {2, 0}, 5, &p);  // f returns false after 5 batches
  EXPECT_EQ(p, (xtpu::data::loader_position{2, 5}));
  EXPECT_EQ(p.order, d.describe());
  EXPECT_EQ(d.describe(), "24 sequences in buckets (4, 8, 16), batch 2, seed 9, shuffled, shard 0 of 1");
  const seq_buckets again(many_sequences(), {.seed = 9, .prefetch = 0});  // a new process, as after a checkpoint
  xtpu::data::loader_position end;
  for (std::int32_t f : firsts_from(again, p, SIZE_MAX, &end)) part.push_back(f);
  EXPECT_EQ(part, whole);
  EXPECT_EQ(end, (xtpu::data::loader_position{3, 0}));  // the epoch ran through: the next one
  // the last batch: the next position is the next epoch's first
  firsts_from(d, {2, d.batches_per_epoch() - 1}, 1, &end);
  EXPECT_EQ(end, (xtpu::data::loader_position{3, 0}));

  const seq_buckets other(many_sequences(), {.seed = 8});
  std::string m = error_message<xtpu::config_error>([&] { firsts_from(other, p); });
  EXPECT_TRUE(has(m, "sequence_buckets: the position (epoch 2, batch 5) comes from a loader of 24 sequences in buckets "
                     "(4, 8, 16), batch 2, seed 9, shuffled, shard 0 of 1; this one is " + other.describe())) << m;
  m = error_message<xtpu::config_error>([&] { firsts_from(d, {0, d.batches_per_epoch()}); });
  EXPECT_TRUE(has(m, "batch " + std::to_string(d.batches_per_epoch()) + " of an epoch of")) << m;
}

TEST(Buckets, AnOutOfMemoryWhileMakingABatchReachesTheCaller) {
  const xtpu::device dev("v5e", 7);
  const std::uint64_t hbm = dev.hbm_bytes();
  for (std::size_t depth : {0, 2}) {
    xtpu::device_scope on(dev);
    const seq_buckets d(many_sequences(), {.seed = 2, .prefetch = depth});
    const auto expected = firsts_from(d, {0, 0});
    std::vector<std::int32_t> got;
    std::size_t delivered = 0;
    bool failed = false;
    try {
      d.for_each_batch(0, [&](auto& bt) {
        const auto x = bt.x.to_host();
        for (std::size_t r = 0; r < bt.real; ++r) got.push_back(x(r, 0));
        if (++delivered == 2) dev.set_hbm_bytes(8);  // no room for the next batches
      });
    } catch (const xtpu::out_of_memory& e) {
      failed = true;
      EXPECT_TRUE(has(e.what(), "v5e:7")) << e.what();
    }
    dev.set_hbm_bytes(hbm);
    EXPECT_TRUE(failed) << "depth " << depth;
    // batches made before the limit may have been delivered; the pass goes on from the next one
    for (std::int32_t f : firsts_from(d, {0, delivered})) got.push_back(f);
    EXPECT_EQ(got, expected) << "depth " << depth;
  }
}

// ---- the loader ----------------------------------------------------------------------------

namespace {
using loader4 = xtpu::data::loader<4, small_set>;
static_assert(std::is_same_v<loader4::x_batch, xtpu::tensor<float, 4, 3>>);
static_assert(std::is_same_v<loader4::y_batch, xtpu::tensor<std::int32_t, 4>>);
static_assert(!std::is_constructible_v<loader4, small_set&&>, "a temporary dataset would dangle");

/// The labels of every batch of one pass over the loader (its next epoch, or the rest of one).
std::vector<std::vector<std::int32_t>> labels_of_pass(loader4& l) {
  std::vector<std::vector<std::int32_t>> out;
  for (auto& [x, y] : l) {
    const auto h = y.to_host();
    out.emplace_back(h.begin(), h.end());
  }
  return out;
}
}  // namespace

TEST(Loader, AnEpochVisitsEveryWholeBatchOnceWithTheSamplesValues) {
  const auto d = numbered(10);
  loader4 l(d, {.shuffle = false});
  EXPECT_EQ(l.batches_per_epoch(), 2u);  // 10 samples: two whole batches, 2 left out
  std::size_t n = 0;
  for (auto& b : l) {
    const auto x = b.x.to_host();
    const auto y = b.y.to_host();
    EXPECT_EQ(b.index, n);
    EXPECT_EQ(b.real, 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(y(i), static_cast<std::int32_t>(4 * n + i));
      for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(x(i, j), d.x(4 * n + i)[j]);
    }
    ++n;  // after the last batch, the next epoch's first
    EXPECT_EQ(l.position(), (n < 2 ? xtpu::data::loader_position{0, n} : xtpu::data::loader_position{1, 0}));
  }
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(l.position(), (xtpu::data::loader_position{1, 0}));
}

TEST(Loader, TheShuffledOrderIsFixedBySeedAndEpoch) {
  const auto d = numbered(10);
  loader4 a(d, {.seed = 3}), b(d, {.seed = 3}), c(d, {.seed = 4});
  EXPECT_EQ(a.order(0), b.order(0));
  EXPECT_NE(a.order(0), a.order(1));
  EXPECT_NE(a.order(0), c.order(0));
  std::vector<std::size_t> sorted = a.order(5);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // the order is part of a checkpoint's meaning: splitmix64 + Fisher-Yates, pinned here
  EXPECT_EQ(xtpu::data::detail::epoch_order(10, true, 0, 0), (std::vector<std::size_t>{2, 1, 8, 4, 9, 6, 5, 7, 3, 0}));
  // what the epochs deliver is that order, batch by batch
  const auto epoch0 = labels_of_pass(a), epoch1 = labels_of_pass(a);
  for (std::size_t k = 0; k < 8; ++k) {
    EXPECT_EQ(epoch0[k / 4][k % 4], static_cast<std::int32_t>(b.order(0)[k]));
    EXPECT_EQ(epoch1[k / 4][k % 4], static_cast<std::int32_t>(b.order(1)[k]));
  }
}

TEST(Loader, ShardsAreDisjointAndEqual) {
  const auto d = numbered(23);
  std::set<std::size_t> seen;
  for (std::size_t r = 0; r < 3; ++r) {
    loader4 l(d, {.seed = 9, .rank = r, .world = 3});
    EXPECT_EQ(l.shard_size(), 7u);
    EXPECT_EQ(l.batches_per_epoch(), 1u);
    const auto all = xtpu::data::detail::epoch_order(23, true, 9, 2);
    const auto mine = l.order(2);
    for (std::size_t k = 0; k < mine.size(); ++k) {
      EXPECT_EQ(mine[k], all[r + 3 * k]);
      EXPECT_TRUE(seen.insert(mine[k]).second) << "sample " << mine[k] << " in two shards";
    }
  }
  EXPECT_EQ(seen.size(), 21u);
  try {
    loader4 l(d, {.rank = 3, .world = 3});
    FAIL();
  } catch (const xtpu::config_error& e) {
    EXPECT_TRUE(has(e.what(), "rank 3 of world 3")) << e.what();
  }
  try {
    loader4 l(d, {.world = 8});
    FAIL();
  } catch (const xtpu::shape_error& e) {
    EXPECT_TRUE(has(e.what(), "23 samples in 8 shard(s) of 2 make no whole batch of 4")) << e.what();
  }
}

TEST(Loader, APaddedLastBatchHasZerosAndAMaskAndCompilesNothingNew) {
  const auto d = numbered(10);
  loader4 l(d, {.shuffle = false, .last = xtpu::data::last_batch::pad});
  EXPECT_EQ(l.batches_per_epoch(), 3u);
  xtpu::mark_step();
  std::int64_t compiles_after_first = -1;
  std::vector<double> sums;
  for (auto& b : l) {
    // a masked mean over the batch: the padded samples count for nothing
    const xtpu::tensor<float> masked = xtpu::sum(xtpu::sum<1>(b.x) * b.mask()) / xtpu::sum(b.mask());
    xtpu::mark_step();
    if (b.index == 0) compiles_after_first = xtpu::metrics::counter("UncachedCompile");
    EXPECT_EQ(xtpu::metrics::counter("UncachedCompile"), compiles_after_first) << "batch " << b.index;
    sums.push_back(masked.item());
    if (b.index == 2) {
      EXPECT_EQ(b.real, 2u);
      const auto x = b.x.to_host();
      const auto y = b.y.to_host();
      EXPECT_EQ(y(1), 9);
      EXPECT_EQ(y(2), 0);
      EXPECT_EQ(x(3, 2), 0.0f);
      const xtpu::tensor<float, 4> mask = b.mask();
      // element by element: g++ 12.2 -O2 -mavx512f builds std::vector<double>{1, 1, 0, 0} as
      // {1, 1, 1, 1} (a broadcast in place of the zero upper half; docs/numerics.md)
      const auto m = host(mask);
      for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(m[i], i < 2 ? 1.0 : 0.0) << i;
    }
  }
  // sample i sums to 3i + 0.75: the last batch's mean is over samples 8 and 9 only
  EXPECT_DOUBLE_EQ(sums[2], (3 * 8 + 0.75 + 3 * 9 + 0.75) / 2);
}

TEST(Loader, PrefetchingGivesTheSameBatchesAsNot) {
  const auto d = numbered(64);
  for (std::size_t depth : {1, 2, 5}) {
    loader4 ahead(d, {.seed = 1, .prefetch = depth}), inline_(d, {.seed = 1, .prefetch = 0});
    for (int e = 0; e < 2; ++e) EXPECT_EQ(labels_of_pass(ahead), labels_of_pass(inline_)) << "depth " << depth;
  }
  EXPECT_TRUE(xtpu::metrics::metric("LoaderWaitTime").has_value());
}

TEST(Loader, BreakingOffAndResumingFromAPositionContinuesTheSameSequence) {
  const auto d = numbered(40);
  loader4 whole(d, {.seed = 5});
  std::vector<std::vector<std::int32_t>> expected;
  for (int e = 0; e < 3; ++e)
    for (auto& v : labels_of_pass(whole)) expected.push_back(v);

  loader4 part(d, {.seed = 5});
  std::vector<std::vector<std::int32_t>> got;
  xtpu::data::loader_position saved;
  for (auto& [x, y] : part) {  // stop after 4 batches of epoch 0, as a crash would
    const auto h = y.to_host();
    got.emplace_back(h.begin(), h.end());
    saved = part.position();
    if (got.size() == 4) break;
  }
  EXPECT_EQ(saved, (xtpu::data::loader_position{0, 4}));
  loader4 resumed(d, {.seed = 5, .prefetch = 3});  // a new process, from the checkpoint
  resumed.resume(saved);
  while (got.size() < expected.size())
    for (auto& v : labels_of_pass(resumed)) got.push_back(v);
  EXPECT_EQ(got, expected);

  // the same loader, iterated again after a break, continues where it was
  loader4 again(d, {.seed = 5});
  got.clear();
  for (auto& [x, y] : again) {
    (void)x;
    const auto h = y.to_host();
    got.emplace_back(h.begin(), h.end());
    if (got.size() == 2) break;
  }
  for (auto& v : labels_of_pass(again)) got.push_back(v);
  EXPECT_EQ(got, std::vector<std::vector<std::int32_t>>(expected.begin(), expected.begin() + 10));
}

TEST(Loader, APositionResumesOnlyALoaderWithTheSameOrder) {
  const auto d = numbered(40);
  loader4 a(d, {.seed = 5});
  EXPECT_EQ(a.describe(), "40 samples, batch 4, seed 5, shuffled, shard 0 of 1, last batch dropped");
  a.epoch(2, 3);
  const auto p = a.position();
  EXPECT_EQ(p.order, a.describe());
  loader4 same(d, {.seed = 5, .prefetch = 0});
  EXPECT_EQ(same.resume(p).position(), p);
  for (const auto& o : {xtpu::data::loader_options{.seed = 6}, xtpu::data::loader_options{.seed = 5, .world = 2},
                        xtpu::data::loader_options{.seed = 5, .last = xtpu::data::last_batch::pad}}) {
    loader4 other(d, o);
    const std::string m = error_message<xtpu::config_error>([&] { other.resume(p); });
    EXPECT_TRUE(has(m, "the position (epoch 2, batch 3) comes from a loader of 40 samples, batch 4, seed 5, "
                       "shuffled, shard 0 of 1, last batch dropped; this one is " + other.describe())) << m;
    EXPECT_EQ(other.position(), (xtpu::data::loader_position{0, 0}));  // unchanged
  }
  EXPECT_EQ(same.resume({.epoch = 1, .batch = 1}).position(), (xtpu::data::loader_position{1, 1}));  // unchecked
}

TEST(Loader, RepositioningInsideAPassEndsItAndTheNextStartsThere) {
  const auto d = numbered(40);
  for (std::size_t depth : {0, 2}) {
    loader4 l(d, {.seed = 8, .prefetch = depth});
    std::size_t seen = 0;
    for (auto& b : l) {
      (void)b;
      if (++seen == 3) l.epoch(4, 7);  // the loop ends at its next step, without a hang
    }
    EXPECT_EQ(seen, 3u) << "depth " << depth;
    EXPECT_EQ(l.position(), (xtpu::data::loader_position{4, 7}));
    const auto rest = labels_of_pass(l);
    ASSERT_EQ(rest.size(), 3u);  // batches 7, 8, 9 of epoch 4
    EXPECT_EQ(rest[0][0], static_cast<std::int32_t>(l.order(4)[28]));
    EXPECT_EQ(l.position(), (xtpu::data::loader_position{5, 0}));
  }
  loader4 l(d, {});
  const std::string m = error_message<xtpu::config_error>([&] { l.epoch(0, 10); });
  EXPECT_TRUE(has(m, "batch 10 of an epoch of 10 batches")) << m;
}

TEST(Loader, MoreToPrefetchThanAnEpochHoldsAndPaddedShards) {
  const auto d = numbered(18);
  loader4 deep(d, {.seed = 1, .prefetch = 50}), plain(d, {.seed = 1, .prefetch = 0});
  EXPECT_EQ(labels_of_pass(deep), labels_of_pass(plain));
  // 18 samples in 2 shards of 9: two whole batches and one with a single real sample each
  for (std::size_t r = 0; r < 2; ++r) {
    loader4 l(d, {.seed = 1, .rank = r, .world = 2, .last = xtpu::data::last_batch::pad});
    EXPECT_EQ(l.batches_per_epoch(), 3u);
    std::vector<std::size_t> reals;
    for (auto& b : l) reals.push_back(b.real);
    ASSERT_EQ(reals.size(), 3u);
    EXPECT_EQ(reals[0], 4u);
    EXPECT_EQ(reals[1], 4u);
    EXPECT_EQ(reals[2], 1u);
  }
}

TEST(Loader, AnOutOfMemoryTransferReachesTheCallerAndTheBatchIsRetried) {
  const auto d = numbered(40);
  const xtpu::device dev("v5e", 6);
  const std::uint64_t hbm = dev.hbm_bytes();
  for (std::size_t depth : {0, 2}) {
    xtpu::device_scope on(dev);
    loader4 l(d, {.seed = 2, .prefetch = depth});
    loader4 ref(d, {.seed = 2, .prefetch = 0});
    const auto expected = labels_of_pass(ref);
    std::vector<std::vector<std::int32_t>> got;
    bool failed = false;
    try {
      for (auto& [x, y] : l) {
        const auto h = y.to_host();
        got.emplace_back(h.begin(), h.end());
        if (got.size() == 2) dev.set_hbm_bytes(8);  // no room for the next batches
      }
    } catch (const xtpu::out_of_memory& e) {
      failed = true;
      EXPECT_TRUE(has(e.what(), "v5e:6")) << e.what();
    }
    EXPECT_TRUE(failed) << "depth " << depth;
    // batches made ahead before the limit may have been delivered; the failed one is next
    EXPECT_EQ(l.position().epoch, 0u);
    EXPECT_EQ(l.position().batch, got.size());
    dev.set_hbm_bytes(hbm);
    for (auto& v : labels_of_pass(l)) got.push_back(v);
    EXPECT_EQ(got, expected) << "depth " << depth;
  }
}

// ---- CSV files --------------------------------------------------------------------------------

namespace {
std::vector<unsigned char> text_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string write_text(const std::string& name, const std::string& text) { return write_plain(name, text_bytes(text)); }
}  // namespace

TEST(Csv, AHeaderAndRowsOfNumbersAsAnXtensorArray) {
  // CRLF, a comment, a blank line, quoted cells, spaces around cells, +, exponents, nan
  const std::string text =
      "# measured 2026-11-26\r\nyear,\"share, %\",\"a \"\"b\"\"\"\r\n\r\n1970, 4.25 ,+1e2\r\n1971,\"5.5\",nan\r\n";
  for (const auto& path : {write_text("t.csv", text), write_gzip("t.csv.gz", text_bytes(text))}) {
    const auto t = xtpu::data::read_csv<float>(path);
    EXPECT_EQ(t.names, (std::vector<std::string>{"year", "share, %", "a \"b\""}));
    ASSERT_EQ(t.values.shape(0), 2u);
    ASSERT_EQ(t.values.shape(1), 3u);
    EXPECT_EQ(t.values(0, 0), 1970.0f);
    EXPECT_EQ(t.values(0, 1), 4.25f);
    EXPECT_EQ(t.values(0, 2), 100.0f);
    EXPECT_EQ(t.values(1, 1), 5.5f);
    EXPECT_TRUE(std::isnan(t.values(1, 2)));
    EXPECT_EQ(t.column("share, %"), 1u);
  }
  // no header, another delimiter, int32; values exactly as written (from_chars: correctly rounded)
  const auto i = xtpu::data::read_csv<std::int32_t>(write_text("i.csv", "1;-2;2147483647\n3;4;5"),
                                                    {.delimiter = ';', .header = false});
  EXPECT_TRUE(i.names.empty());
  EXPECT_EQ(i.values, (xt::xtensor<std::int32_t, 2>{{1, -2, 2147483647}, {3, 4, 5}}));
  const auto d = xtpu::data::read_csv<double>(write_text("d.csv", "x\n0.1\n"));
  EXPECT_EQ(d.values(0, 0), 0.1);
  // a column of a table, into a dataset
  const auto table = xtpu::data::read_csv<float>(write_text("ds.csv", "a,b,y\n1,2,3\n4,5,6\n"));
  const auto ds = xtpu::data::dataset<xtpu::tensor<float, 2>, xtpu::tensor<float>>::from_xtensor(
      xt::view(table.values, xt::all(), xt::range(0, 2)), xt::view(table.values, xt::all(), table.column("y")));
  EXPECT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds.x(1)[1], 5.0f);
  EXPECT_EQ(ds.y(1)[0], 6.0f);
}

TEST(Csv, EveryBadCellNamesTheFileLineColumnAndOffset) {
  const auto message = [](const std::string& name, const std::string& text) {
    const std::string path = write_text(name, text);
    const std::string m = error_message<xtpu::data_error>([&] { (void)xtpu::data::read_csv<float>(path); });
    EXPECT_TRUE(has(m, path)) << m;
    return m;
  };
  std::string m = message("bad1.csv", "a,b\n1,2\n3,1.5kg\n");
  EXPECT_TRUE(has(m, "line 3, column 2 (offset 10): \"1.5kg\" is not a float")) << m;
  m = message("bad2.csv", "a,b\n1,2\n3\n");
  EXPECT_TRUE(has(m, "line 3 (offset 8) has 1 cells; the header has 2")) << m;
  m = message("bad3.csv", "a,b\n1,\n");
  EXPECT_TRUE(has(m, "line 2, column 2 (offset 6) is empty (csv_options::missing gives empty cells a value)")) << m;
  m = message("bad4.csv", "a,b\n1,\"2\n");
  EXPECT_TRUE(has(m, "a quote left open at the end of line 2")) << m;
  m = message("bad5.csv", "a,b\n");
  EXPECT_TRUE(has(m, "holds no rows of values")) << m;
  m = message("bad6.csv", "a\n1e\n");
  EXPECT_TRUE(has(m, "\"1e\" is not a float")) << m;
  const std::string ints = write_text("bad7.csv", "n\n3000000000\n");
  m = error_message<xtpu::data_error>([&] { (void)xtpu::data::read_csv<std::int32_t>(ints); });
  EXPECT_TRUE(has(m, "\"3000000000\" is not a int32")) << m;  // out of range: not silently wrapped
  m = error_message<xtpu::data_error>([] { (void)xtpu::data::read_csv<float>("/no/such/file.csv"); });
  EXPECT_TRUE(has(m, "cannot open '/no/such/file.csv'")) << m;
  // an empty cell with a value for it
  const auto t = xtpu::data::read_csv<float>(write_text("gap.csv", "a,b\n1,\n"), {.missing = -1.0f});
  EXPECT_EQ(t.values(0, 1), -1.0f);
  m = error_message<xtpu::data_error>([&] { (void)t.column("c"); });
  EXPECT_TRUE(has(m, "no column \"c\"; the columns are \"a\", \"b\"")) << m;
}

// ---- MNIST-format sets -------------------------------------------------------------------------

TEST(Mnist, ImageClassificationScalesPixelsAndChecksTheCounts) {
  const std::string images = write_gzip("img.gz", small_images());
  const std::string labels = write_plain("lab", idx_bytes(0x08, {2}, {3, 7}));
  const auto d = xtpu::data::image_classification<6>(images, labels);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.x(1)[5], 11.0f / 255.0f);
  EXPECT_EQ(d.y(1)[0], 7);
  std::string m = error_message<xtpu::data_error>([&] { xtpu::data::image_classification<4>(images, labels); });
  EXPECT_TRUE(has(m, "holds images of shape (2, 2, 3): expected 4 pixels per image")) << m;
  const std::string three = write_plain("lab3", idx_bytes(0x08, {3}, {1, 2, 3}));
  m = error_message<xtpu::data_error>([&] { xtpu::data::image_classification<6>(images, three); });
  EXPECT_TRUE(has(m, "holds 3 labels in 1 dimension(s) for the 2 images of '" + images + "'")) << m;
}

TEST(Mnist, FashionMnistFromDebiansPackage) {
  const std::string dir = xtpu::data::fashion_mnist_dir();
  if (!fs::exists(dir + "/t10k-labels-idx1-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const auto test = xtpu::data::fashion_mnist(xtpu::data::split::test);
  ASSERT_EQ(test.size(), 10000u);
  std::vector<int> per_class(10);
  for (std::size_t i = 0; i < test.size(); ++i) ++per_class.at(static_cast<std::size_t>(test.y(i)[0]));
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));  // the test set is balanced
  EXPECT_EQ(test.y(0)[0], 9);                         // its first image is an ankle boot
  float lo = 1, hi = 0;
  for (std::size_t i = 0; i < 100; ++i)
    for (float v : test.x(i)) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  const std::string m = error_message<xtpu::data_error>([] { xtpu::data::fashion_mnist(xtpu::data::split::train, "/nonexistent"); });
  EXPECT_TRUE(has(m, "cannot open '/nonexistent/train-images-idx3-ubyte.gz'")) << m;
}

