#include "core/check/structure_rules.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check/rules.h"
#include "core/quant/conventions/targets.h"

namespace tensormorph {
namespace {

using conventions::CtFormat;
using conventions::CtScheme;
using conventions::CtType;
using conventions::QuantMethod;

Finding Make(absl::string_view rule) {
  Finding f;
  f.rule = std::string(rule);
  const CheckRule* r = FindCheckRule(rule);
  f.severity = r != nullptr ? r->severity : Severity::kError;
  return f;
}

// Rules about a file, not a module's contents: the tensor they name says
// where, and its module is still decoded (or was never there to decode).
bool IsFileRule(absl::string_view rule) {
  return rule == "shard-missing" || rule == "shard-corrupt" ||
         rule == "duplicate-name" || rule == "shard-tensor-unindexed";
}

bool IsFp8(DType d) {
  return d == DType::kF8E4M3 || d == DType::kF8E5M2 ||
         d == DType::kF8E4M3Fnuz || d == DType::kF8E5M2Fnuz;
}
bool IsInt(DType d) {
  return d == DType::kI8 || d == DType::kU8 || d == DType::kI16 ||
         d == DType::kU16 || d == DType::kI32 || d == DType::kU32 ||
         d == DType::kI64 || d == DType::kU64;
}
bool IsDenseFloat(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32 ||
         d == DType::kF64;
}

std::string FileOf(const Checkpoint& ckpt, const StoredTensor* t) {
  return t == nullptr ? "" : ckpt.files()[t->file_index].path;
}

// Per rule: the first module's finding and how many modules.
struct Tally {
  int64_t count = 0;
  Finding first;
};

// What the rule's generic expectation and hint are, for problems the
// resolver described in one message.
struct RuleText {
  absl::string_view expected, hint;
};
RuleText TextOf(absl::string_view rule) {
  if (rule == "missing-companion") {
    return {
        "every companion the convention needs (scales, zero-points, "
        "g_idx, weight_shape) stored beside the weight",
        "re-export the module with all its companions (a save step cut "
        "short, or a filter that dropped them); its values were not "
        "checked"};
  }
  if (rule == "orphan-companion") {
    return {"a quantized weight for each companion",
            "the weight it belongs to is missing, or the companion is a "
            "leftover of another layout: re-export the module"};
  }
  if (rule == "companion-shape") {
    return {
        "companion shapes and dtypes as the config's bits, group size and "
        "strategy imply",
        "the config does not describe how the tensors were written: fix "
        "bits / group_size / strategy, or re-quantize; its values were "
        "not checked"};
  }
  if (rule == "fp8-scale-layout") {
    return {
        "FP8 scales laid out as the strategy implies (per tensor, "
        "channel, or ceil(rows/R) x ceil(cols/C) blocks)",
        "set weight_block_size / strategy to the layout the scales were "
        "written with, or re-quantize; its values were not checked"};
  }
  if (rule == "config-key") {
    return {"",
            "fix the key: with its default the checkpoint may decode "
            "wrong, or not at all"};
  }
  return {"a tensor its convention resolves",
          "see the message; its values were not checked"};
}

// The scheme of `targets` (one per scheme, when there are several) whose
// targets match `module` first, as the resolver chooses; 0 when none does.
size_t ChosenScheme(const std::vector<conventions::Targets>& targets,
                    const std::string& module) {
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].Match(module)) return i;
  }
  return 0;
}

// Whether compressed weights stored as `codes` (`packed` when a
// weight_packed, else nullptr) are what scheme `s`'s format writes; `want`
// says what that is. A format not decoded passes (unresolved-tensor's).
bool CodesAsFormatWrites(const CtScheme& s, const StoredTensor* packed,
                         const StoredTensor& codes, std::string* want) {
  switch (s.format) {
    case CtFormat::kPackQuantized:
      *want = "I32 weight_packed (pack-quantized)";
      return packed != nullptr && codes.dtype == DType::kI32;
    case CtFormat::kNvfp4PackQuantized:
    case CtFormat::kMxfp4PackQuantized:
      *want = absl::StrCat("U8 weight_packed (", s.format_name, ")");
      return packed != nullptr && codes.dtype == DType::kU8;
    case CtFormat::kIntQuantized:
    case CtFormat::kNaiveQuantized:
    case CtFormat::kFloatQuantized:
      if (s.type == CtType::kFloat) {
        *want = absl::StrCat("FP8 weight codes (", s.format_name,
                             ", type "
                             "float)");
        return packed == nullptr && IsFp8(codes.dtype);
      }
      if (s.symmetric && s.bits <= 8) {
        // Symmetric integer codes are signed: U8 codes read as signed
        // would be off by 2^(bits-1)... or by nothing, silently.
        *want = absl::StrCat("I8 weight codes (", s.format_name, ", int",
                             s.bits, " symmetric: signed codes)");
        return packed == nullptr && codes.dtype == DType::kI8;
      }
      *want = absl::StrCat("integer weight codes (", s.format_name, ")");
      return packed == nullptr && IsInt(codes.dtype);
    case CtFormat::kOther:
      break;  // not decoded: unresolved-tensor says so
  }
  return true;
}

// Appends to `out` the finding of `rule` that `tally` holds, if any: its
// first module's, with the count of modules and the config file named.
void EmitTally(const Tally& tally, absl::string_view rule,
               const std::string& config_file, std::string hint,
               std::vector<Finding>* out) {
  if (tally.count == 0) return;
  Finding f = Make(rule);
  f.tensor = tally.first.tensor;
  f.file = tally.first.file.empty() ? config_file : tally.first.file;
  f.expected = tally.first.expected;
  f.actual = absl::StrCat(tally.first.actual, " (", tally.count,
                          " module(s) so; the config is '", config_file, "')");
  f.hint = std::move(hint);
  f.count = tally.count;
  out->push_back(std::move(f));
}

}  // namespace

std::string ModuleOfTensor(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

void CheckCompressedTensorsStorage(const Checkpoint& ckpt,
                                   const conventions::QuantConfig& config,
                                   const std::string& config_file,
                                   std::set<std::string>* explained,
                                   std::set<std::string>* dense_modules,
                                   std::vector<Finding>* out) {
  if (config.method != QuantMethod::kCompressedTensors) return;
  const std::vector<CtScheme>& schemes = config.compressed_tensors.schemes;
  if (schemes.empty()) return;
  std::vector<conventions::Targets> targets;
  if (schemes.size() > 1) {
    for (const CtScheme& s : schemes) targets.emplace_back(s.targets);
  }
  const std::string& status = config.compressed_tensors.quantization_status;
  const bool compressed = status == "compressed";
  const bool uncompressed =
      status == "frozen" || status == "initialized" || status == "calibration";
  Tally status_tally, format_tally;
  for (const StoredTensor& t : ckpt.stored_tensors()) {
    if (!absl::EndsWith(t.name, "weight_scale")) continue;
    const std::string prefix = t.name.substr(0, t.name.size() - 12);
    const std::string module = ModuleOfTensor(prefix + "weight");
    const CtScheme& s = schemes[ChosenScheme(targets, module)];
    const StoredTensor* packed = ckpt.FindStored(prefix + "weight_packed");
    const StoredTensor* weight = ckpt.FindStored(prefix + "weight");
    const StoredTensor* codes = packed != nullptr ? packed : weight;
    if (codes == nullptr) continue;  // orphan-companion's
    const std::string stored =
        absl::StrCat("'", codes->name, "' is ", DTypeName(codes->dtype));
    const bool dense = packed == nullptr && IsDenseFloat(codes->dtype);
    auto note = [&](Tally* tally, std::string expected, std::string actual) {
      explained->insert(module);
      if (tally->count++ > 0) return;
      tally->first.tensor = prefix + "weight";
      tally->first.file = FileOf(ckpt, codes);
      tally->first.expected = std::move(expected);
      tally->first.actual = std::move(actual);
    };
    if (compressed && dense) {
      note(&status_tally,
           absl::StrCat("quantization_status \"compressed\": weights stored "
                        "as format \"",
                        s.format_name, "\" codes"),
           absl::StrCat(stored,
                        ", dense: the weights were saved "
                        "uncompressed (as \"frozen\" saves them)"));
      continue;
    }
    if (uncompressed && !dense) {
      note(&status_tally,
           absl::StrCat("quantization_status \"", status,
                        "\": weights saved uncompressed, as dense floats"),
           absl::StrCat(stored, packed != nullptr ? " packed codes" : " codes",
                        ": the weights are compressed"));
      continue;
    }
    if (dense) {
      // Uncompressed, as said (or with no status to go by).
      if (uncompressed) dense_modules->insert(module);
      continue;
    }
    // Compressed: the codes must be what the format writes.
    std::string want;
    if (!CodesAsFormatWrites(s, packed, *codes, &want)) {
      note(&format_tally,
           absl::StrCat("format \"", s.format_name, "\" (config group '",
                        s.group, "'): ", want),
           stored);
    }
  }
  EmitTally(status_tally, "quantization-status", config_file,
            "set quantization_status to what was saved (\"compressed\" for "
            "stored codes), or save the model again compressed; a runtime "
            "trusting the config decodes it wrong",
            out);
  EmitTally(format_tally, "quantization-format", config_file,
            "set the config group's format (and type / symmetric) to how the "
            "weights were written, or re-export them; read as the config says "
            "every value is wrong",
            out);
}

void ReportOpenProblems(const Checkpoint& ckpt,
                        const std::set<std::string>& explained,
                        std::vector<Finding>* out) {
  for (const ResolveProblem& p : ckpt.problems()) {
    if (!p.tensor.empty() && !IsFileRule(p.rule) &&
        p.rule != "index-tensor-missing" &&
        explained.contains(ModuleOfTensor(p.tensor))) {
      continue;
    }
    Finding f = Make(p.rule);
    f.tensor = p.tensor;
    f.file = p.file;
    if (p.rule == "config-key") {
      f.expected = absl::StrCat(p.key, ": ", p.expected);
      f.actual = p.actual;
      f.hint = std::string(TextOf(p.rule).hint);
    } else if (!p.expected.empty()) {
      f.expected = p.expected;
      f.actual = p.actual;
      f.hint =
          p.rule == "shard-missing"
              ? "copy the shard, or fix the index: every tensor it holds is "
                "missing (the finding names the first)"
          : p.rule == "shard-corrupt"
              ? "copy the shard again (compare its size and hash with the "
                "source): none of its tensors can be read"
          : p.rule == "index-corrupt"
              ? "regenerate the index from the shards (or copy it again); "
                "the shards were checked without it"
          : p.rule == "duplicate-name"
              ? "remove the stale file: every name must be stored once"
          : p.rule == "index-tensor-missing"
              ? "re-save the shard, or drop the entry from the weight_map: a "
                "loader that trusts the index fails, or leaves the tensor "
                "uninitialised"
              : "add it to the weight_map: a loader that follows the index "
                "never loads it";
    } else {
      const RuleText text = TextOf(p.rule);
      f.expected = std::string(text.expected);
      f.actual = p.message;
      f.hint = std::string(text.hint);
    }
    if (f.file.empty() && !p.tensor.empty()) {
      // The tensor's own file, or else its module's first stored tensor's.
      const StoredTensor* t = ckpt.FindStored(p.tensor);
      if (t == nullptr) {
        const std::string module = ModuleOfTensor(p.tensor);
        for (const StoredTensor& s : ckpt.stored_tensors()) {
          if (ModuleOfTensor(s.name) == module) {
            t = &s;
            break;
          }
        }
      }
      f.file = FileOf(ckpt, t);
    }
    out->push_back(std::move(f));
  }
}

void CheckCompanions(const Checkpoint& ckpt,
                     const std::optional<conventions::QuantConfig>& config,
                     const std::set<std::string>& explained,
                     std::vector<Finding>* out) {
  const QuantMethod method = config ? config->method : QuantMethod::kNone;
  const bool gptq = method == QuantMethod::kGptq || method == QuantMethod::kAwq;
  const bool ct = method == QuantMethod::kCompressedTensors;
  bool fp8 = method == QuantMethod::kFp8;
  for (const std::string& c : ckpt.conventions()) fp8 = fp8 || c == "fp8";
  if (!gptq && !ct && !fp8) return;
  // The stored tensors some quantized logical tensor is built from, and the
  // modules a problem already names.
  std::set<std::string> claimed, problem_modules;
  for (const LogicalTensor& t : ckpt.tensors()) {
    if (!t.encoding->info().quantized) continue;
    for (const StoredTensor* p : t.encoding->parts()) claimed.insert(p->name);
  }
  for (const ResolveProblem& p : ckpt.problems()) {
    if (!p.tensor.empty()) problem_modules.insert(ModuleOfTensor(p.tensor));
  }
  struct Orphans {
    int64_t count = 0;
    const StoredTensor* first = nullptr;
    std::string expected;
  };
  std::map<std::string, Orphans> by_rule;  // "missing-companion", "orphan-..."
  for (const StoredTensor& t : ckpt.stored_tensors()) {
    if (claimed.contains(t.name)) continue;
    const std::string module = ModuleOfTensor(t.name);
    if (explained.contains(module) || problem_modules.contains(module)) {
      continue;
    }
    const absl::string_view leaf = absl::string_view(t.name).substr(
        module.empty() ? 0 : module.size() + 1);
    const std::string prefix = module.empty() ? "" : module + ".";
    std::string rule, expected;
    if (gptq && (leaf == "qzeros" || leaf == "scales" || leaf == "g_idx")) {
      rule = "orphan-companion";
      expected = absl::StrCat("'", prefix, "qweight', whose ", leaf, " it is");
    } else if (ct &&
               (leaf == "weight_zero_point" || leaf == "weight_g_idx" ||
                leaf == "weight_shape" || leaf == "weight_global_scale")) {
      rule = ckpt.FindStored(prefix + "weight_packed") != nullptr ||
                     ckpt.FindStored(prefix + "weight") != nullptr
                 ? "missing-companion"
                 : "orphan-companion";
      expected = rule == "orphan-companion"
                     ? absl::StrCat("'", prefix, "weight' or '", prefix,
                                    "weight_packed', whose ", leaf, " it is")
                     : absl::StrCat("'", prefix,
                                    "weight_scale', which every "
                                    "quantized weight has");
    } else if (ct &&
               (leaf == "weight_packed" ||
                (leaf == "weight" && (IsFp8(t.dtype) || t.dtype == DType::kI8 ||
                                      t.dtype == DType::kI32)))) {
      rule = "missing-companion";
      expected = absl::StrCat("'", prefix,
                              "weight_scale', which every "
                              "quantized weight has");
    } else if (fp8 && leaf == "weight_scale_inv") {
      rule = "orphan-companion";
      expected = absl::StrCat("'", prefix, "weight', whose scale it is");
    } else {
      continue;
    }
    Orphans& o = by_rule[rule];
    if (o.count++ == 0) {
      o.first = &t;
      o.expected = expected;
    }
  }
  for (const auto& [rule, o] : by_rule) {
    Finding f = Make(rule);
    f.tensor = o.first->name;
    f.file = FileOf(ckpt, o.first);
    f.expected = o.expected;
    f.actual =
        absl::StrCat("the checkpoint lacks it; ", o.count,
                     " stored tensor(s) so, the first '", o.first->name, "' (",
                     DescribeStored(o.first->dtype, o.first->shape), ")");
    f.hint = std::string(TextOf(rule).hint);
    f.count = o.count;
    out->push_back(std::move(f));
  }
}

std::set<std::string> ModulesNotDecoded(const std::vector<Finding>& found) {
  std::set<std::string> modules;
  for (const Finding& f : found) {
    if (f.tensor.empty() || IsFileRule(f.rule) || f.rule == "config-key") {
      continue;
    }
    modules.insert(ModuleOfTensor(f.tensor));
  }
  return modules;
}

}  // namespace tensormorph
