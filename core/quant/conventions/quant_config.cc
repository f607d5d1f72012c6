#include "core/quant/conventions/quant_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/format/json_header.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace tensormorph::conventions {
namespace {

using Json = nlohmann::json;

// Methods transformers knows that Tensormorph does not decode (yet).
constexpr const char* kUnsupported[] = {
    "eetq",       "quanto",  "aqlm", "exl2",   "higgs",
    "vptq",       "torchao", "spqr", "bitnet", "fbgemm_fp8_rowwise",
    "squeezellm", "marlin"};

// How a value prints in "got ..." (strings cut at 40 bytes).
std::string Describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return absl::StrCat("boolean ",
                          v.get_ref<const bool&>() ? "true" : "false");
    case Json::value_t::number_integer:
      return absl::StrCat("integer ",
                          v.get_ref<const Json::number_integer_t&>());
    case Json::value_t::number_unsigned:
      return absl::StrCat("integer ",
                          v.get_ref<const Json::number_unsigned_t&>());
    case Json::value_t::number_float: {
      // "4.0", not "4": a float where an integer belongs must read as one.
      std::string x = absl::StrCat(v.get_ref<const Json::number_float_t&>());
      if (x.find_first_of(".einfa") == std::string::npos) x += ".0";
      return absl::StrCat("number ", x);
    }
    case Json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      return absl::StrCat("string \"", s.substr(0, 40),
                          s.size() > 40 ? "...\"" : "\"");
    }
    case Json::value_t::array:
      return absl::StrCat("an array of ", v.size());
    case Json::value_t::object:
      return "an object";
    default:
      return "an unreadable value";
  }
}

// A value at a key path of one file; `v` is null when the key is absent.
struct Node {
  const Json* v = nullptr;
  std::string path;

  bool absent() const { return v == nullptr; }
  bool null() const { return v != nullptr && v->is_null(); }
  // REQUIRES: v is an object (or absent).
  Node Key(absl::string_view key) const {
    Node n{nullptr,
           path.empty() ? std::string(key) : absl::StrCat(path, ".", key)};
    if (v != nullptr && v->is_object()) {
      auto it = v->find(std::string(key));
      if (it != v->end()) n.v = &*it;
    }
    return n;
  }
  Node At(size_t i) const {
    return Node{&(*v)[i], absl::StrCat(path, "[", i, "]")};
  }
};

// Type- and range-checked reads of one file's values.
class Reader {
 public:
  // With `sink` (lenient), Soft records each key problem there and goes on
  // with the key's default instead of failing.
  explicit Reader(std::string file, std::vector<ResolveProblem>* sink = nullptr)
      : file_(std::move(file)), sink_(sink) {}

  absl::Status Bad(const Node& n, absl::string_view expected) const {
    Note(n, expected, Describe(*n.v));
    return HeaderInvalidError(absl::StrCat(file_, ": ", n.path, ": expected ",
                                           expected, ", got ", Describe(*n.v)),
                              file_, "config-key");
  }
  absl::Status Unsupported(const Node& n, absl::string_view what) const {
    Note(n, absl::StrCat("a supported value (", what, ")"),
         n.v == nullptr ? "absent" : Describe(*n.v));
    return absl::UnimplementedError(
        absl::StrCat(file_, ": ", n.path, ": ", what));
  }

  absl::Status Missing(const Node& n, absl::string_view expected) const {
    Note(n, expected, "the key is missing");
    return HeaderInvalidError(
        absl::StrCat(file_, ": ", n.path, ": expected ", expected,
                     ", but the key is missing"),
        file_, "config-key");
  }

  bool lenient() const { return sink_ != nullptr; }
  // Strict: `v` as it is. Lenient: a failed `v` becomes `fallback` once
  // the problem Bad, Missing or Unsupported described is recorded.
  template <typename T>
  absl::StatusOr<T> Soft(absl::StatusOr<T> v, T fallback) const {
    if (v.ok() || !Record(v.status())) return v;
    return fallback;
  }
  absl::Status Soft(absl::Status s) const {
    if (s.ok() || !Record(s)) return s;
    return absl::OkStatus();
  }

  absl::Status Object(const Node& n) const {
    if (n.v->is_object()) return absl::OkStatus();
    return Bad(n, "an object");
  }

  // An integer in [lo, hi] (or == `also`, when given).
  absl::StatusOr<int64_t> Int(
      const Node& n, int64_t lo, int64_t hi,
      std::optional<int64_t> also = std::nullopt) const {
    const std::string want =
        absl::StrCat("an integer ",
                     hi == std::numeric_limits<int64_t>::max()
                         ? absl::StrCat(">= ", lo)
                         : absl::StrCat("in [", lo, ", ", hi, "]"),
                     also ? absl::StrCat(" or ", *also) : "");
    int64_t x = 0;
    if (n.v->is_number_integer() && !n.v->is_number_unsigned()) {
      x = n.v->get_ref<const Json::number_integer_t&>();
    } else if (n.v->is_number_unsigned()) {
      const uint64_t u = n.v->get_ref<const Json::number_unsigned_t&>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Bad(n, want);
      x = static_cast<int64_t>(u);
    } else {
      return Bad(n, want);
    }
    if ((x < lo || x > hi) && !(also && x == *also)) return Bad(n, want);
    return x;
  }
  // Absent: `def`.
  absl::StatusOr<int64_t> IntOr(
      const Node& n, int64_t def, int64_t lo, int64_t hi,
      std::optional<int64_t> also = std::nullopt) const {
    if (n.absent()) return def;
    return Int(n, lo, hi, also);
  }

  absl::StatusOr<bool> Bool(const Node& n, bool def) const {
    if (n.absent()) return def;
    if (!n.v->is_boolean()) return Bad(n, "a boolean");
    return n.v->get_ref<const bool&>();
  }

  // Absent: std::nullopt (and null too when `null_is_absent`).
  absl::StatusOr<std::optional<std::string>> String(const Node& n,
                                                    bool null_is_absent) const {
    if (n.absent() || (null_is_absent && n.null())) return std::nullopt;
    if (!n.v->is_string()) return Bad(n, "a string");
    return n.v->get_ref<const std::string&>();
  }

  // [rows, cols], each >= 1; null is absent. `rxc_string`: the older
  // compressed-tensors spelling "RxC" is accepted too.
  absl::StatusOr<std::optional<std::array<int64_t, 2>>> Pair(
      const Node& n, bool rxc_string) const {
    if (n.absent() || n.null()) return std::nullopt;
    const char* want = rxc_string
                           ? "[rows, cols] of integers >= 1 or a string \"RxC\""
                           : "[rows, cols] of integers >= 1";
    std::array<int64_t, 2> out{};
    if (rxc_string && n.v->is_string()) {
      std::vector<std::string> parts =
          absl::StrSplit(n.v->get_ref<const std::string&>(), 'x');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &out[0]) ||
          !absl::SimpleAtoi(parts[1], &out[1]) || out[0] < 1 || out[1] < 1) {
        return Bad(n, want);
      }
      return out;
    }
    if (!n.v->is_array() || n.v->size() != 2) return Bad(n, want);
    for (size_t i = 0; i < 2; ++i) {
      auto x = Int(n.At(i), 1, std::numeric_limits<int64_t>::max());
      if (!x.ok()) return x.status();
      out[i] = *x;
    }
    return out;
  }

 private:
  void Note(const Node& n, absl::string_view expected,
            absl::string_view actual) const {
    last_ = ResolveProblem{
        "config-key",       "", "", file_, n.path, std::string(expected),
        std::string(actual)};
  }
  // Whether `s` was recorded (lenient, and a key problem was noted for it).
  bool Record(const absl::Status& s) const {
    if (sink_ == nullptr || !last_) return false;
    last_->message = std::string(s.message());
    sink_->push_back(*std::move(last_));
    last_.reset();
    return true;
  }

  std::string file_;
  std::vector<ResolveProblem>* sink_;
  mutable std::optional<ResolveProblem> last_;
};

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

absl::Status ParseGptq(const Reader& r, const Node& q, GptqConfig* c) {
  auto bits = r.Soft(r.IntOr(q.Key("bits"), 4, 1, 32), int64_t{4});
  if (!bits.ok()) return bits.status();
  if (*bits != 2 && *bits != 3 && *bits != 4 && *bits != 8) {
    if (auto s = r.Soft(r.Unsupported(
            q.Key("bits"),
            absl::StrCat("GPTQ with ", *bits,
                         " bits is not supported (2, 3, 4, 8 are)")));
        !s.ok()) {
      return s;
    }
    *bits = 4;
  }
  c->bits = static_cast<int>(*bits);
  auto group =
      r.Soft(r.IntOr(q.Key("group_size"), 128, 1, kMaxInt, -1), int64_t{128});
  if (!group.ok()) return group.status();
  c->group_size = *group;
  auto sym = r.Soft(r.Bool(q.Key("sym"), true), true);
  if (!sym.ok()) return sym.status();
  c->sym = *sym;
  auto desc = r.Soft(r.Bool(q.Key("desc_act"), false), false);
  if (!desc.ok()) return desc.status();
  c->desc_act = *desc;
  auto format = r.Soft(r.String(q.Key("checkpoint_format"), false),
                       std::optional<std::string>());
  if (!format.ok()) return format.status();
  std::string f = format->value_or("gptq");
  if (f != "gptq" && f != "gptq_v2") {
    if (auto s = r.Soft(r.Unsupported(
            q.Key("checkpoint_format"),
            absl::StrCat("GPTQ checkpoint_format '", f,
                         "' is not supported (gptq and gptq_v2 are)")));
        !s.ok()) {
      return s;
    }
    f = "gptq";
  }
  c->v1 = f == "gptq";
  return absl::OkStatus();
}

absl::Status ParseAwq(const Reader& r, const Node& q, AwqConfig* c) {
  const Node bits_key = q.Key("bits").absent() ? q.Key("w_bit") : q.Key("bits");
  auto bits = r.Soft(r.IntOr(bits_key, 4, 1, 32), int64_t{4});
  if (!bits.ok()) return bits.status();
  if (*bits != 4) {
    if (auto s = r.Soft(r.Unsupported(
            bits_key,
            absl::StrCat("AWQ with ", *bits, " bits is not supported")));
        !s.ok()) {
      return s;
    }
  }
  c->bits = 4;
  const Node group_key = q.Key("group_size").absent() ? q.Key("q_group_size")
                                                      : q.Key("group_size");
  auto group = r.Soft(r.IntOr(group_key, 128, 1, kMaxInt), int64_t{128});
  if (!group.ok()) return group.status();
  c->group_size = *group;
  auto version =
      r.Soft(r.String(q.Key("version"), false), std::optional<std::string>());
  if (!version.ok()) return version.status();
  std::string v = absl::AsciiStrToLower(version->value_or("gemm"));
  if (v != "gemm" && v != "gemv") {
    if (auto s = r.Soft(r.Unsupported(
            q.Key("version"), absl::StrCat("AWQ version '", v,
                                           "' is not supported (gemm and "
                                           "gemv are)")));
        !s.ok()) {
      return s;
    }
    v = "gemm";
  }
  c->gemv = v == "gemv";
  auto zp = r.Soft(r.Bool(q.Key("zero_point"), true), true);
  if (!zp.ok()) return zp.status();
  c->zero_point = *zp;
  return absl::OkStatus();
}

// One MLX quantization entry (the base, or a module's object).
absl::Status ParseMlxQuant(const Reader& r, const Node& q, MlxQuant* out) {
  auto mode =
      r.Soft(r.String(q.Key("mode"), true), std::optional<std::string>());
  if (!mode.ok()) return mode.status();
  const std::string m = mode->value_or("affine");
  constexpr const char* kModes =
      R"(one of "affine", "mxfp4", "mxfp8", "nvfp4")";
  out->mode = m == "mxfp4"   ? MlxMode::kMxfp4
              : m == "mxfp8" ? MlxMode::kMxfp8
              : m == "nvfp4" ? MlxMode::kNvfp4
                             : MlxMode::kAffine;
  if (m != "affine" && out->mode == MlxMode::kAffine) {
    TM_RETURN_IF_ERROR(r.Soft(r.Bad(q.Key("mode"), kModes)));
  }
  const bool affine = out->mode == MlxMode::kAffine;
  const int64_t def_bits = out->mode == MlxMode::kMxfp8 ? 8 : 4;
  const int64_t def_group = affine                         ? 64
                            : out->mode == MlxMode::kNvfp4 ? 16
                                                           : 32;
  // mlx.nn.quantize reads `group_size or default`: null is absent.
  const auto read = [&](const Node& n, int64_t def, bool ok(int64_t),
                        absl::string_view want) -> absl::StatusOr<int64_t> {
    if (n.absent() || n.null()) return def;
    auto v = r.Soft(r.Int(n, 1, 1024), def);
    if (!v.ok()) return v.status();
    if (ok(*v)) return *v;
    TM_RETURN_IF_ERROR(r.Soft(r.Bad(n, want)));
    return def;
  };
  absl::StatusOr<int64_t> bits =
      affine ? read(
                   q.Key("bits"), def_bits,
                   [](int64_t b) { return b >= 2 && b <= 8 && b != 7; },
                   "2, 3, 4, 5, 6 or 8 (affine bits)")
             : read(
                   q.Key("bits"), def_bits,
                   def_bits == 8 ? +[](int64_t b) { return b == 8; }
                                 : +[](int64_t b) { return b == 4; },
                   def_bits == 8 ? "8 (mxfp8 bits)" : "4 (fp4 bits)");
  if (!bits.ok()) return bits.status();
  out->bits = static_cast<int>(*bits);
  absl::StatusOr<int64_t> group =
      affine ? read(
                   q.Key("group_size"), def_group,
                   [](int64_t g) { return g == 32 || g == 64 || g == 128; },
                   "32, 64 or 128 (affine group size)")
             : read(
                   q.Key("group_size"), def_group,
                   def_group == 16 ? +[](int64_t g) { return g == 16; }
                                   : +[](int64_t g) { return g == 32; },
                   def_group == 16 ? "16 (nvfp4 group size)"
                                   : "32 (mxfp4 / mxfp8 group size)");
  if (!group.ok()) return group.status();
  out->group_size = *group;
  return absl::OkStatus();
}

// MLX's "quantization": the base entry and per-module ones.
absl::Status ParseMlx(const Reader& r, const Node& q, MlxConfig* c) {
  TM_RETURN_IF_ERROR(ParseMlxQuant(r, q, &c->base));
  for (const auto& [key, value] : q.v->items()) {
    if (key == "mode" || key == "bits" || key == "group_size") continue;
    const Node n = q.Key(key);
    if (value.is_boolean()) {
      c->modules.emplace_back(key, value.get<bool>()
                                       ? std::optional<MlxQuant>(c->base)
                                       : std::nullopt);
    } else if (value.is_object()) {
      MlxQuant m;
      TM_RETURN_IF_ERROR(ParseMlxQuant(r, n, &m));
      c->modules.emplace_back(key, m);
    }
  }
  return absl::OkStatus();
}

// Whether config.json is an MLX save: a "quantization" entry, or a
// quantization_config naming no method but MLX's keys.
bool IsMlx(const Node& mlx, const Node& qc) {
  if (!mlx.absent() && !mlx.null()) return true;
  return !qc.absent() && qc.v->is_object() && qc.Key("quant_method").absent() &&
         (!qc.Key("bits").absent() || !qc.Key("group_size").absent());
}

CtFormat FormatOf(absl::string_view f) {
  if (f == "int-quantized") return CtFormat::kIntQuantized;
  if (f == "naive-quantized") return CtFormat::kNaiveQuantized;
  if (f == "float-quantized") return CtFormat::kFloatQuantized;
  if (f == "pack-quantized") return CtFormat::kPackQuantized;
  if (f == "nvfp4-pack-quantized") return CtFormat::kNvfp4PackQuantized;
  if (f == "mxfp4-pack-quantized") return CtFormat::kMxfp4PackQuantized;
  return CtFormat::kOther;
}

absl::StatusOr<std::optional<CtScheme>> ParseCtGroup(
    const Reader& r, const Node& group, const std::string& name,
    const std::string& default_format) {
  if (auto s = r.Object(group); !s.ok()) {
    TM_RETURN_IF_ERROR(r.Soft(s));
    return std::nullopt;
  }
  const Node w = group.Key("weights");
  // QuantizationScheme.weights is Optional: no weight quantization.
  if (w.absent() || w.null()) return std::nullopt;
  if (auto s = r.Object(w); !s.ok()) {
    TM_RETURN_IF_ERROR(r.Soft(s));
    return std::nullopt;
  }
  CtScheme s;
  s.group = name;
  auto format =
      r.Soft(r.String(group.Key("format"), true), std::optional<std::string>());
  if (!format.ok()) return format.status();
  s.format_name = format->value_or(default_format);
  s.format = FormatOf(s.format_name);
  auto bits = r.Soft(r.IntOr(w.Key("num_bits"), 8, 1, 32), int64_t{8});
  if (!bits.ok()) return bits.status();
  s.bits = static_cast<int>(*bits);
  auto type =
      r.Soft(r.String(w.Key("type"), false), std::optional<std::string>());
  if (!type.ok()) return type.status();
  const std::string t = type->value_or("int");
  if (t == "int") {
    s.type = CtType::kInt;
  } else if (t == "float") {
    s.type = CtType::kFloat;
  } else {
    TM_RETURN_IF_ERROR(r.Soft(r.Bad(w.Key("type"), "\"int\" or \"float\"")));
  }
  auto sym = r.Soft(r.Bool(w.Key("symmetric"), true), true);
  if (!sym.ok()) return sym.status();
  s.symmetric = *sym;
  const Node gs = w.Key("group_size");
  if (!gs.absent() && !gs.null()) {
    auto g = r.Soft(r.Int(gs, 1, kMaxInt, -1), int64_t{0});
    if (!g.ok()) return g.status();
    // Lenient: a refused group_size is no group_size.
    if (*g != 0) s.group_size = *g;
  }
  auto block = r.Soft(r.Pair(w.Key("block_structure"), true),
                      std::optional<std::array<int64_t, 2>>());
  if (!block.ok()) return block.status();
  s.block = *block;
  auto strategy =
      r.Soft(r.String(w.Key("strategy"), true), std::optional<std::string>());
  if (!strategy.ok()) return strategy.status();
  if (strategy->has_value()) {
    s.strategy_name = **strategy;
  } else if (s.group_size && *s.group_size > 0) {
    s.strategy_name = "group";
  } else if (s.group_size && *s.group_size == -1) {
    s.strategy_name = "channel";
  } else if (s.block) {
    s.strategy_name = "block";
  } else {
    s.strategy_name = "tensor";
  }
  const std::string& st = s.strategy_name;
  s.strategy = st == "tensor"                          ? CtStrategy::kTensor
               : st == "channel"                       ? CtStrategy::kChannel
               : st == "group" || st == "tensor_group" ? CtStrategy::kGroup
               : st == "block"                         ? CtStrategy::kBlock
                                                       : CtStrategy::kOther;
  const Node targets = group.Key("targets");
  if (!targets.absent()) {
    if (!targets.v->is_array()) {
      TM_RETURN_IF_ERROR(r.Soft(r.Bad(targets, "an array of strings")));
    } else {
      for (size_t i = 0; i < targets.v->size(); ++i) {
        auto target = r.Soft(r.String(targets.At(i), false),
                             std::optional<std::string>());
        if (!target.ok()) return target.status();
        if (target->has_value()) s.targets.push_back(**target);
      }
    }
  }
  return s;
}

absl::Status ParseCompressedTensors(const Reader& r, const Node& q,
                                    CompressedTensorsConfig* c) {
  auto format =
      r.Soft(r.String(q.Key("format"), true), std::optional<std::string>());
  if (!format.ok()) return format.status();
  const std::string default_format = format->value_or("int-quantized");
  auto status = r.Soft(r.String(q.Key("quantization_status"), true),
                       std::optional<std::string>());
  if (!status.ok()) return status.status();
  c->quantization_status = status->value_or("");
  const Node groups = q.Key("config_groups");
  if (groups.absent()) {
    return r.Soft(r.Missing(groups, "an object of config groups"));
  }
  if (auto s = r.Object(groups); !s.ok()) return r.Soft(s);
  for (auto it = groups.v->begin(); it != groups.v->end(); ++it) {
    const Node group{&it.value(), absl::StrCat(groups.path, ".", it.key())};
    if (group.v->is_array()) {
      TM_RETURN_IF_ERROR(r.Soft(r.Unsupported(
          group,
          "a config group given as a preset scheme's targets is not "
          "supported; spell out its weights")));
      continue;
    }
    auto scheme = ParseCtGroup(r, group, it.key(), default_format);
    if (!scheme.ok()) return scheme.status();
    if (scheme->has_value()) c->schemes.push_back(std::move(**scheme));
  }
  const Node ignore = q.Key("ignore");
  if (!ignore.absent() && !ignore.null()) {
    if (!ignore.v->is_array()) {
      return r.Soft(r.Bad(ignore, "an array of strings"));
    }
    for (size_t i = 0; i < ignore.v->size(); ++i) {
      auto entry =
          r.Soft(r.String(ignore.At(i), false), std::optional<std::string>());
      if (!entry.ok()) return entry.status();
      if (entry->has_value()) c->ignore.push_back(**entry);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseFp8(const Reader& r, const Node& q, Fp8Config* c) {
  auto block = r.Soft(r.Pair(q.Key("weight_block_size"), false),
                      std::optional<std::array<int64_t, 2>>());
  if (!block.ok()) return block.status();
  c->weight_block_size = *block;
  return absl::OkStatus();
}

// ModelOpt's quant_algo names, upper case; `decodes` says which Tensormorph
// reads (ModelOptConfig).
struct ModelOptAlgoName {
  const char* name;
  bool decodes;
  ModelOptAlgo algo;
};
constexpr ModelOptAlgoName kModelOptAlgos[] = {
    {"FP8", true, ModelOptAlgo::kFp8},
    {"FP8_PER_CHANNEL_PER_TOKEN", true, ModelOptAlgo::kFp8PerChannelPerToken},
    {"FP8_PB_WO", true, ModelOptAlgo::kFp8PbWo},
    {"NVFP4", true, ModelOptAlgo::kNvfp4},
    {"NVFP4_AWQ", true, ModelOptAlgo::kNvfp4Awq},
    {"W4A16_NVFP4", true, ModelOptAlgo::kW4A16Nvfp4},
    {"MXFP8", true, ModelOptAlgo::kMxfp8},
    {"W4A8_AWQ", true, ModelOptAlgo::kW4a8Awq},
    {"MIXED_PRECISION", true, ModelOptAlgo::kMixedPrecision},
    {"INT4_AWQ", false, ModelOptAlgo::kFp8},
    {"INT8_SQ", false, ModelOptAlgo::kFp8},
    {"INT8_WO", false, ModelOptAlgo::kFp8},
    {"W4A8_NVFP4_FP8", false, ModelOptAlgo::kFp8},
    {"W4A8_MXFP4_FP8", false, ModelOptAlgo::kFp8},
    {"MXFP4", false, ModelOptAlgo::kFp8},
    {"NVFP4_SVDQUANT", false, ModelOptAlgo::kFp8},
};

// `quant_algo` at `n` (required), and the group size at `gs` checked
// against it: NVFP4 groups are 16, MXFP8's 32.
absl::Status ParseModelOptAlgo(const Reader& r, const Node& n, const Node& gs,
                               bool nested_mixed, ModelOptAlgo* algo,
                               std::string* name, int64_t* group_size) {
  if (n.absent()) return r.Soft(r.Missing(n, "a ModelOpt quant_algo string"));
  auto s = r.Soft(r.String(n, false), std::optional<std::string>());
  if (!s.ok()) return s.status();
  if (!s->has_value()) return absl::OkStatus();  // lenient: refused
  *name = absl::AsciiStrToUpper(**s);
  const ModelOptAlgoName* found = nullptr;
  for (const ModelOptAlgoName& a : kModelOptAlgos) {
    if (*name == a.name) found = &a;
  }
  if (found == nullptr ||
      (nested_mixed && found->algo == ModelOptAlgo::kMixedPrecision)) {
    return r.Soft(r.Bad(n, nested_mixed
                               ? "a layer's quant_algo (FP8, "
                                 "FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, "
                                 "NVFP4_AWQ, W4A16_NVFP4, MXFP8, W4A8_AWQ)"
                               : "a ModelOpt quant_algo (FP8, "
                                 "FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, "
                                 "NVFP4_AWQ, W4A16_NVFP4, MXFP8, "
                                 "W4A8_AWQ, MIXED_PRECISION)"));
  }
  if (!found->decodes) {
    return r.Soft(
        r.Unsupported(n, absl::StrCat("ModelOpt quant_algo ", *name,
                                      " is recognised but not supported")));
  }
  *algo = found->algo;
  const bool nvfp4 = *algo == ModelOptAlgo::kNvfp4 ||
                     *algo == ModelOptAlgo::kNvfp4Awq ||
                     *algo == ModelOptAlgo::kW4A16Nvfp4;
  const int64_t want = nvfp4 ? 16 : *algo == ModelOptAlgo::kMxfp8 ? 32 : 0;
  // W4A8_AWQ's INT4 groups: ModelOpt's W4A8_AWQ_BETA_CFG blocks of 128
  // unless the config says otherwise.
  *group_size = *algo == ModelOptAlgo::kW4a8Awq ? 128 : want;
  if (gs.absent() || gs.null()) return absl::OkStatus();
  auto g = r.Soft(r.Int(gs, 1, 65536), want);
  if (!g.ok()) return g.status();
  if (want != 0 && *g != want) {
    return r.Soft(
        r.Bad(gs, absl::StrCat("the group size of ", *name, " (", want, ")")));
  }
  if (want == 0) *group_size = *g;
  return absl::OkStatus();
}

// An array of strings at `n` (null or absent: none).
absl::Status ParseStringList(const Reader& r, const Node& n,
                             std::vector<std::string>* out) {
  if (n.absent() || n.null()) return absl::OkStatus();
  if (!n.v->is_array()) return r.Soft(r.Bad(n, "an array of strings"));
  for (size_t i = 0; i < n.v->size(); ++i) {
    auto e = r.Soft(r.String(n.At(i), false), std::optional<std::string>());
    if (!e.ok()) return e.status();
    if (e->has_value()) out->push_back(**e);
  }
  return absl::OkStatus();
}

// `q` is the object holding quant_algo: hf_quant_config.json's
// "quantization", or config.json's quantization_config (flat form).
absl::Status ParseModelOpt(const Reader& r, const Node& q, bool flat,
                           ModelOptConfig* c) {
  TM_RETURN_IF_ERROR(ParseModelOptAlgo(r, q.Key("quant_algo"),
                                       q.Key("group_size"), false, &c->algo,
                                       &c->algo_name, &c->group_size));
  auto kv = r.Soft(r.String(q.Key("kv_cache_quant_algo"), true),
                   std::optional<std::string>());
  if (!kv.ok()) return kv.status();
  c->kv_cache_quant_algo = *kv;
  Node ex = q.Key("exclude_modules");
  if (flat && ex.absent()) ex = q.Key("ignore");
  c->exclude_key = ex.path;
  TM_RETURN_IF_ERROR(ParseStringList(r, ex, &c->exclude_modules));
  if (c->algo != ModelOptAlgo::kMixedPrecision) return absl::OkStatus();
  const Node layers = q.Key("quantized_layers");
  if (layers.absent()) {
    return r.Soft(r.Missing(layers, "an object of module -> {quant_algo}"));
  }
  if (auto s = r.Object(layers); !s.ok()) return r.Soft(s);
  for (auto it = layers.v->begin(); it != layers.v->end(); ++it) {
    const Node layer{&it.value(), absl::StrCat(layers.path, ".", it.key())};
    if (auto s = r.Object(layer); !s.ok()) {
      TM_RETURN_IF_ERROR(r.Soft(s));
      continue;
    }
    ModelOptLayer l;
    l.module = it.key();
    l.key_path = layer.path;
    l.algo_name.clear();
    TM_RETURN_IF_ERROR(ParseModelOptAlgo(r, layer.Key("quant_algo"),
                                         layer.Key("group_size"), true, &l.algo,
                                         &l.algo_name, &l.group_size));
    if (l.algo_name.empty()) continue;  // lenient: refused
    c->quantized_layers.push_back(std::move(l));
  }
  return absl::OkStatus();
}

// hf_quant_config.json: {"producer": {"name", "version"}, "quantization"}.
absl::Status ParseHfQuantConfig(const Reader& r, const Node& top,
                                ModelOptConfig* c) {
  const Node producer = top.Key("producer");
  if (!producer.absent() && !producer.null()) {
    if (auto s = r.Object(producer); !s.ok()) return r.Soft(s);
    auto v = r.Soft(r.String(producer.Key("version"), true),
                    std::optional<std::string>());
    if (!v.ok()) return v.status();
    c->producer_version = v->value_or("");
  }
  const Node q = top.Key("quantization");
  if (q.absent()) return r.Soft(r.Missing(q, "an object"));
  if (auto s = r.Object(q); !s.ok()) return r.Soft(s);
  return ParseModelOpt(r, q, false, c);
}

// HQQ's weight_quant_params at `w`.
absl::Status ParseHqqWeights(const Reader& r, const Node& w,
                             HqqWeightParams* p) {
  p->key_path = w.path;
  auto bits = r.Soft(r.IntOr(w.Key("nbits"), 4, 1, 8), int64_t{4});
  if (!bits.ok()) return bits.status();
  if (*bits == 7) {
    TM_RETURN_IF_ERROR(
        r.Soft(r.Bad(w.Key("nbits"), "HQQ's nbits (1, 2, 3, 4, 5, 6, 8)")));
    *bits = 4;
  }
  p->bits = static_cast<int>(*bits);
  const Node gs = w.Key("group_size");
  if (!gs.absent() && gs.null()) {
    p->group_size = std::nullopt;
  } else {
    auto g = r.Soft(r.IntOr(gs, 64, 1, int64_t{1} << 20), int64_t{64});
    if (!g.ok()) return g.status();
    p->group_size = *g;
  }
  auto axis = r.Soft(r.IntOr(w.Key("axis"), 1, 0, 1), int64_t{1});
  if (!axis.ok()) return axis.status();
  p->axis = static_cast<int>(*axis);
  return absl::OkStatus();
}

// One layer's quant config: {"weight_quant_params", "scale_quant_params",
// "zero_quant_params", ...}.
absl::Status ParseHqqLayer(const Reader& r, const Node& n, HqqWeightParams* p) {
  if (auto s = r.Object(n); !s.ok()) return r.Soft(s);
  for (const char* k : {"scale_quant_params", "zero_quant_params"}) {
    const Node q = n.Key(k);
    if (!q.absent() && !q.null()) {
      TM_RETURN_IF_ERROR(r.Soft(r.Unsupported(
          q, "HQQ with quantized scales or zero-points is not supported")));
    }
  }
  const Node w = n.Key("weight_quant_params");
  if (w.absent()) return r.Soft(r.Missing(w, "an object"));
  if (auto s = r.Object(w); !s.ok()) return r.Soft(s);
  return ParseHqqWeights(r, w, p);
}

absl::Status ParseHqq(const Reader& r, const Node& q, HqqConfig* c) {
  TM_RETURN_IF_ERROR(
      ParseStringList(r, q.Key("skip_modules"), &c->skip_modules));
  const Node qc = q.Key("quant_config");
  if (qc.absent()) return r.Soft(r.Missing(qc, "an object"));
  if (auto s = r.Object(qc); !s.ok()) return r.Soft(s);
  if (!qc.Key("weight_quant_params").absent()) {
    c->layers.push_back({});
    return ParseHqqLayer(r, qc, &c->layers.back().weights);
  }
  // A map of layer tags ("self_attn.q_proj") to their configs.
  for (auto it = qc.v->begin(); it != qc.v->end(); ++it) {
    if (it.key() == "offload_meta") continue;
    const Node layer{&it.value(), absl::StrCat(qc.path, ".", it.key())};
    HqqConfig::Layer l;
    l.tag = it.key();
    TM_RETURN_IF_ERROR(ParseHqqLayer(r, layer, &l.weights));
    c->layers.push_back(std::move(l));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuantConfig> Parse(const QuantConfigs& files,
                                  std::vector<ResolveProblem>* problems) {
  QuantConfig out;
  std::string file;
  Node q;
  std::string default_method;
  if (files.config.has_value()) {
    Reader r("config.json", problems);
    Node top{&*files.config, ""};
    if (!top.v->is_object()) {
      if (problems != nullptr) {
        problems->push_back({"config-key", "", "", "config.json", "(top level)",
                             "an object", Describe(*top.v)});
        return out;
      }
      return HeaderInvalidError(
          absl::StrCat("config.json: expected an object at the top level, got ",
                       Describe(*top.v)),
          "config.json", "config-key");
    }
    Node qc = top.Key("quantization_config");
    if (const Node mlx = top.Key("quantization"); IsMlx(mlx, qc)) {
      const Node m = mlx.absent() || mlx.null() ? qc : mlx;
      if (auto s = r.Object(m); !s.ok()) {
        TM_RETURN_IF_ERROR(r.Soft(s));  // lenient: read as not quantized
        return out;
      }
      out.method = QuantMethod::kMlx;
      out.method_name = "mlx";
      out.mlx.file = "config.json";
      out.mlx.path = m.path;
      TM_RETURN_IF_ERROR(ParseMlx(r, m, &out.mlx));
      return out;
    }
    // transformers reads a null quantization_config as "not quantized".
    if (!qc.absent() && !qc.null()) {
      if (auto s = r.Object(qc); !s.ok()) {
        // Lenient: read as though there were none.
        TM_RETURN_IF_ERROR(r.Soft(s));
      } else {
        file = "config.json";
        q = qc;
      }
    }
  }
  if (q.absent() && files.hf_quant_config.has_value()) {
    // NVIDIA ModelOpt's own file: the method is the file's.
    Reader hr("hf_quant_config.json", problems);
    const Node top{&*files.hf_quant_config, ""};
    out.method = QuantMethod::kModelOpt;
    out.method_name = "modelopt";
    out.modelopt.file = "hf_quant_config.json";
    if (auto s = hr.Object(top); !s.ok()) {
      TM_RETURN_IF_ERROR(hr.Soft(s));
      out.method = QuantMethod::kNone;
      return out;
    }
    TM_RETURN_IF_ERROR(ParseHfQuantConfig(hr, top, &out.modelopt));
    return out;
  }
  if (q.absent() && files.quantize_config.has_value()) {
    file = "quantize_config.json";
    q = Node{&*files.quantize_config, ""};
    default_method = "gptq";
  } else if (q.absent() && files.quant_config.has_value()) {
    file = "quant_config.json";
    q = Node{&*files.quant_config, ""};
    default_method = "awq";
  }
  if (q.absent()) return out;
  Reader r(file, problems);
  if (!q.v->is_object()) {
    if (problems != nullptr) {
      problems->push_back({"config-key", "", "", file, "(top level)",
                           "an object", Describe(*q.v)});
      return out;
    }
    return HeaderInvalidError(
        absl::StrCat(file, ": expected an object at the top level, got ",
                     Describe(*q.v)),
        file, "config-key");
  }
  const Node method_key = q.Key("quant_method");
  auto method =
      r.Soft(r.String(method_key, false), std::optional<std::string>());
  if (!method.ok()) return method.status();
  out.method_name = absl::AsciiStrToLower(method->value_or(default_method));
  const std::string& m = out.method_name;
  absl::Status s;
  if (m == "gptq") {
    out.method = QuantMethod::kGptq;
    s = ParseGptq(r, q, &out.gptq);
  } else if (m == "awq") {
    out.method = QuantMethod::kAwq;
    s = ParseAwq(r, q, &out.awq);
  } else if (m == "compressed-tensors") {
    out.method = QuantMethod::kCompressedTensors;
    s = ParseCompressedTensors(r, q, &out.compressed_tensors);
  } else if (m == "modelopt") {
    out.method = QuantMethod::kModelOpt;
    out.modelopt.file = file;
    const Node nested = q.Key("quantization");
    s = nested.absent() ? ParseModelOpt(r, q, true, &out.modelopt)
                        : r.Soft(r.Object(nested));
    if (s.ok() && !nested.absent() && nested.v->is_object()) {
      s = ParseModelOpt(r, nested, false, &out.modelopt);
    }
  } else if (m == "hqq") {
    out.method = QuantMethod::kHqq;
    s = ParseHqq(r, q, &out.hqq);
  } else if (m == "fp8" || m == "fbgemm_fp8") {
    out.method = QuantMethod::kFp8;
    s = ParseFp8(r, q, &out.fp8);
  } else if (m == "mxfp4") {
    out.method = QuantMethod::kMxfp4;
  } else if (m == "bitsandbytes") {
    // Decoding follows the quant states stored beside each weight.
    out.method = QuantMethod::kBitsandbytes;
  } else if (std::find(std::begin(kUnsupported), std::end(kUnsupported), m) !=
             std::end(kUnsupported)) {
    TM_RETURN_IF_ERROR(r.Soft(r.Unsupported(
        method_key,
        absl::StrCat(
            "quantization method '", m,
            "' is recognised but not supported; supported: gptq, awq, "
            "compressed-tensors, fp8, mxfp4, bitsandbytes, modelopt, hqq"))));
    out.method = QuantMethod::kUnknown;
  } else if (m.empty()) {
    out.method = QuantMethod::kUnknown;
    out.notes.push_back(absl::StrCat(
        file, ": ", method_key.path,
        " is missing; conventions were recognised from the stored tensors"));
  } else {
    out.method = QuantMethod::kUnknown;
    out.notes.push_back(absl::StrCat(
        file, ": ", method_key.path, " \"", m.substr(0, 64),
        "\" is not a method Tensormorph knows; conventions were recognised "
        "from the stored tensors"));
  }
  if (!s.ok()) return s;
  return out;
}

}  // namespace

absl::StatusOr<QuantConfig> ParseQuantConfig(const QuantConfigs& files) {
  return Parse(files, nullptr);
}

absl::StatusOr<QuantConfig> ParseQuantConfigLenient(
    const QuantConfigs& files, std::vector<ResolveProblem>* problems) {
  return Parse(files, problems);
}

absl::StatusOr<BnbQuantState> ParseBnbQuantState(absl::string_view text,
                                                 absl::string_view what) {
  auto json = ParseStrictJson(text, absl::StrCat("bitsandbytes: ", what));
  if (!json.ok()) return json.status();
  Reader r(absl::StrCat("bitsandbytes: quant state '", what, "'"));
  const Node top{&*json, ""};
  if (!top.v->is_object()) {
    return absl::DataLossError(absl::StrCat("bitsandbytes: quant state '", what,
                                            "': expected an object, got ",
                                            Describe(*top.v)));
  }
  BnbQuantState st;
  const Node shape = top.Key("shape");
  if (shape.absent()) return r.Missing(shape, "an array of integers >= 1");
  if (!shape.v->is_array() || shape.v->empty()) {
    return r.Bad(shape, "a non-empty array of integers >= 1");
  }
  for (size_t i = 0; i < shape.v->size(); ++i) {
    auto d = r.Int(shape.At(i), 1, kMaxInt);
    if (!d.ok()) return d.status();
    st.shape.push_back(*d);
  }
  auto bs = r.IntOr(top.Key("blocksize"), 64, 1, kMaxInt);
  if (!bs.ok()) return bs.status();
  st.blocksize = *bs;
  auto nbs = r.IntOr(top.Key("nested_blocksize"), 256, 1, kMaxInt);
  if (!nbs.ok()) return nbs.status();
  st.nested_blocksize = *nbs;
  const Node off = top.Key("nested_offset");
  if (!off.absent()) {
    if (!off.v->is_number()) return r.Bad(off, "a finite number");
    const double d = off.v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
      return r.Bad(off, "a finite number");
    st.nested_offset = static_cast<float>(d);
  }
  return st;
}

}  // namespace tensormorph::conventions
