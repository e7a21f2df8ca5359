// xtpu/io/checkpoint.hpp — a model (and its optimizer, and where training was) in a safetensors file.
//
// Provides: io::save(path, model[, opt], info) (what is pending runs as one step, counted at
// the caller's line) and io::load(path, model[, opt]) -> info;
// checkpoint_info (the training step, the loader's position, the user's own strings);
// io::optimizer (what save and load take as an optimizer).
// Layout: each parameter under its reflection name ("fc1.weight", nn::parameter_names), in
// its own dtype (F32 or BF16); with an optimizer, each state tensor under "optimizer." + its
// for_each_state name ("optimizer.fc1.weight.exp_avg", F32), and in __metadata__ the format
// ("xtpu.checkpoint": "2"), "xtpu.step", "xtpu.loader.epoch", "xtpu.loader.batch",
// "xtpu.loader.order" (what loader::describe() said, for loader::resume to check), the
// optimizer's step counters ("xtpu.optimizer.steps", and per parameter
// "xtpu.optimizer.step_of" as a JSON list, for Adam's bias correction), its kind
// ("xtpu.optimizer.kind": "sgd", "adam", "adamw"), its options ("xtpu.optimizer.options":
// {"lr": 0.01, ...}, each float as a text that reads back as the same float) and param
// groups ("xtpu.optimizer.no_decay": the names without weight decay; "xtpu.optimizer.lr_scale":
// {name: factor} where the factor is not 1; "xtpu.optimizer.overrides": {name: {"momentum":
// 0.5}}, param_group's values, for the parameters that have any), each seed stream of
// the model ("xtpu.rng." + its nn::for_each_stream name: "[seed, position]", a dropout
// module's), and the user's keys as given. xtpu's random numbers are counter-based (a seed and
// an index, nothing hidden), so the seeds, their streams' positions and the step are all the
// random state there is. A run resumed from a checkpoint continues bit for bit (tested, with
// dropout).
// Rule: load reads and checks the whole file first — every name the model (and optimizer)
// has, with its dtype and shape, and no name it lacks — and changes nothing unless all fit.
// Loading a model alone leaves a file's "optimizer." entries unread (a training checkpoint
// serves inference, or a teacher). A frozen parameter without optimizer state (a LoRA base,
// a teacher: opt.holds_state(i) false) has no "optimizer." entries; it is listed in
// "xtpu.optimizer.stateless" (a JSON list of names), and load expects none for it — and keeps
// what the loading optimizer has for it. A file without xtpu's metadata (a state_dict written by
// torch or safetensors with the same names) loads its tensors; its info is all zeros. Every
// value is copied to the device before the first assignment, so an out_of_memory while loading
// changes nothing (for that moment the old and new values are both held). Loading with an
// optimizer restores the options and groups the file has, as torch's load_state_dict restores
// param_groups (set an option after load to change it); a file written before they were saved
// (2026-12-06), or before param_group's values were ("xtpu.optimizer.overrides"), leaves the
// optimizer's as they are.
// Errors: checkpoint_error — safetensors_file's; a user key starting with "xtpu."; a layout
// other than 1 or 2 (1: written before seed streams were saved); xtpu's keys in a file without
// a layout key (a damaged checkpoint, not a foreign file); a stream's value that is not
// two integers >= 0; options or groups that are not JSON of the right kind (object, list);
// saving an option that is infinite or NaN (JSON has no such number: nothing is written, so a
// run whose rate went NaN keeps its last good checkpoint) or out of its range (one a load
// would refuse: optim::parameter_groups::valid_value); and one message
// listing every difference (another kind of optimizer, an option missing, unexpected, of
// another type or out of its range, a group's name the model lacks, a factor lr_scale refuses, a param_group
// value unknown, of another type or refused among them):
// `missing fc2.bias; fc1.weight is F32 (512, 784) in the file but BF16 (512, 784) in the
// model; unexpected head.scale`. Seed streams are state, not weights: each stream of the model
// the file has is restored, one it lacks keeps its value, and the file's others are ignored
// (a training checkpoint serves a model without dropout).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "xtpu/data/loader.hpp"
#include "xtpu/error.hpp"
#include "xtpu/io/safetensors.hpp"
#include "xtpu/lazy/tensor.hpp"
#include "xtpu/nn/module.hpp"
#include "xtpu/source_location.hpp"

namespace xtpu::io {

/// Where training was: saved with the tensors, returned by load.
struct checkpoint_info {
  std::int64_t step = 0;
  data::loader_position loader{};
  std::map<std::string, std::string> user{};  // the caller's own keys (not starting with "xtpu.")
};

namespace detail {
inline constexpr const char* optimizer_prefix = "optimizer.";
inline constexpr const char* stream_prefix = "xtpu.rng.";

template <class T, std::size_t... D>
std::vector<std::size_t> shape_of(const tensor<T, D...>&) {
  return {D...};
}

/// The tensors a file will hold: add() keeps a handle to each (its value shared, nothing
/// read), read(where) copies them all to the host at the caller's line: the first read runs
/// what is pending (the zeros of optimizer state not made yet among it) as one step, the
/// others find it done. Then `records` point into `owned`.
struct staged {
  staged() = default;
  staged(const staged&) = delete;  // reads holds `this`
  staged& operator=(const staged&) = delete;
  std::vector<std::vector<std::byte>> owned;
  std::vector<stored_tensor> records;
  std::vector<std::function<void(const xtpu::source_location&)>> reads;
  template <class T, std::size_t... D>
  void add(const std::string& name, const tensor<T, D...>& value) {
    reads.emplace_back([this, name, t = tensor<T, D...>(value)](const xtpu::source_location& where) {
      const auto h = t.to_host(where);
      const auto* p = reinterpret_cast<const std::byte*>(h.data());
      owned.emplace_back(p, p + sizeof(T) * tensor<T, D...>::size);
      records.push_back({name, safetensors_dtype_v<T>, {D...}, owned.back()});
    });
  }
  void read(const xtpu::source_location& where) {
    owned.reserve(reads.size());  // (records' spans point into the inner vectors, which a move keeps)
    for (auto& r : reads) r(where);
    reads.clear();
  }
};

/// Checks one expected tensor against the file; the difference, if any, joins `diffs`.
template <class T, std::size_t... D>
void check_entry(const safetensors_file& f, const std::string& name, std::vector<std::string>& diffs) {
  const stored_tensor* s = f.find(name);
  const std::vector<std::size_t> shape{D...};
  if (s == nullptr) {
    diffs.push_back("missing " + name);
  } else if (s->dtype != safetensors_dtype_v<T> || s->shape != shape) {
    diffs.push_back(name + " is " + s->dtype + " " + xtpu::detail::shape_text(s->shape) + " in the file but " +
                    safetensors_dtype_v<T> + " " + xtpu::detail::shape_text(shape) + " in the model");
  }
}

/// The value of a checked entry, as a tensor.
template <class Tensor>
Tensor value_of(const safetensors_file& f, const std::string& name) {
  const stored_tensor& s = *f.find(name);
  return [&]<class T, std::size_t... D>(const tensor<T, D...>*) {
    std::vector<T> v(tensor<T, D...>::size);
    std::memcpy(v.data(), s.bytes.data(), s.bytes.size());
    return from_host<T, D...>(std::span<const T>(v));
  }(static_cast<const typename Tensor::tensor_type*>(nullptr));
}

template <class Opt>
concept counts_steps = requires(Opt& o) { o.step_of(std::size_t{0}); };
/// An optimizer that names its kind ("adamw"), one whose options name their fields (optim's
/// options().for_each) and one with param groups (optim::parameter_groups: per parameter,
/// decay on or off and a rate factor, set whole by set_groups).
template <class Opt>
concept has_kind = requires { std::string_view(Opt::kind); };
template <class Opt>
concept has_options = requires(Opt& o) { o.options().for_each([](const char*, auto&) {}); };
template <class Opt>
concept has_groups = requires(Opt& o, float f) {
  { o.groups().decays[0] } -> std::convertible_to<bool>;
  { o.groups().lr_factors[0] } -> std::convertible_to<float>;
  { o.groups().valid_value(std::string_view(), f) } -> std::convertible_to<bool>;
  std::string(o.groups().value_rule(std::string_view()));
  o.set_groups(o.groups());
};

/// The ranges of opt's options (its parameter_groups' valid_value), or none (void) for an
/// optimizer without groups: what options_text and read_options check a value against.
template <class Opt>
auto rules_of(Opt* opt) noexcept {
  if constexpr (has_groups<Opt>) return &opt->groups();
  else return static_cast<const void*>(nullptr);
}

/// JSON whose numbers are float: an option is written as a float's text ("0.01", grisu2's:
/// enough digits to read back as that float, bit for bit) and read back with strtof.
using json_f32 = nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t, std::uint64_t, float>;

/// A metadata value as JSON of the kind it must be (an object or a list); a damaged one fails
/// the load with the parser's reason.
inline json_f32 parsed_json(const std::string& path, const std::string& key, const std::string& text, bool object) {
  json_f32 j;
  try {
    j = json_f32::parse(text);
  } catch (const nlohmann::json::exception& e) {
    io::detail::fail(path, "__metadata__ '" + key + "' is '" + text + "', not JSON: " + e.what());
  }
  if (object ? !j.is_object() : !j.is_array())
    io::detail::fail(path, "__metadata__ '" + key + "' is '" + text + "', not a JSON " + (object ? "object" : "list"));
  return j;
}

/// The optimizer's options as "xtpu.optimizer.options" holds them: {"lr": 0.01, ...}; an
/// option that is infinite or NaN (which JSON cannot hold), or out of the range `rules`
/// (rules_of: the optimizer's parameter_groups, or none) gives its key — what a load would refuse —
/// fails the save, before anything is read or written.
template <class Options, class Rules>
std::string options_text(const std::string& path, Options o, const Rules* rules) {  // (o a copy: for_each hands out references)
  json_f32 j = json_f32::object();
  o.for_each([&](const char* key, const auto& v) {
    if constexpr (std::is_floating_point_v<std::remove_cvref_t<decltype(v)>>) {
      if (!std::isfinite(v))
        io::detail::fail(path, std::string("the optimizer option ") + key + " is " + std::to_string(v) +
                                   ", which a checkpoint cannot hold (options are saved as JSON numbers)");
      if constexpr (!std::is_void_v<Rules>)
        if (!rules->valid_value(key, v))
          io::detail::fail(path, std::string("the optimizer option ") + key + " is " + std::to_string(v) + ", not " +
                                     std::string(rules->value_rule(key)) + " (a load would refuse it)");
    }
    j[key] = v;
  });
  return j.dump();
}
/// Reads "xtpu.optimizer.options" into o (a copy of the optimizer's): every key o has, of its
/// type (a bool, or a number — one that `rules`, rules_of's, takes for that key, when there
/// are rules), and no other; each difference joins diffs.
template <class Options, class Rules>
void read_options(const std::string& path, const std::string& text, Options& o, std::vector<std::string>& diffs,
                  const Rules* rules) {
  const json_f32 j = parsed_json(path, "xtpu.optimizer.options", text, true);
  std::set<std::string> known;
  o.for_each([&](const char* key, auto& v) {
    known.insert(key);
    const auto it = j.find(key);
    if (it == j.end()) return diffs.push_back(std::string("missing optimizer option ") + key);
    constexpr bool flag = std::is_same_v<std::remove_cvref_t<decltype(v)>, bool>;
    if (flag ? !it->is_boolean() : !it->is_number())
      return diffs.push_back(std::string("optimizer option ") + key + " is " + it->dump() + " in the file, not a " +
                             (flag ? "bool" : "number"));
    if constexpr (!flag && !std::is_void_v<Rules>)
      if (!rules->valid_value(key, it->template get<float>()))
        return diffs.push_back(std::string("optimizer option ") + key + " is " + it->dump() + " in the file, not " +
                               std::string(rules->value_rule(key)));
    v = it->template get<std::remove_cvref_t<decltype(v)>>();
  });
  for (const auto& item : j.items())
    if (!known.count(item.key())) diffs.push_back("unexpected optimizer option " + item.key());
}

/// The index of a parameter a group's entry names: a JSON string that is one of the model's
/// names (declaration order), else nothing.
class name_index {
 public:
  explicit name_index(const std::vector<std::string>& names) {
    for (std::size_t i = 0; i < names.size(); ++i) index_.emplace(names[i], i);
  }
  std::optional<std::size_t> operator()(const json_f32& name) const {
    if (!name.is_string()) return std::nullopt;
    const auto it = index_.find(name.template get<std::string>());
    return it == index_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  }

 private:
  std::map<std::string, std::size_t> index_;
};

/// The param groups as "xtpu.optimizer.no_decay" (the names without weight decay, a JSON list)
/// and "xtpu.optimizer.lr_scale" (each name whose rate factor is not 1, with it) hold them.
template <class Groups>
std::pair<std::string, std::string> groups_text(const std::vector<std::string>& names, const Groups& g) {
  json_f32 no_decay = json_f32::array(), scaled = json_f32::object();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!g.decays[i]) no_decay.push_back(names[i]);
    if (g.lr_factors[i] != 1.0f) scaled[names[i]] = g.lr_factors[i];
  }
  return {no_decay.dump(), scaled.dump()};
}
/// Reads the file's groups (those of its two keys it has) into g (a copy of the optimizer's):
/// a key the file has replaces that choice for every parameter; each name must be one of the
/// model's and each factor one lr_scale takes; differences join diffs.
template <class Groups>
void read_groups(const std::string& path, const std::map<std::string, std::string>& meta,
                 const std::vector<std::string>& names, Groups& g, std::vector<std::string>& diffs) {
  const name_index parameter(names);
  if (const auto it = meta.find("xtpu.optimizer.no_decay"); it != meta.end()) {
    std::fill(g.decays.begin(), g.decays.end(), 1);
    for (const auto& name : parsed_json(path, it->first, it->second, false)) {
      if (const auto i = parameter(name)) g.decays[*i] = 0;
      else diffs.push_back("unexpected no_decay parameter " + name.dump());
    }
  }
  if (const auto it = meta.find("xtpu.optimizer.lr_scale"); it != meta.end()) {
    std::fill(g.lr_factors.begin(), g.lr_factors.end(), 1.0f);
    const json_f32 factors = parsed_json(path, it->first, it->second, true);  // (items() refers to it)
    for (const auto& item : factors.items()) {
      const std::string name = json_f32(item.key()).dump();  // quoted, as no_decay's
      const auto i = parameter(json_f32(item.key()));
      if (!i) diffs.push_back("unexpected lr_scale parameter " + name);
      else if (!item.value().is_number() || !g.valid_value(g.lr_factor, item.value().template get<float>()))
        diffs.push_back("lr_scale of " + name + " is " + item.value().dump() + " in the file, not a factor lr_scale takes (" +
                        std::string(g.value_rule(g.lr_factor)) + ")");
      else g.lr_factors[*i] = item.value().template get<float>();
    }
  }
}
/// An optimizer with param_group's per-parameter values (optim::sgd_overrides or
/// adam_overrides: optional fields named by for_each, set whole by set_overrides).
template <class Opt>
concept has_overrides = has_groups<Opt> && requires(Opt& o) { o.set_overrides(o.overrides()); };

/// param_group's values as "xtpu.optimizer.overrides" holds them: {name: {key: value}} for each
/// parameter with a value of its own, only the fields it has.
template <class Overrides>
std::string overrides_text(const std::vector<std::string>& names, const std::vector<Overrides>& v) {
  json_f32 j = json_f32::object();
  for (std::size_t i = 0; i < names.size(); ++i) {
    json_f32 own = json_f32::object();
    Overrides ov = v[i];  // (a copy: for_each hands out references)
    ov.for_each([&](const char* key, const auto& value) {
      if (value) own[key] = *value;
    });
    if (!own.empty()) j[names[i]] = own;
  }
  return j.dump();
}
/// Reads the file's "xtpu.optimizer.overrides", if it has it, into v (a copy of the
/// optimizer's): it replaces every parameter's values; each name must be one of the model's,
/// each key one of Overrides', each value of the field's type and, for a number, one that
/// groups (the optimizer's parameter_groups) takes for that key; differences join diffs.
template <class Overrides, class Groups>
void read_overrides(const std::string& path, const std::map<std::string, std::string>& meta,
                    const std::vector<std::string>& names, std::vector<Overrides>& v, const Groups& groups,
                    std::vector<std::string>& diffs) {
  const auto it = meta.find("xtpu.optimizer.overrides");
  if (it == meta.end()) return;
  std::fill(v.begin(), v.end(), Overrides{});
  const name_index parameter(names);
  const json_f32 j = parsed_json(path, it->first, it->second, true);
  for (const auto& item : j.items()) {
    const std::string name = json_f32(item.key()).dump();  // quoted, as no_decay's
    const auto at = parameter(json_f32(item.key()));
    if (!at) {
      diffs.push_back("unexpected param_group parameter " + name);
      continue;
    }
    if (!item.value().is_object()) {
      diffs.push_back("param_group values of " + name + " are " + item.value().dump() + " in the file, not a JSON object");
      continue;
    }
    Overrides& ov = v[*at];
    for (const auto& field : item.value().items()) {
      bool known = false;
      ov.for_each([&](const char* key, auto& value) {
        if (field.key() != key) return;
        known = true;
        using V = typename std::remove_cvref_t<decltype(value)>::value_type;
        constexpr bool flag = std::is_same_v<V, bool>;
        const json_f32& x = field.value();
        if (flag ? !x.is_boolean() : (!x.is_number() || !groups.valid_value(key, x.template get<float>())))
          return diffs.push_back("param_group's " + std::string(key) + " of " + name + " is " + x.dump() +
                                 " in the file, not " +
                                 (flag ? "a bool" : "a value param_group takes (" + std::string(groups.value_rule(key)) + ")"));
        value = x.template get<V>();
      });
      if (!known) diffs.push_back("unexpected param_group value " + json_f32(field.key()).dump() + " of " + name);
    }
  }
}
template <class Opt>
concept tells_state = requires(const Opt& o) { { o.holds_state(std::size_t{0}) } -> std::convertible_to<bool>; };

/// The parameter an optimizer entry's for_each_state name belongs to: "fc1.weight.exp_avg" ->
/// "fc1.weight" (a parameter's name has dots, a state's key none).
inline std::string parameter_of(const std::string& state) { return state.substr(0, state.rfind('.')); }

/// The parameters saved without optimizer state (frozen, none held: a LoRA base, a teacher),
/// from the optimizer: their entries are left out of the file and listed under
/// "xtpu.optimizer.stateless", so that a load expects none for them.
template <class Model, class Opt>
std::set<std::string> stateless_parameters(const Model& model, const Opt& opt) {
  std::set<std::string> out;
  if constexpr (tells_state<Opt>) {
    std::size_t i = 0;
    nn::for_each_parameter(model, [&](const std::string& name, const auto& p) {
      if (!p.requires_grad() && !opt.holds_state(i)) out.insert(name);
      ++i;
    });
  }
  return out;
}
}  // namespace detail

/// What save and load take as an optimizer (optim::sgd, adam, adamw, or one like them).
template <class Opt>
concept optimizer = requires(Opt& o) {
  o.step();
  o.zero_grad();
  o.for_each_state([](const std::string&, auto&) {});
};

namespace detail {

inline std::string int_text(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path) {
  const auto it = m.find(key);
  if (it == m.end()) io::detail::fail(path, "its __metadata__ has no '" + key + "'");
  return it->second;
}
inline std::int64_t to_int(const std::string& text, const std::string& key, const std::string& path) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  io::detail::fail(path, "__metadata__ '" + key + "' is '" + text + "', not an integer");
}

/// The file's options for opt (a copy of opt's, read_options), if it has them and opt names its
/// options, else nothing to assign; a kind other than opt's joins diffs.
template <class Opt>
auto file_options(const std::string& path, const std::map<std::string, std::string>& meta, Opt* opt,
                  std::vector<std::string>& diffs) {
  if constexpr (std::is_same_v<Opt, void> || !has_options<Opt>) {
    return std::optional<int>();
  } else {
    std::optional<std::remove_cvref_t<decltype(opt->options())>> o;
    if constexpr (has_kind<Opt>)  // Adam's and AdamW's options have the same keys, not the same meaning
      if (const auto k = meta.find("xtpu.optimizer.kind"); k != meta.end() && k->second != Opt::kind)
        diffs.push_back("the file's optimizer is " + k->second + ", this one " + std::string(Opt::kind));
    if (const auto it = meta.find("xtpu.optimizer.options"); it != meta.end()) {
      o = opt->options();
      read_options(path, it->second, *o, diffs, rules_of(opt));
    }
    return o;
  }
}
/// The file's groups for opt (a copy of opt's, read_groups), if opt has groups.
template <class Model, class Opt>
auto file_groups(const std::string& path, const std::map<std::string, std::string>& meta, const Model&, Opt* opt,
                 std::vector<std::string>& diffs) {
  if constexpr (std::is_same_v<Opt, void> || !has_groups<Opt>) {
    return std::optional<int>();
  } else {
    std::optional<std::remove_cvref_t<decltype(opt->groups())>> g = opt->groups();
    read_groups(path, meta, nn::parameter_names<Model>(), *g, diffs);
    return g;
  }
}
/// The file's param_group values for opt (a copy of opt's, read_overrides), if opt has them.
template <class Model, class Opt>
auto file_overrides(const std::string& path, const std::map<std::string, std::string>& meta, const Model&, Opt* opt,
                    std::vector<std::string>& diffs) {
  if constexpr (std::is_same_v<Opt, void> || !has_overrides<Opt>) {
    return std::optional<int>();
  } else {
    std::optional<std::remove_cvref_t<decltype(opt->overrides())>> v = opt->overrides();
    read_overrides(path, meta, nn::parameter_names<Model>(), *v, opt->groups(), diffs);
    return v;
  }
}

template <class Model, class Opt>
void save_impl(const std::string& path, const Model& model, Opt* opt, const checkpoint_info& info,
               const xtpu::source_location& where) {
  for (const auto& [k, v] : info.user)
    if (k.rfind("xtpu.", 0) == 0) io::detail::fail(path, "the user key '" + k + "' starts with 'xtpu.', which xtpu's own keys use");
  std::map<std::string, std::string> meta = info.user;
  if constexpr (!std::is_same_v<Opt, void>) {  // (may fail: before anything is staged)
    if constexpr (has_kind<Opt>) meta["xtpu.optimizer.kind"] = std::string(Opt::kind);
    if constexpr (has_options<Opt>) meta["xtpu.optimizer.options"] = options_text(path, opt->options(), rules_of(opt));
    if constexpr (has_groups<Opt>)
      std::tie(meta["xtpu.optimizer.no_decay"], meta["xtpu.optimizer.lr_scale"]) =
          groups_text(nn::parameter_names<Model>(), opt->groups());
    if constexpr (has_overrides<Opt>)
      meta["xtpu.optimizer.overrides"] = overrides_text(nn::parameter_names<Model>(), opt->overrides());
  }
  staged out;
  nn::for_each_parameter(model, [&](const std::string& name, const auto& p) { out.add(name, p); });
  meta["xtpu.checkpoint"] = "2";
  meta["xtpu.step"] = std::to_string(info.step);
  meta["xtpu.loader.epoch"] = std::to_string(info.loader.epoch);
  meta["xtpu.loader.batch"] = std::to_string(info.loader.batch);
  if (!info.loader.order.empty()) meta["xtpu.loader.order"] = info.loader.order;
  nn::for_each_stream(model, [&](const std::string& name, const auto& stream) {
    meta[stream_prefix + name] = nlohmann::json::array({stream->seed(), stream->position()}).dump();
  });
  if constexpr (!std::is_same_v<Opt, void>) {
    const std::set<std::string> stateless = stateless_parameters(model, *opt);
    opt->for_each_state([&](const std::string& name, auto& t) {
      if (!stateless.count(parameter_of(name))) out.add(optimizer_prefix + name, t);
    });
    if (!stateless.empty()) meta["xtpu.optimizer.stateless"] = nlohmann::json(stateless).dump();
    if constexpr (counts_steps<Opt>) {
      std::vector<std::int64_t> steps(nn::parameter_tensors_v<Model>);
      for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = opt->step_of(i);
      meta["xtpu.optimizer.steps"] = std::to_string(opt->steps());
      meta["xtpu.optimizer.step_of"] = nlohmann::json(steps).dump();
    }
  }
  out.read(where);
  write_safetensors(path, out.records, meta);
}

template <class Model, class Opt>
checkpoint_info load_impl(const std::string& path, Model& model, Opt* opt) {
  const safetensors_file f = safetensors_file::read(path);
  std::vector<std::string> diffs;
  const auto& meta = f.metadata();
  // the parameters the file has no optimizer state for (saved frozen and without any): their
  // entries are not expected, and those the optimizer has stay as they are
  std::set<std::string> stateless;
  if (const auto it = meta.find("xtpu.optimizer.stateless"); it != meta.end()) {
    try {  // read as xtpu.optimizer.step_of is, below
      stateless = nlohmann::json::parse(it->second).get<std::set<std::string>>();
    } catch (const nlohmann::json::exception& e) {
      io::detail::fail(path, "__metadata__ 'xtpu.optimizer.stateless' is not a list of names: " + std::string(e.what()));
    }
  }
  const auto in_file = [&](const std::string& state) { return !stateless.count(parameter_of(state)); };
  std::map<std::string, bool> expected;  // every name the model and optimizer have
  nn::for_each_parameter(model, [&](const std::string& name, const auto& p) {
    expected[name] = true;
    [&]<class T, std::size_t... D>(const tensor<T, D...>&) { check_entry<T, D...>(f, name, diffs); }(p);
  });
  if constexpr (!std::is_same_v<Opt, void>) {
    opt->for_each_state([&](const std::string& name, auto& t) {
      if (!in_file(name)) return;
      expected[optimizer_prefix + name] = true;
      [&]<class T, std::size_t... D>(const tensor<T, D...>&) { check_entry<T, D...>(f, optimizer_prefix + name, diffs); }(t);
    });
  }
  // the file's options and groups, read into copies (assigned once everything fits)
  [[maybe_unused]] const auto options = file_options(path, meta, opt, diffs);
  [[maybe_unused]] auto groups = file_groups(path, meta, model, opt, diffs);  // (moved into opt at the end)
  [[maybe_unused]] auto overrides = file_overrides(path, meta, model, opt, diffs);
  for (const auto& t : f.tensors()) {
    const bool optimizers = t.name.rfind(optimizer_prefix, 0) == 0;  // left alone when no optimizer is given
    if (!expected.count(t.name) && (!optimizers || !std::is_same_v<Opt, void>)) diffs.push_back("unexpected " + t.name);
  }
  // a file without xtpu's metadata (a state_dict saved by torch or safetensors): tensors only;
  // layout 1 was written before seed streams were saved (it has none)
  const auto layout = meta.find("xtpu.checkpoint");
  const bool ours = layout != meta.end();
  if (ours && layout->second != "1" && layout->second != "2")
    io::detail::fail(path, "has layout " + layout->second + " ('xtpu.checkpoint'); this xtpu reads layouts 1 and 2");
  if (!ours)  // xtpu's keys without their layout: a damaged file, not a foreign one (which has none)
    for (const auto& [k, v] : meta)
      if (k.rfind("xtpu.", 0) == 0)
        io::detail::fail(path, "has xtpu's key '" + k + "' but no 'xtpu.checkpoint' (its layout): a damaged "
                               "checkpoint, whose step, loader position and optimizer counts would be lost");
  std::map<std::string, nn::seeds> streams;  // by name: the model's streams the file has
  nn::for_each_stream(model, [&](const std::string& name, const auto&) {
    const std::string key = stream_prefix + name;
    const auto it = meta.find(key);
    if (it == meta.end()) return;
    const auto j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions*/ false);
    if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned())
      io::detail::fail(path, "__metadata__ '" + key + "' is '" + it->second + "', not [seed, position] (two integers >= 0)");
    streams.emplace(name, nn::seeds(j[0].get<std::uint64_t>(), j[1].get<std::uint64_t>()));
  });
  if (!diffs.empty()) {
    std::string text;
    for (const auto& d : diffs) text += (text.empty() ? "" : "; ") + d;
    io::detail::fail(path, "does not fit: " + text);
  }
  checkpoint_info info;
  if (ours) {
    info.step = to_int(int_text(meta, "xtpu.step", path), "xtpu.step", path);
    info.loader.epoch = static_cast<std::uint64_t>(to_int(int_text(meta, "xtpu.loader.epoch", path), "xtpu.loader.epoch", path));
    info.loader.batch = static_cast<std::size_t>(to_int(int_text(meta, "xtpu.loader.batch", path), "xtpu.loader.batch", path));
    if (const auto it = meta.find("xtpu.loader.order"); it != meta.end()) info.loader.order = it->second;
  }
  std::vector<std::int64_t> steps;
  std::int64_t opt_steps = 0;
  if constexpr (!std::is_same_v<Opt, void>) {
    if constexpr (counts_steps<Opt>) {
      if (ours) {
        const std::string list = int_text(meta, "xtpu.optimizer.step_of", path);
        try {
          steps = nlohmann::json::parse(list).get<std::vector<std::int64_t>>();
        } catch (const nlohmann::json::exception& e) {
          io::detail::fail(path, "__metadata__ 'xtpu.optimizer.step_of' is not a list of integers: " + std::string(e.what()));
        }
        if (steps.size() != nn::parameter_tensors_v<Model>)
          io::detail::fail(path, "__metadata__ 'xtpu.optimizer.step_of' has " + std::to_string(steps.size()) +
                                     " counts for " + std::to_string(nn::parameter_tensors_v<Model>) + " parameters");
        opt_steps = to_int(int_text(meta, "xtpu.optimizer.steps", path), "xtpu.optimizer.steps", path);
      }
    }
  }
  for (const auto& [k, v] : meta)
    if (k.rfind("xtpu.", 0) != 0) info.user[k] = v;
  // everything fits: every value on the device first (an out_of_memory here changes nothing),
  // then the assignments — parameters first, so each master copy pairs with its parameter
  std::map<std::string, std::shared_ptr<void>> values;
  nn::for_each_parameter(model, [&](const std::string& name, const auto& p) {
    using P = typename std::remove_cvref_t<decltype(p)>::tensor_type;
    values[name] = std::make_shared<P>(value_of<P>(f, name));
  });
  if constexpr (!std::is_same_v<Opt, void>) {
    opt->for_each_state([&](const std::string& name, auto& t) {
      using S = typename std::remove_cvref_t<decltype(t)>::tensor_type;
      if (in_file(name)) values[optimizer_prefix + name] = std::make_shared<S>(value_of<S>(f, optimizer_prefix + name));
    });
  }
  const auto stored = [&]<class P>(const P&, const std::string& name) -> const typename P::tensor_type& {
    return *std::static_pointer_cast<typename P::tensor_type>(values.at(name));
  };
  nn::for_each_parameter(model, [&](const std::string& name, auto& p) { p = stored(p, name); });
  nn::for_each_stream(model, [&](const std::string& name, auto& stream) {  // as steps(): discard_step keeps it
    if (const auto it = streams.find(name); it != streams.end()) *stream = it->second;
  });
  if constexpr (!std::is_same_v<Opt, void>) {
    opt->for_each_state([&](const std::string& name, auto& t) {
      if (in_file(name)) t = stored(t, optimizer_prefix + name);
    });
    if constexpr (counts_steps<Opt>) {
      if (ours) {
        for (std::size_t i = 0; i < steps.size(); ++i) opt->step_of(i) = steps[i];
        opt->steps() = opt_steps;
      }
    }
    if constexpr (has_options<Opt>)
      if (options) opt->options() = *options;
    if constexpr (has_groups<Opt>) opt->set_groups(std::move(*groups));  // (read_groups checked what set_groups checks)
    if constexpr (has_overrides<Opt>) opt->set_overrides(std::move(*overrides));  // (read_overrides what it checks)
  }
  return info;
}
}  // namespace detail

/// Writes model's parameters (and info) to `path` as safetensors, atomically: what is pending
/// runs as one step, counted (XTPU_DEBUG) at the caller's line.
template <class Model>
void save(const std::string& path, const Model& model, const checkpoint_info& info = {},
          xtpu::source_location where = xtpu::source_location::current()) {
  detail::save_impl<Model, void>(path, model, nullptr, info, where);
}
/// The same, with the optimizer's state, step counters, kind, options and param groups.
template <class Model, optimizer Opt>
void save(const std::string& path, const Model& model, Opt& opt, const checkpoint_info& info = {},
          xtpu::source_location where = xtpu::source_location::current()) {
  detail::save_impl(path, model, &opt, info, where);
}
/// Reads `path` into model (and opt): all or nothing; returns where training was.
template <class Model>
checkpoint_info load(const std::string& path, Model& model) {
  return detail::load_impl<Model, void>(path, model, nullptr);
}
template <class Model, optimizer Opt>
checkpoint_info load(const std::string& path, Model& model, Opt& opt) {
  return detail::load_impl(path, model, &opt);
}

}  // namespace xtpu::io
