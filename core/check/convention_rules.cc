#include "core/check/convention_rules.h"

#include <set>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check/rules.h"
#include "core/format/json_header.h"
#include "core/io/fault_guard.h"
#include "core/io/mapped_file.h"
#include "core/quant/conventions/targets.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// As Checkpoint::Open reads them.
constexpr uint64_t kMaxConfigBytes = 16 << 20;

absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// The one value every `bits`-wide code of the I32 words `t` holds, or
// nullopt when they differ (or the width straddles words).
std::optional<uint32_t> SoleCode(const StoredTensor& t, int bits,
                                 absl::Status* status) {
  if (bits <= 0 || 32 % bits != 0 || t.data.size() < 4) return std::nullopt;
  const uint32_t mask = bits == 32 ? ~0u : (1u << bits) - 1;
  std::optional<uint32_t> sole;
  bool same = true;
  *status = GuardedRead([&] {
    const uint8_t* p = t.data.data();
    for (size_t w = 0; same && w + 4 <= t.data.size(); w += 4) {
      const uint32_t word = uint32_t{p[w]} | uint32_t{p[w + 1]} << 8 |
                            uint32_t{p[w + 2]} << 16 | uint32_t{p[w + 3]} << 24;
      for (int s = 0; s < 32; s += bits) {
        const uint32_t c = word >> s & mask;
        if (!sole) sole = c;
        if (c != *sole) {
          same = false;
          break;
        }
      }
    }
    return absl::OkStatus();
  });
  if (!status->ok() || !same) return std::nullopt;
  return sole;
}

}  // namespace

absl::Status CheckGptqZeroConvention(const Checkpoint& ckpt,
                                     std::vector<Finding>* out) {
  struct Mismatch {
    int64_t count = 0;
    std::string first, file;
    uint32_t code = 0;
    int bits = 0;
  } v1_data, v2_data;  // data written v1 under a v2 config, and the reverse
  for (const LogicalTensor& t : ckpt.tensors()) {
    const EncodingInfo& info = t.encoding->info();
    const bool v1 = info.convention == "gptq";
    if (!v1 && info.convention != "gptq_v2") continue;
    const StoredTensor* qzeros = nullptr;
    for (const StoredTensor* p : t.encoding->parts()) {
      if (absl::EndsWith(p->name, "qzeros")) qzeros = p;
    }
    if (qzeros == nullptr || info.bits <= 0 || info.bits > 8) continue;
    absl::Status status;
    std::optional<uint32_t> code = SoleCode(*qzeros, info.bits, &status);
    if (!status.ok()) return status;
    if (!code) continue;
    const uint32_t mid = 1u << (info.bits - 1);
    Mismatch* m = nullptr;
    if (v1 && *code == mid) m = &v2_data;
    if (!v1 && *code == mid - 1) m = &v1_data;
    if (m == nullptr) continue;
    if (m->count++ == 0) {
      m->first = t.name;
      m->file = ckpt.files()[qzeros->file_index].path;
      m->code = *code;
      m->bits = info.bits;
    }
  }
  auto emit = [&](const Mismatch& m, bool data_v1) {
    if (m.count == 0) return;
    const uint32_t mid = 1u << (m.bits - 1);
    Finding f;
    f.rule = "gptq-zero-convention";
    f.severity = FindCheckRule(f.rule)->severity;
    f.tensor = m.first;
    f.file = m.file;
    f.count = m.count;
    if (data_v1) {
      f.expected = absl::StrCat("checkpoint_format \"gptq_v2\": a symmetric ",
                                m.bits, "-bit zero-point stored as ", mid);
      f.actual = absl::StrCat(
          "every qzeros code is ", m.code, " (zero - 1, as v1 stores it) in ",
          m.count, " tensor(s): read as v2 every value is one step off");
      f.hint =
          "set \"checkpoint_format\": \"gptq\" in the quantization "
          "config, or convert the zeros to v2 (+1)";
    } else {
      f.expected =
          absl::StrCat("checkpoint_format \"gptq\" (v1): a symmetric ", m.bits,
                       "-bit zero-point stored as zero - 1 = ", mid - 1);
      f.actual = absl::StrCat("every qzeros code is ", m.code,
                              ", as v2 stores it, in ", m.count,
                              " tensor(s): read as v1 every zero becomes ",
                              mid + 1, " and every value is one step off");
      f.hint =
          "set \"checkpoint_format\": \"gptq_v2\" in the quantization "
          "config, or convert the zeros to v1 (-1)";
    }
    out->push_back(std::move(f));
  };
  emit(v1_data, true);
  emit(v2_data, false);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<conventions::QuantConfig>> ReadQuantConfig(
    const Checkpoint& ckpt) {
  if (ckpt.format() != CheckpointFormat::kSafetensors) return std::nullopt;
  QuantConfigs configs;
  bool any = false;
  for (const Checkpoint::ReadFile& f : ckpt.read_files()) {
    if (!f.identity) continue;  // absent when the checkpoint was opened
    const absl::string_view base = BaseName(f.path);
    std::optional<nlohmann::json>* slot =
        base == "config.json"            ? &configs.config
        : base == "quantize_config.json" ? &configs.quantize_config
        : base == "quant_config.json"    ? &configs.quant_config
        : base == "hf_quant_config.json" ? &configs.hf_quant_config
                                         : nullptr;
    if (slot == nullptr) continue;
    TM_ASSIGN_OR_RETURN(std::string text,
                        ckpt.storage().ReadWhole(f.path, kMaxConfigBytes));
    absl::StatusOr<nlohmann::json> json =
        ParseStrictJson(text, absl::StrCat("config '", f.path, "'"));
    // Not JSON: a lenient open reported it (config-key); read as absent.
    if (!json.ok()) continue;
    *slot = *std::move(json);
    any = true;
  }
  if (!any) return std::nullopt;
  // Leniently: each key problem was reported by the open already.
  std::vector<ResolveProblem> ignored;
  TM_ASSIGN_OR_RETURN(conventions::QuantConfig config,
                      conventions::ParseQuantConfigLenient(configs, &ignored));
  return config;
}

void CheckIgnorePatterns(const Checkpoint& ckpt,
                         const conventions::QuantConfig& config,
                         const std::string& config_file,
                         std::vector<Finding>* out) {
  if (config.method != conventions::QuantMethod::kCompressedTensors) return;
  std::set<std::string> modules;
  for (const StoredTensor& t : ckpt.stored_tensors()) {
    const size_t dot = t.name.rfind('.');
    if (dot != std::string::npos) modules.insert(t.name.substr(0, dot));
  }
  auto check = [&](const std::string& entry, const std::string& key) {
    conventions::TargetPattern pattern(entry);
    if (pattern.is_class()) return;
    for (const std::string& m : modules) {
      if (pattern.Match(m)) return;
    }
    Finding f;
    f.rule = "ignore-pattern-unused";
    f.severity = FindCheckRule(f.rule)->severity;
    f.file = config_file;
    f.expected = absl::StrCat("quantization_config.", key, " entry \"", entry,
                              "\" matches at least one module");
    f.actual = absl::StrCat(
        "it matches none of the ", modules.size(), " modules",
        absl::StartsWith(entry, "re:") ? " (a re: pattern must match the "
                                         "whole module name)"
                                       : "");
    f.hint = key == "ignore"
                 ? "fix the pattern: the modules it meant to keep in full "
                   "precision may have been quantized"
                 : "fix the pattern: the modules it meant to quantize may "
                   "have been left out";
    out->push_back(std::move(f));
  };
  for (const std::string& e : config.compressed_tensors.ignore) {
    check(e, "ignore");
  }
  for (const conventions::CtScheme& s : config.compressed_tensors.schemes) {
    for (const std::string& e : s.targets) {
      check(e, absl::StrCat("config_groups.", s.group, ".targets"));
    }
  }
}

void CheckModelOptExcluded(const Checkpoint& ckpt,
                           const conventions::QuantConfig& config,
                           std::vector<Finding>* out) {
  if (config.method != conventions::QuantMethod::kModelOpt) return;
  const conventions::ModelOptConfig& c = config.modelopt;
  std::string file = c.file;
  for (const Checkpoint::ReadFile& f : ckpt.read_files()) {
    if (f.identity && BaseName(f.path) == c.file) file = f.path;
  }
  auto has = [&](const std::string& name) {
    return ckpt.FindStored(name) != nullptr;
  };
  // MIXED_PRECISION quantizes the modules its map lists, and ModelOpt's
  // export writes no exclude_modules there: an unlisted module is excluded.
  const bool mixed = c.algo == conventions::ModelOptAlgo::kMixedPrecision;
  absl::flat_hash_set<std::string> listed;
  for (const conventions::ModelOptLayer& l : c.quantized_layers) {
    listed.insert(l.module);
  }
  for (const StoredTensor& t : ckpt.stored_tensors()) {
    if (t.name != "weight" && !absl::EndsWith(t.name, ".weight")) continue;
    const std::string module =
        t.name.size() > 7 ? t.name.substr(0, t.name.size() - 7) : "";
    if (!conventions::ModelOptStoredQuantized(t, has)) continue;
    const bool excluded = conventions::ModelOptExcludes(c, module);
    const bool unlisted = mixed && !listed.contains(module);
    if (!excluded && !unlisted) continue;
    Finding f;
    f.rule = "excluded-quantized";
    f.severity = FindCheckRule(f.rule)->severity;
    f.tensor = t.name;
    f.file = file;
    f.expected =
        excluded
            ? absl::StrCat("module '", module, "', which ", c.exclude_key,
                           " excludes, stored in full precision")
            : absl::StrCat("module '", module,
                           "', which MIXED_PRECISION's quantized_layers does "
                           "not list, stored in full precision");
    f.actual = absl::StrCat("'", t.name, "' is stored ", StoredDTypeName(t),
                            ", quantized");
    f.hint =
        "drop the module from the exclusions if it was meant to be "
        "quantized (loaders read its codes as weights), or re-export it in "
        "full precision";
    out->push_back(std::move(f));
  }
}

}  // namespace tensormorph
