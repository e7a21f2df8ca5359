// Checkpoints: safetensors read from and written for an independent peer (tests/io/
// safetensors_peer.py: Python's standard library and the published format), every truncation
// and header damage a checkpoint_error (never a crash), writes that replace the file by a
// rename, and model + optimizer checkpoints: a resumed run continues bit for bit, a model that
// does not fit is told every difference and keeps its values.
#include "files.hpp"
#include "reference.hpp"
#include <xtpu/io/checkpoint.hpp>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace xtpu_test;
using xtpu::bf16;
using xtpu::tensor;

namespace {
namespace fs = std::filesystem;


int peer(const std::string& verb, const std::string& path, bool quiet = false) {
  const std::string cmd = "python3 " XTPU_SOURCE_DIR "/tests/io/safetensors_peer.py " + verb + " '" + path + "'" +
                          (quiet ? " 2>/dev/null" : "");
  return std::system(cmd.c_str());
}

template <class T>
std::vector<T> values_of(const xtpu::io::stored_tensor& t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

/// The peer's tensors (safetensors_peer.py's EXPECTED), as xtpu writes them.
void write_peer_tensors(const std::string& path, float first_w = 0.5f) {
  const std::vector<float> w = {first_w, -1.0f, 2.25f, 0.0f, -0.0f, 1e-3f};
  const std::vector<std::uint16_t> h = {0x3F80, 0xC040, 0x7FC0, 0x0001};
  const std::int32_t n = -7;
  const bool m[3] = {true, false, true};
  const auto bytes = [](const auto* p, std::size_t n_bytes) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(p), n_bytes);
  };
  xtpu::io::write_safetensors(path,
                              {{"w", "F32", {2, 3}, bytes(w.data(), 24)},
                               {"h", "BF16", {4}, bytes(h.data(), 8)},
                               {"n", "I32", {}, bytes(&n, 4)},
                               {"m", "BOOL", {3}, bytes(m, 3)}},
                              {{"who", "xtpu"}});
}
}  // namespace

// ---- the format ---------------------------------------------------------------------------

TEST(Safetensors, ReadsAFileFromAnIndependentWriter) {
  const std::string path = scratch("from_python.safetensors").string();
  ASSERT_EQ(peer("write", path), 0);
  const auto f = xtpu::io::safetensors_file::read(path);
  EXPECT_EQ(f.metadata().at("who"), "python");
  ASSERT_EQ(f.tensors().size(), 4u);
  const auto* w = f.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(values_of<float>(*w), (std::vector<float>{0.5f, -1.0f, 2.25f, 0.0f, -0.0f, 1e-3f}));
  EXPECT_EQ(values_of<std::uint16_t>(*f.find("h")), (std::vector<std::uint16_t>{0x3F80, 0xC040, 0x7FC0, 0x0001}));
  EXPECT_EQ(f.find("n")->shape, std::vector<std::size_t>{});
  EXPECT_EQ(values_of<std::int32_t>(*f.find("n")), std::vector<std::int32_t>{-7});
  EXPECT_EQ(values_of<std::uint8_t>(*f.find("m")), (std::vector<std::uint8_t>{1, 0, 1}));
}

TEST(Safetensors, AFileXtpuWritesReadsInAnIndependentReader) {
  const std::string path = scratch("from_xtpu.safetensors").string();
  write_peer_tensors(path);
  EXPECT_EQ(peer("check", path), 0);
  write_peer_tensors(path, 0.75f);  // the check can fail
  EXPECT_NE(peer("check", path, /*quiet*/ true), 0);
}

TEST(Safetensors, EveryTruncationAndHeaderDamageIsACheckpointError) {
  const std::string path = scratch("whole.safetensors").string();
  write_peer_tensors(path);
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> whole{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string cut = scratch("cut.safetensors").string();
  for (std::size_t n = 0; n < whole.size(); ++n) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(whole.data(), static_cast<std::streamsize>(n));
    const std::string m = error_message<xtpu::checkpoint_error>([&] { xtpu::io::safetensors_file::read(cut); });
    EXPECT_TRUE(has(m, "xtpu: checkpoint '" + cut + "'")) << "a prefix of " << n << " bytes: " << m;
  }
  // each byte of the header length and the JSON replaced by each of a few values: an error
  // or a file that reads, never a crash (the sanitizer builds run this too)
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<unsigned char>(whole[static_cast<std::size_t>(i)]);
  std::size_t errors = 0, tries = 0;
  for (std::size_t at = 0; at < 8 + header; ++at) {
    for (char v : {'\0', '"', '9', '[', '}', '\xff'}) {
      std::vector<char> bad = whole;
      if (bad[at] == v) continue;
      bad[at] = v;
      ++tries;
      std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bad.data(), static_cast<std::streamsize>(bad.size()));
      try {
        (void)xtpu::io::safetensors_file::read(cut);
      } catch (const xtpu::checkpoint_error&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(2 * errors, tries);  // most are caught; the rest rename a tensor or change metadata
  const std::string m = error_message<xtpu::checkpoint_error>([&] { xtpu::io::safetensors_file::read(scratch("none").string()); });
  EXPECT_TRUE(has(m, "cannot open: No such file or directory")) << m;
  // a file of another kind says so; a cut one, that it is short
  std::ofstream(cut, std::ios::binary | std::ios::trunc) << "step,loss\n0,2.30\n1,2.15\n";
  const std::string text = error_message<xtpu::checkpoint_error>([&] { xtpu::io::safetensors_file::read(cut); });
  EXPECT_TRUE(has(text, "is not a safetensors file: its first 8 bytes are no header length")) << text;
  std::ofstream(cut, std::ios::binary | std::ios::trunc).write(whole.data(), static_cast<std::streamsize>(8 + header / 2));
  const std::string short_header = error_message<xtpu::checkpoint_error>([&] { xtpu::io::safetensors_file::read(cut); });
  EXPECT_TRUE(has(short_header, "its header length is " + std::to_string(header) + " bytes, but only " +
                                    std::to_string(header / 2) + " follow (truncated)"))
      << short_header;
}

TEST(Safetensors, SizesThatAreNotWholeNumbersOrOverflowAreErrors) {
  const std::string path = scratch("shapes.safetensors").string();
  const auto file = [&](const std::string& shape, const std::string& offsets, std::size_t data) {
    std::string header = R"({"t":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>(header.size() >> (8 * i));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << header << std::string(data, '\0');
    return error_message<xtpu::checkpoint_error>([&] { xtpu::io::safetensors_file::read(path); });
  };
  EXPECT_TRUE(has(file("[-1,-1]", "[0,4]", 4), "'t' has shape [-1,-1]: expected a list of whole numbers >= 0"));
  EXPECT_TRUE(has(file("[2.7]", "[0,8]", 8), "'t' has shape [2.7]"));
  EXPECT_TRUE(has(file("[4611686018427387904,4]", "[0,0]", 0), "'t' is F32 (4611686018427387904, 4): more bytes than the 0 of data"));
  EXPECT_TRUE(has(file("[1]", "[0,-4]", 4), "'t' has data_offsets [0,-4]"));
  EXPECT_EQ(file("[2]", "[0,8]", 8), "");
}

TEST(Safetensors, AWriteReplacesTheFileByARenameAndAFailedOneLeavesIt) {
  const std::string path = scratch("atomic.safetensors").string();
  write_peer_tensors(path);
  struct stat before{}, after{};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  write_peer_tensors(path, 0.75f);
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);  // a new file renamed over the old one, not rewritten in place
  // a write that fails (two tensors of one name) leaves the last good file and no temporary
  const float one = 1.0f;
  const auto b = std::span<const std::byte>(reinterpret_cast<const std::byte*>(&one), 4);
  const std::string m = error_message<xtpu::checkpoint_error>([&] {
    xtpu::io::write_safetensors(path, {{"a", "F32", {}, b}, {"a", "F32", {}, b}});
  });
  EXPECT_TRUE(has(m, "the name 'a' is given twice")) << m;
  EXPECT_EQ(values_of<float>(*xtpu::io::safetensors_file::read(path).find("w"))[0], 0.75f);
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_FALSE(has(e.path().filename().string(), ".tmp.")) << e.path();
  // a write whose rename fails (the target is a folder) leaves no temporary and the folder
  const std::string folder = scratch("a_folder").string();
  fs::create_directories(folder);
  EXPECT_TRUE(has(error_message<xtpu::checkpoint_error>([&] { write_peer_tensors(folder); }), "cannot rename"));
  EXPECT_TRUE(fs::is_directory(folder));
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_FALSE(has(e.path().filename().string(), ".tmp.")) << e.path();
  const std::string nowhere = scratch("no/such/dir/x.safetensors").string();
  EXPECT_TRUE(has(error_message<xtpu::checkpoint_error>([&] { xtpu::io::write_safetensors(nowhere, {{"a", "F32", {}, b}}); }),
                  "cannot create"));
}

// ---- models and optimizers ---------------------------------------------------------------------

namespace {
struct small_mlp {
  xtpu::nn::linear<4, 8, bf16> fc1;  // bf16 parameters: the optimizer keeps f32 masters
  xtpu::nn::linear<8, 3> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(xtpu::relu(xtpu::cast<float>(fc1(x))));
  }
};
struct f32_mlp {  // small_mlp in f32
  xtpu::nn::linear<4, 8> fc1;
  xtpu::nn::linear<8, 3> head;
};
struct wider_mlp {  // fc1 has another shape; head has no bias but an extra parameter
  xtpu::nn::linear<4, 6, bf16> fc1;
  xtpu::nn::parameter<float, 3, 8> head_weight;
  xtpu::nn::parameter<float, 3> scale;
};
}  // namespace
struct dropout_mlp {  // a seed stream besides the tensors
  xtpu::nn::linear<4, 8> fc1;
  xtpu::nn::dropout_module drop{.p = 0.25f};
  xtpu::nn::linear<8, 3> head;
  template <class X>
  auto operator()(const X& x) const {
    return head(drop(xtpu::relu(fc1(x))));
  }
};
struct two_dropouts {  // dropout_mlp with a second stream
  xtpu::nn::linear<4, 8> fc1;
  xtpu::nn::dropout_module drop;
  xtpu::nn::linear<8, 3> head;
  std::array<xtpu::nn::dropout_module, 1> extra;
};
BOOST_HANA_ADAPT_STRUCT(small_mlp, fc1, head);
BOOST_HANA_ADAPT_STRUCT(dropout_mlp, fc1, drop, head);
BOOST_HANA_ADAPT_STRUCT(two_dropouts, fc1, drop, head, extra);
BOOST_HANA_ADAPT_STRUCT(f32_mlp, fc1, head);
BOOST_HANA_ADAPT_STRUCT(wider_mlp, fc1, head_weight, scale);

namespace {
tensor<float, 16, 4> inputs() { return xtpu::random::normal<float, 16, 4>(11); }
tensor<std::int32_t, 16> labels() {
  return xtpu::cast<std::int32_t>(xtpu::random::uniform<float, 16>(12, 0.0f, 2.999f));
}
template <class Model, class Opt>
void train(Model& m, Opt& opt, int steps) {
  const auto x = inputs();
  const auto y = labels();
  for (int s = 0; s < steps; ++s) {
    auto loss = xtpu::nn::cross_entropy(m(x), y);
    xtpu::backward(loss);
    xtpu::optimizer_step(opt);
  }
}
template <class Model>
std::vector<std::vector<double>> values(Model& m) {
  std::vector<std::vector<double>> v;
  xtpu::nn::for_each_parameter(m, [&](const std::string&, const auto& p) { v.push_back(host(p)); });
  return v;
}
}  // namespace

TEST(Checkpoint, AResumedRunContinuesBitForBit) {
  small_mlp whole = xtpu::nn::init<small_mlp>(3);
  xtpu::optim::adamw whole_opt(whole, {.lr = 1e-2f});
  train(whole, whole_opt, 6);

  const std::string path = scratch("mlp.safetensors").string();
  {
    small_mlp first = xtpu::nn::init<small_mlp>(3);
    xtpu::optim::adamw opt(first, {.lr = 1e-2f});
    train(first, opt, 3);
    xtpu::io::save(path, first, opt, {.step = 3, .loader = {1, 2}, .user = {{"note", "three steps"}}});
  }
  const auto f = xtpu::io::safetensors_file::read(path);
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name + " " + t.dtype);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "fc1.weight BF16", "fc1.bias BF16", "head.weight F32", "head.bias F32",
                       "optimizer.fc1.weight.exp_avg F32", "optimizer.fc1.weight.exp_avg_sq F32",
                       "optimizer.fc1.weight.master F32", "optimizer.fc1.bias.exp_avg F32",
                       "optimizer.fc1.bias.exp_avg_sq F32", "optimizer.fc1.bias.master F32",
                       "optimizer.head.weight.exp_avg F32", "optimizer.head.weight.exp_avg_sq F32",
                       "optimizer.head.bias.exp_avg F32", "optimizer.head.bias.exp_avg_sq F32"}));
  EXPECT_EQ(f.metadata().at("xtpu.optimizer.step_of"), "[3,3,3,3]");

  small_mlp resumed = xtpu::nn::init<small_mlp>(99);  // other values: the file must replace them
  xtpu::optim::adamw opt(resumed, {.lr = 1e-2f});
  const auto info = xtpu::io::load(path, resumed, opt);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(info.loader, (xtpu::data::loader_position{1, 2}));
  EXPECT_EQ(info.loader.order, "");  // none was saved
  EXPECT_EQ(info.user, (std::map<std::string, std::string>{{"note", "three steps"}}));
  EXPECT_EQ(opt.steps(), 3);
  train(resumed, opt, 3);
  EXPECT_EQ(values(resumed), values(whole));

  // the model alone from the same file (the optimizer's entries are left for an optimizer):
  // the same parameters, but a fresh optimizer runs another trajectory (the check can fail)
  small_mlp cold = xtpu::nn::init<small_mlp>(99);
  EXPECT_EQ(xtpu::io::load(path, cold).step, 3);
  small_mlp three = xtpu::nn::init<small_mlp>(3);
  xtpu::optim::adamw three_opt(three, {.lr = 1e-2f});
  train(three, three_opt, 3);
  EXPECT_EQ(values(cold), values(three));
  xtpu::optim::adamw cold_opt(cold, {.lr = 1e-2f});
  train(cold, cold_opt, 3);
  EXPECT_NE(values(cold), values(whole));
}

TEST(Checkpoint, DropoutStreamsAreSavedSoAResumedRunDrawsTheSameMasks) {
  dropout_mlp whole = xtpu::nn::init<dropout_mlp>(3);
  xtpu::optim::adamw whole_opt(whole, {.lr = 1e-2f});
  train(whole, whole_opt, 6);
  const std::string path = scratch("dropout.safetensors").string();
  {
    dropout_mlp first = xtpu::nn::init<dropout_mlp>(3);
    xtpu::optim::adamw opt(first, {.lr = 1e-2f});
    train(first, opt, 3);
    xtpu::io::save(path, first, opt, {.step = 3});
    EXPECT_EQ(xtpu::io::safetensors_file::read(path).metadata().at("xtpu.rng.drop"),
              "[" + std::to_string(first.drop.random_stream()->seed()) + ",3]");  // three masks drawn
  }
  dropout_mlp resumed = xtpu::nn::init<dropout_mlp>(99);  // another seed: the file's must replace it
  xtpu::optim::adamw opt(resumed, {.lr = 1e-2f});
  xtpu::io::load(path, resumed, opt);
  train(resumed, opt, 3);
  EXPECT_EQ(values(resumed), values(whole));

  // streams are named as parameters are; they are state, not weights: a stream the file has is
  // restored, one it lacks keeps its value, and the file's others are ignored
  const auto state = [](const auto& module) {
    return std::pair{module.random_stream()->seed(), module.random_stream()->position()};
  };
  std::vector<std::string> names;
  two_dropouts two = xtpu::nn::init<two_dropouts>(4);
  xtpu::nn::for_each_stream(two, [&](const std::string& name, auto&) { names.push_back(name); });
  EXPECT_EQ(names, (std::vector<std::string>{"drop", "extra.0"}));
  const auto extra = state(two.extra[0]);
  ASSERT_NE(state(two.drop).first, state(whole.drop).first);
  xtpu::io::load(path, two);
  EXPECT_EQ(state(two.drop), (std::pair<std::uint64_t, std::uint64_t>{state(whole.drop).first, 3}));  // init(3)'s, 3 masks
  EXPECT_EQ(state(two.extra[0]), extra);
  f32_mlp plain;  // a model without dropout reads a training checkpoint
  xtpu::io::load(path, plain);
  dropout_mlp again = xtpu::nn::init<dropout_mlp>(7);
  xtpu::io::load(path, again);
  EXPECT_EQ(values(plain), values(again));

  // a stream's value must be two integers >= 0; layout 1 (before streams were saved) loads
  // and leaves them be; a layout this xtpu does not know is refused
  const std::string small = scratch("streams.safetensors").string();
  dropout_mlp d = xtpu::nn::init<dropout_mlp>(5);
  xtpu::io::save(small, d);
  const auto f = xtpu::io::safetensors_file::read(small);
  const std::vector<xtpu::io::stored_tensor> records(f.tensors().begin(), f.tensors().end());
  auto with = [&](const std::string& key, const std::string& value) {
    auto meta = f.metadata();
    meta[key] = value;
    xtpu::io::write_safetensors(small, records, meta);
  };
  for (const std::string bad : {"[1]", "[-1,2]", "[1.5,2]", "{}", "[1,2,3]", "x"}) {
    with("xtpu.rng.drop", bad);
    const std::string m = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(small, d); });
    EXPECT_TRUE(has(m, "__metadata__ 'xtpu.rng.drop' is '" + bad + "', not [seed, position]")) << m;
  }
  with("xtpu.rng.drop", "[18446744073709551615,5]");  // the whole uint64 range
  xtpu::io::load(small, d);
  EXPECT_EQ(state(d.drop), (std::pair<std::uint64_t, std::uint64_t>{18446744073709551615u, 5}));
  auto old = f.metadata();
  old.erase("xtpu.rng.drop");
  old["xtpu.checkpoint"] = "1";
  xtpu::io::write_safetensors(small, records, old);
  xtpu::io::load(small, d);
  EXPECT_EQ(state(d.drop), (std::pair<std::uint64_t, std::uint64_t>{18446744073709551615u, 5}));
  old["xtpu.checkpoint"] = "3";
  xtpu::io::write_safetensors(small, records, old);
  const std::string later = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(small, d); });
  EXPECT_TRUE(has(later, "has layout 3 ('xtpu.checkpoint'); this xtpu reads layouts 1 and 2")) << later;
}

TEST(Checkpoint, ASaveBeforeTheFirstStepOrAfterAnAssignmentResumesToo) {
  // bf16 parameters whose master copies do not exist yet (step 0), or were replaced by an
  // assignment since the optimizer's last write: the file holds the weight the next update
  // would start from, so the resumed run is the uninterrupted one
  for (const bool assign : {false, true}) {
    small_mlp whole = xtpu::nn::init<small_mlp>(3);
    xtpu::optim::adamw whole_opt(whole, {.lr = 1e-2f});
    if (assign) {
      train(whole, whole_opt, 2);
      whole.fc1.bias = xtpu::full<bf16, 8>(bf16(0.5f));
    }
    const std::string path = scratch("early.safetensors").string();
    xtpu::io::save(path, whole, whole_opt);
    small_mlp resumed = xtpu::nn::init<small_mlp>(99);
    xtpu::optim::adamw opt(resumed, {.lr = 1e-2f});
    xtpu::io::load(path, resumed, opt);
    train(whole, whole_opt, 3);
    train(resumed, opt, 3);
    EXPECT_EQ(values(resumed), values(whole)) << (assign ? "after an assignment" : "at step 0");
  }
}

TEST(Checkpoint, ASaveIsOneSyncPointWhateverItReads) {
  // before the first step every optimizer state is zeros not made yet, and fc1.bias's new
  // value is pending: the file's tensors are read after one run of all of them (when each was
  // read as it was listed, each pending one was a step of its own)
  small_mlp m = xtpu::nn::init<small_mlp>(3);
  xtpu::optim::adamw opt(m, {.lr = 1e-2f});
  m.fc1.bias = xtpu::full<bf16, 8>(bf16(0.25f));
  const auto runs = xtpu::metrics::counter("SyncPointExecutions");
  xtpu::io::save(scratch("one_sync.safetensors").string(), m, opt);
  EXPECT_EQ(xtpu::metrics::counter("SyncPointExecutions"), runs + 1);
  EXPECT_FALSE(m.fc1.bias.pending());
  small_mlp back = xtpu::nn::init<small_mlp>(99);
  xtpu::optim::adamw back_opt(back, {.lr = 1e-2f});
  xtpu::io::load(scratch("one_sync.safetensors").string(), back, back_opt);
  EXPECT_EQ(values(back), values(m));
  const auto again = xtpu::metrics::counter("SyncPointExecutions");
  xtpu::io::save(scratch("one_sync.safetensors").string(), m);  // nothing pending: no run
  EXPECT_EQ(xtpu::metrics::counter("SyncPointExecutions"), again);
}

TEST(Checkpoint, AFrozenParameterWithoutStateHasNoOptimizerEntries) {
  // fc1 frozen from the start (a LoRA base): the file holds its weights, no moments or master
  // copy for it, and names it stateless
  small_mlp whole = xtpu::nn::init<small_mlp>(3);
  xtpu::nn::requires_grad(whole.fc1, false);
  xtpu::optim::adamw whole_opt(whole, {.lr = 1e-2f});
  train(whole, whole_opt, 2);
  const std::string path = scratch("frozen.safetensors").string();
  xtpu::io::save(path, whole, whole_opt);
  {
    const auto f = xtpu::io::safetensors_file::read(path);
    EXPECT_NE(f.find("fc1.weight"), nullptr);
    EXPECT_NE(f.find("optimizer.head.weight.exp_avg"), nullptr);
    for (const char* name : {"optimizer.fc1.weight.exp_avg", "optimizer.fc1.weight.exp_avg_sq", "optimizer.fc1.weight.master",
                             "optimizer.fc1.bias.exp_avg"})
      EXPECT_EQ(f.find(name), nullptr) << name;
    EXPECT_EQ(f.metadata().at("xtpu.optimizer.stateless"), R"(["fc1.bias","fc1.weight"])");
  }
  // resumed with fc1 frozen again, and with fc1 trainable (unfrozen for a second stage: it
  // starts from no state in both runs), each run goes on bit for bit
  for (const bool unfreeze : {false, true}) {
    small_mlp ref = xtpu::nn::init<small_mlp>(3);
    xtpu::nn::requires_grad(ref.fc1, false);
    xtpu::optim::adamw ref_opt(ref, {.lr = 1e-2f});
    train(ref, ref_opt, 2);
    small_mlp resumed = xtpu::nn::init<small_mlp>(99);
    xtpu::nn::requires_grad(resumed.fc1, false);
    xtpu::optim::adamw opt(resumed, {.lr = 1e-2f});
    if (unfreeze) {
      xtpu::nn::requires_grad(ref.fc1, true);
      xtpu::nn::requires_grad(resumed.fc1, true);
    }
    xtpu::io::load(path, resumed, opt);
    train(ref, ref_opt, 3);
    train(resumed, opt, 3);
    EXPECT_EQ(values(resumed), values(ref)) << (unfreeze ? "unfrozen" : "frozen");
  }

  // trained, then frozen: it holds state, which the file keeps and a load restores even into
  // a model that freezes it, so unfreezing later goes on as the uninterrupted run
  small_mlp trained = xtpu::nn::init<small_mlp>(3);
  xtpu::optim::adamw trained_opt(trained, {.lr = 1e-2f});
  train(trained, trained_opt, 2);
  xtpu::nn::requires_grad(trained.fc1, false);
  xtpu::io::save(path, trained, trained_opt);
  EXPECT_NE(xtpu::io::safetensors_file::read(path).find("optimizer.fc1.weight.exp_avg"), nullptr);
  small_mlp back = xtpu::nn::init<small_mlp>(99);
  xtpu::nn::requires_grad(back.fc1, false);
  xtpu::optim::adamw back_opt(back, {.lr = 1e-2f});
  xtpu::io::load(path, back, back_opt);
  xtpu::nn::requires_grad(trained.fc1, true);
  xtpu::nn::requires_grad(back.fc1, true);
  train(trained, trained_opt, 3);
  train(back, back_opt, 3);
  EXPECT_EQ(values(back), values(trained));
}

TEST(Checkpoint, AFileWithoutXtpusMetadataLoadsItsTensorsAndOurKeysAreOurs) {
  // a state_dict as torch's safetensors writes it: the tensors, no __metadata__
  small_mlp a = xtpu::nn::init<small_mlp>(4);
  std::vector<std::vector<std::byte>> owned;
  std::vector<xtpu::io::stored_tensor> records;
  xtpu::nn::for_each_parameter(a, [&](const std::string& name, const auto& p) {
    using T = typename std::remove_cvref_t<decltype(p)>::value_type;
    const auto h = p.to_host();
    const auto* b = reinterpret_cast<const std::byte*>(h.data());
    owned.emplace_back(b, b + sizeof(T) * h.size());
    records.push_back({name, xtpu::io::safetensors_dtype_v<T>, {h.shape().begin(), h.shape().end()}, owned.back()});
  });
  const std::string path = scratch("plain.safetensors").string();
  xtpu::io::write_safetensors(path, records);
  small_mlp b = xtpu::nn::init<small_mlp>(5);
  const auto info = xtpu::io::load(path, b);
  EXPECT_EQ(info.step, 0);
  EXPECT_EQ(values(b), values(a));
  const std::string m = error_message<xtpu::checkpoint_error>(
      [&] { xtpu::io::save(path, a, {.user = {{"xtpu.step", "9"}}}); });
  EXPECT_TRUE(has(m, "the user key 'xtpu.step' starts with 'xtpu.'")) << m;
  // xtpu's keys without the layout key (one byte of its name damaged): not a foreign file — an
  // error, and nothing changes
  {
    xtpu::io::save(path, a, {.step = 7});
    const auto f = xtpu::io::safetensors_file::read(path);
    auto meta = f.metadata();
    meta["xtpu#checkpoint"] = meta.at("xtpu.checkpoint");
    meta.erase("xtpu.checkpoint");
    xtpu::io::write_safetensors(path, {f.tensors().begin(), f.tensors().end()}, meta);
    small_mlp d = xtpu::nn::init<small_mlp>(7);
    const auto kept = values(d);
    const std::string e = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, d); });
    EXPECT_TRUE(has(e, "has xtpu's key 'xtpu.loader.batch' but no 'xtpu.checkpoint' (its layout): a damaged checkpoint")) << e;
    EXPECT_EQ(values(d), kept);
  }
  // an optimizer of another kind: its state's names differ, and nothing changes
  xtpu::optim::sgd sgd(a, {.lr = 0.1f, .momentum = 0.9f});
  train(a, sgd, 1);
  xtpu::io::save(path, a, sgd);
  small_mlp c = xtpu::nn::init<small_mlp>(6);
  const auto before = values(c);
  xtpu::optim::adamw adamw(c, {.lr = 1e-2f});
  const std::string d = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, c, adamw); });
  EXPECT_TRUE(has(d, "missing optimizer.fc1.weight.exp_avg")) << d;
  EXPECT_TRUE(has(d, "unexpected optimizer.fc1.weight.momentum_buffer")) << d;
  EXPECT_EQ(values(c), before);
}

TEST(Checkpoint, AModelThatDoesNotFitIsToldEveryDifferenceAndKeepsItsValues) {
  const std::string path = scratch("fit.safetensors").string();
  xtpu::io::save(path, xtpu::nn::init<small_mlp>(1));
  wider_mlp other;
  other.scale = xtpu::full<float, 3>(2.0f);
  const auto before = host(other.scale);
  const std::string m = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, other); });
  EXPECT_TRUE(has(m, "xtpu: checkpoint '" + path + "': does not fit: ")) << m;
  EXPECT_TRUE(has(m, "fc1.weight is BF16 (8, 4) in the file but BF16 (6, 4) in the model")) << m;
  EXPECT_TRUE(has(m, "fc1.bias is BF16 (8) in the file but BF16 (6) in the model")) << m;
  EXPECT_TRUE(has(m, "missing head_weight; missing scale")) << m;
  EXPECT_TRUE(has(m, "unexpected head.weight; unexpected head.bias")) << m;
  EXPECT_EQ(host(other.scale), before);
  // a dtype that differs is named too, and the model keeps its values
  f32_mlp f32 = xtpu::nn::init<f32_mlp>(2);
  const auto w = host(f32.fc1.weight);
  const std::string d = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, f32); });
  EXPECT_TRUE(has(d, "does not fit: fc1.weight is BF16 (8, 4) in the file but F32 (8, 4) in the model; fc1.bias is "
                     "BF16 (8) in the file but F32 (8) in the model")) << d;
  EXPECT_FALSE(has(d, "head")) << d;
  EXPECT_EQ(host(f32.fc1.weight), w);
}

TEST(Checkpoint, SgdMomentumAndAnF32ModelRoundTrip) {
  small_mlp a = xtpu::nn::init<small_mlp>(5);
  xtpu::optim::sgd opt(a, {.lr = 0.1f, .momentum = 0.9f});
  train(a, opt, 2);
  const std::string path = scratch("sgd.safetensors").string();
  xtpu::io::save(path, a, opt, {.step = 2});
  const auto f = xtpu::io::safetensors_file::read(path);
  EXPECT_NE(f.find("optimizer.head.weight.momentum_buffer"), nullptr);
  EXPECT_EQ(f.metadata().count("xtpu.optimizer.step_of"), 0u);  // SGD counts no steps
  small_mlp b = xtpu::nn::init<small_mlp>(6);
  xtpu::optim::sgd opt_b(b, {.lr = 0.1f, .momentum = 0.9f});
  EXPECT_EQ(xtpu::io::load(path, b, opt_b).step, 2);
  EXPECT_EQ(values(b), values(a));
  train(a, opt, 2);
  train(b, opt_b, 2);
  EXPECT_EQ(values(b), values(a));
  // the model alone, with an info held in a variable (not taken for an optimizer)
  xtpu::io::checkpoint_info info{.step = 7, .loader = {.epoch = 2, .batch = 5, .order = "40 samples, batch 4"}};
  info.user["run"] = "sgd";
  xtpu::io::save(path, a, info);
  small_mlp c = xtpu::nn::init<small_mlp>(7);
  const auto got = xtpu::io::load(path, c);
  EXPECT_EQ(got.step, 7);
  EXPECT_EQ(got.user.at("run"), "sgd");
  EXPECT_EQ(got.loader, (xtpu::data::loader_position{2, 5}));
  EXPECT_EQ(got.loader.order, "40 samples, batch 4");  // for loader::resume to check
  EXPECT_EQ(values(c), values(a));
}


TEST(Checkpoint, TheOptimizersOptionsAndGroupsAreSavedAndRestored) {
  small_mlp a = xtpu::nn::init<small_mlp>(8);
  xtpu::optim::adamw opt(a, {.lr = 0.01f, .beta2 = 0.99f, .weight_decay = 0.05f});
  EXPECT_EQ(opt.no_decay([](std::string_view n) { return n.ends_with("bias"); }), 2u);
  EXPECT_EQ(opt.lr_scale([](std::string_view n) { return n.starts_with("head"); }, 0.5f), 2u);
  train(a, opt, 2);
  const std::string path = scratch("groups.safetensors").string();
  xtpu::io::save(path, a, opt, {.step = 2});
  const auto f = xtpu::io::safetensors_file::read(path);
  // each float as its shortest text, read back as the same float
  EXPECT_EQ(f.metadata().at("xtpu.optimizer.options"),
            R"({"beta1":0.9,"beta2":0.99,"eps":1e-08,"lr":0.01,"master_weights":true,"weight_decay":0.05})");
  EXPECT_EQ(f.metadata().at("xtpu.optimizer.no_decay"), R"(["fc1.bias","head.bias"])");
  EXPECT_EQ(f.metadata().at("xtpu.optimizer.lr_scale"), R"({"head.bias":0.5,"head.weight":0.5})");
  EXPECT_EQ(f.metadata().at("xtpu.optimizer.kind"), "adamw");

  // a fresh optimizer with the defaults and no groups gets the file's (as torch's
  // load_state_dict restores param_groups) and goes on bit for bit
  small_mlp b = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::adamw opt_b(b);
  xtpu::io::load(path, b, opt_b);
  EXPECT_EQ(opt_b.options().lr, 0.01f);
  EXPECT_EQ(opt_b.options().beta2, 0.99f);
  EXPECT_EQ(opt_b.options().weight_decay, 0.05f);
  EXPECT_EQ(opt_b.groups().decays, (std::vector<char>{1, 0, 1, 0}));
  EXPECT_EQ(opt_b.groups().lr_factors, (std::vector<float>{1.0f, 1.0f, 0.5f, 0.5f}));
  train(a, opt, 2);
  train(b, opt_b, 2);
  EXPECT_EQ(values(b), values(a));

  // without the groups the same file resumes to another trajectory (the check can fail)
  small_mlp c = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::adamw opt_c(c);
  xtpu::io::load(path, c, opt_c);
  opt_c.set_groups(xtpu::optim::parameter_groups(4));
  train(c, opt_c, 2);
  EXPECT_NE(values(c), values(b));

  // set_groups takes groups whole, checked as lr_scale checks a factor
  auto nan_factor = xtpu::optim::parameter_groups(4);
  nan_factor.lr_factors[1] = NAN;
  EXPECT_TRUE(has(error_message<xtpu::error>([&] { opt_c.set_groups(nan_factor); }),
                  "xtpu: optim: a factor given to set_groups must be finite and >= 0, got nan"));
  EXPECT_TRUE(has(error_message<xtpu::error>([&] { opt_c.set_groups(xtpu::optim::parameter_groups(3)); }),
                  "set_groups needs one entry per parameter (4), got 3 decays and 3 factors"));
  EXPECT_EQ(opt_c.groups().lr_factors, (std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}));

  // a file written before options and groups were saved leaves the optimizer's as they are
  auto meta = f.metadata();
  for (const char* k : {"xtpu.optimizer.kind", "xtpu.optimizer.options", "xtpu.optimizer.no_decay", "xtpu.optimizer.lr_scale"})
    meta.erase(k);
  const std::string older = scratch("older.safetensors").string();
  xtpu::io::write_safetensors(older, f.tensors(), meta);
  small_mlp d = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::adamw opt_d(d, {.lr = 0.25f});
  opt_d.lr_scale([](std::string_view n) { return n == "fc1.weight"; }, 2.0f);
  xtpu::io::load(older, d, opt_d);
  EXPECT_EQ(opt_d.options().lr, 0.25f);
  EXPECT_EQ(opt_d.groups().lr_factors, (std::vector<float>{2.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(opt_d.groups().decays, (std::vector<char>{1, 1, 1, 1}));
}

TEST(Checkpoint, OptionsOrGroupsThatDoNotFitAreToldAndChangeNothing) {
  small_mlp a = xtpu::nn::init<small_mlp>(8);
  xtpu::optim::adamw opt(a);
  train(a, opt, 1);
  const std::string path = scratch("adamw.safetensors").string();
  xtpu::io::save(path, a, opt);
  const auto f = xtpu::io::safetensors_file::read(path);

  // another optimizer's options: each key told, next to the state it lacks
  small_mlp b = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::sgd sgd(b, {.lr = 0.5f});
  const auto before = values(b);
  const std::string m = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, b, sgd); });
  EXPECT_TRUE(has(m, "missing optimizer option momentum; missing optimizer option dampening")) << m;
  EXPECT_TRUE(has(m, "missing optimizer option nesterov; unexpected optimizer option beta1; unexpected optimizer "
                     "option beta2; unexpected optimizer option eps")) << m;
  EXPECT_TRUE(has(m, "unexpected optimizer.fc1.weight.exp_avg")) << m;
  EXPECT_TRUE(has(m, "the file's optimizer is adamw, this one sgd")) << m;
  EXPECT_EQ(sgd.options().lr, 0.5f);
  EXPECT_EQ(values(b), before);
  // Adam's options have AdamW's keys and state, not their meaning (weight decay): the kind tells
  xtpu::optim::adam adam(b, {.weight_decay = 0.25f});
  const std::string k = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, b, adam); });
  EXPECT_TRUE(has(k, "does not fit: the file's optimizer is adamw, this one adam")) << k;
  EXPECT_EQ(adam.options().weight_decay, 0.25f);
  // options and groups that fit stay unapplied when a tensor does not
  f32_mlp f32 = xtpu::nn::init<f32_mlp>(2);
  xtpu::optim::adamw f32_opt(f32, {.lr = 0.75f});
  f32_opt.lr_scale([](std::string_view n) { return n == "head.bias"; }, 3.0f);
  const std::string t = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, f32, f32_opt); });
  EXPECT_TRUE(has(t, "fc1.weight is BF16 (8, 4) in the file but F32 (8, 4) in the model")) << t;
  EXPECT_EQ(f32_opt.options().lr, 0.75f);
  EXPECT_EQ(f32_opt.groups().lr_factors, (std::vector<float>{1.0f, 1.0f, 1.0f, 3.0f}));

  // damaged values: every one named, and nothing of the model or optimizer changes
  auto meta = f.metadata();
  meta["xtpu.optimizer.options"] = R"({"beta1":1.5,"beta2":0.999,"eps":-1e-08,"lr":true,"master_weights":1,"weight_decay":0.01})";
  meta["xtpu.optimizer.no_decay"] = R"(["fc9.bias",3])";
  meta["xtpu.optimizer.lr_scale"] = R"({"head.weight":-1,"fc1.bias":"x","nope":2})";
  const std::string bad = scratch("bad_groups.safetensors").string();
  xtpu::io::write_safetensors(bad, f.tensors(), meta);
  small_mlp c = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::adamw opt_c(c, {.lr = 0.125f});
  opt_c.no_decay([](std::string_view n) { return n == "head.weight"; });
  const auto c_before = values(c);
  const std::string d = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(bad, c, opt_c); });
  EXPECT_TRUE(has(d, "does not fit: optimizer option lr is true in the file, not a number; optimizer option beta1 is "
                     "1.5 in the file, not in [0, 1); optimizer option eps is -1e-08 in the file, not finite and >= 0; "
                     "optimizer option master_weights is 1 in the file, not a bool; unexpected no_decay parameter \"fc9.bias\"; "
                     "unexpected no_decay parameter 3; lr_scale of \"fc1.bias\" is \"x\" in the file, not a factor "
                     "lr_scale takes (finite and >= 0); lr_scale of \"head.weight\" is -1 in the file, not a factor "
                     "lr_scale takes (finite and >= 0); unexpected lr_scale parameter \"nope\""))
      << d;
  EXPECT_EQ(opt_c.options().lr, 0.125f);
  EXPECT_EQ(opt_c.groups().decays, (std::vector<char>{1, 1, 0, 1}));
  EXPECT_EQ(values(c), c_before);
  // metadata that is not JSON of the right kind is a damaged file
  meta = f.metadata();
  meta["xtpu.optimizer.lr_scale"] = "[1, 2";
  xtpu::io::write_safetensors(bad, f.tensors(), meta);
  const std::string e = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(bad, c, opt_c); });
  EXPECT_TRUE(has(e, "__metadata__ 'xtpu.optimizer.lr_scale' is '[1, 2', not JSON: [json.exception.parse_error")) << e;
  meta["xtpu.optimizer.lr_scale"] = "[1, 2]";
  xtpu::io::write_safetensors(bad, f.tensors(), meta);
  const std::string l = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(bad, c, opt_c); });
  EXPECT_TRUE(has(l, "__metadata__ 'xtpu.optimizer.lr_scale' is '[1, 2]', not a JSON object")) << l;
  // an option JSON cannot hold fails the save, and the file it would have replaced stays
  opt.options().weight_decay = std::numeric_limits<float>::infinity();
  const std::string w = error_message<xtpu::checkpoint_error>([&] { xtpu::io::save(path, a, opt); });
  EXPECT_TRUE(has(w, "the optimizer option weight_decay is inf, which a checkpoint cannot hold")) << w;
  EXPECT_EQ(xtpu::io::safetensors_file::read(path).metadata().at("xtpu.optimizer.options"),
            f.metadata().at("xtpu.optimizer.options"));
  // and so does one a load would refuse (a step too)
  opt.options().weight_decay = 0.01f;
  opt.options().beta2 = 1.0f;
  const std::string r = error_message<xtpu::checkpoint_error>([&] { xtpu::io::save(path, a, opt); });
  EXPECT_TRUE(has(r, "the optimizer option beta2 is 1.000000, not in [0, 1) (a load would refuse it)")) << r;
  EXPECT_EQ(xtpu::io::safetensors_file::read(path).metadata().at("xtpu.optimizer.options"),
            f.metadata().at("xtpu.optimizer.options"));
}

TEST(Checkpoint, ParamGroupValuesAreSavedRestoredAndChecked) {
  small_mlp a = xtpu::nn::init<small_mlp>(8);
  xtpu::optim::sgd opt(a, {.lr = 0.05f, .momentum = 0.9f});
  EXPECT_EQ(opt.param_group([](std::string_view n) { return n.starts_with("head"); }, {.momentum = 0.5f, .nesterov = true}), 2u);
  train(a, opt, 2);
  const std::string path = scratch("overrides.safetensors").string();
  xtpu::io::save(path, a, opt);
  const auto f = xtpu::io::safetensors_file::read(path);
  EXPECT_EQ(f.metadata().at("xtpu.optimizer.overrides"),
            R"({"head.bias":{"momentum":0.5,"nesterov":true},"head.weight":{"momentum":0.5,"nesterov":true}})");

  // a fresh optimizer gets the file's values (torch's param_groups) and goes on bit for bit
  small_mlp b = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::sgd opt_b(b);
  opt_b.param_group([](std::string_view n) { return n == "fc1.bias"; }, {.dampening = 0.25f});  // replaced by the file's
  xtpu::io::load(path, b, opt_b);
  EXPECT_FALSE(opt_b.overrides()[1].dampening.has_value());
  EXPECT_EQ(opt_b.overrides()[2].momentum, 0.5f);
  EXPECT_EQ(opt_b.overrides()[3].nesterov, true);
  EXPECT_FALSE(opt_b.overrides()[0].momentum.has_value());
  train(a, opt, 2);
  train(b, opt_b, 2);
  EXPECT_EQ(values(b), values(a));
  // without the values the same file resumes to another trajectory (the check can fail)
  small_mlp c = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::sgd opt_c(c);
  xtpu::io::load(path, c, opt_c);
  opt_c.set_overrides(std::vector<xtpu::optim::sgd_overrides>(4));
  train(c, opt_c, 2);
  EXPECT_NE(values(c), values(b));

  // damaged values: every one named, and nothing of the model or optimizer changes
  auto meta = f.metadata();
  meta["xtpu.optimizer.overrides"] =
      R"({"head.bias":{"momentum":-1,"nesterov":1,"beta1":0.5},"nope":{"momentum":0.5},"fc1.bias":3})";
  const std::string bad = scratch("bad_overrides.safetensors").string();
  xtpu::io::write_safetensors(bad, f.tensors(), meta);
  small_mlp d = xtpu::nn::init<small_mlp>(9);
  xtpu::optim::sgd opt_d(d);
  opt_d.param_group([](std::string_view n) { return n == "fc1.weight"; }, {.momentum = 0.75f});
  const auto d_before = values(d);
  const std::string m = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(bad, d, opt_d); });
  EXPECT_TRUE(has(m, "param_group values of \"fc1.bias\" are 3 in the file, not a JSON object; unexpected param_group "
                     "value \"beta1\" of \"head.bias\"; param_group's momentum of \"head.bias\" is -1 in the file, not a "
                     "value param_group takes (finite and >= 0); param_group's nesterov of \"head.bias\" is 1 in the "
                     "file, not a bool; unexpected param_group parameter \"nope\""))
      << m;
  EXPECT_EQ(opt_d.overrides()[0].momentum, 0.75f);
  EXPECT_EQ(values(d), d_before);
  // a number's field given a bool or a text is told; a whole number is a number
  meta = f.metadata();
  meta["xtpu.optimizer.overrides"] = R"({"fc1.weight":{"momentum":true,"dampening":"x","weight_decay":1}})";
  xtpu::io::write_safetensors(bad, f.tensors(), meta);
  const std::string t = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(bad, d, opt_d); });
  EXPECT_TRUE(has(t, "does not fit: param_group's dampening of \"fc1.weight\" is \"x\" in the file, not a value "
                     "param_group takes (finite and >= 0); param_group's momentum of \"fc1.weight\" is true in the "
                     "file, not a value param_group takes (finite and >= 0)"))
      << t;
  EXPECT_FALSE(has(t, "weight_decay")) << t;
  EXPECT_EQ(opt_d.overrides()[0].momentum, 0.75f);
  meta["xtpu.optimizer.overrides"] = R"({"fc1.weight":{"weight_decay":1}})";
  xtpu::io::write_safetensors(bad, f.tensors(), meta);
  xtpu::io::load(bad, d, opt_d);
  EXPECT_EQ(opt_d.overrides()[0].weight_decay, 1.0f);
  EXPECT_FALSE(opt_d.overrides()[0].momentum.has_value());  // the file's values replace all
  // values that fit stay unapplied when a tensor does not
  f32_mlp e = xtpu::nn::init<f32_mlp>(2);
  xtpu::optim::sgd opt_e(e);
  opt_e.param_group([](std::string_view n) { return n == "fc1.bias"; }, {.momentum = 0.25f});
  const std::string u = error_message<xtpu::checkpoint_error>([&] { xtpu::io::load(path, e, opt_e); });
  EXPECT_TRUE(has(u, "fc1.weight is BF16 (8, 4) in the file but F32 (8, 4) in the model")) << u;
  EXPECT_EQ(opt_e.overrides()[1].momentum, 0.25f);
  EXPECT_FALSE(opt_e.overrides()[2].momentum.has_value());
  // a file written before param_group's values were saved leaves the optimizer's as they are
  meta = f.metadata();
  meta.erase("xtpu.optimizer.overrides");
  const std::string older = scratch("older_overrides.safetensors").string();
  xtpu::io::write_safetensors(older, f.tensors(), meta);
  xtpu::io::load(older, d, opt_d);
  EXPECT_EQ(opt_d.overrides()[0].weight_decay, 1.0f);  // what the last load gave it
}
