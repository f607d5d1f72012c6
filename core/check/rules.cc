#include "core/check/rules.h"

namespace tensormorph {

absl::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "error";
}

std::optional<Severity> ParseSeverity(absl::string_view name) {
  if (name == "info") return Severity::kInfo;
  if (name == "warning") return Severity::kWarning;
  if (name == "error") return Severity::kError;
  return std::nullopt;
}

const std::vector<CheckRule>& CheckRules() {
  static const auto* rules = new std::vector<CheckRule>{
      // Values, from one streaming pass over the decoded tensors.
      {"nan-value", Severity::kError, "NaN in decoded values",
       "NaN among a tensor's decoded values (a NaN scale, an fp16 overflow, "
       "a corrupt block): the model outputs NaN wherever it reaches",
       ""},
      {"inf-value", Severity::kError, "Inf in decoded values",
       "Inf among a tensor's decoded values (an overflowed scale or cast)", ""},
      {"nan-scale", Severity::kError, "NaN in a scale or zero-point",
       "NaN in a stored scale or zero-point tensor, or a ggml block whose "
       "scale is NaN: every element of the group decodes to NaN",
       ""},
      {"inf-scale", Severity::kError, "Inf in a scale or zero-point",
       "Inf in a stored scale or zero-point tensor, or a ggml block whose "
       "scale is Inf",
       ""},
      {"zero-scale", Severity::kWarning, "a scale of 0: a group with one value",
       "a scale of 0: the whole group decodes to one value (an fp16 "
       "underflow, or a group the quantizer never saw)",
       ""},
      {"denormal-scale", Severity::kWarning,
       "a scale below its dtype's smallest normal",
       "a scale below the smallest normal number of its stored dtype "
       "(fp16: 6.1e-5): it has lost precision and is one step from 0",
       "the stored dtype's smallest normal (F16 2^-14, BF16/F32 2^-126, "
       "F8_E4M3 2^-6, F8_E5M2 2^-14)"},
      {"fp16-saturated-scale", Severity::kWarning,
       "a scale at +-65504, or past it in fp16",
       "a stored F16 scale at +-65504, the fp16 maximum an overflow clamps "
       "to; or a wider scale or decoded value beyond it, which overflows "
       "to Inf when the model runs in fp16",
       "65504, the largest finite float16"},
      {"all-zero-group", Severity::kWarning, "groups that decode to all zeros",
       "quantization groups whose every value decodes to 0 (a zero scale, "
       "a lost shard region, pruning the config does not declare)",
       ""},
      {"constant-group", Severity::kWarning,
       "groups that decode to one non-zero value",
       "quantization groups whose every value decodes to the same non-zero "
       "value: the codes carry no information",
       "groups of at least 2 elements"},
      {"dead-levels", Severity::kWarning, "half the code levels never used",
       "a quantized tensor whose codes use at most half the levels of its "
       "integer grid: effectively fewer bits (a scale twice too large, codes "
       "written at a lower bit width)",
       "judged with at least 16 elements per level; at least half the "
       "levels unused. Unused end levels alone are normal (a symmetric int8 "
       "quantizer never writes -128), half the grid is not"},
      {"saturated-group", Severity::kWarning,
       "groups piled on both end levels (clipping)",
       "quantization groups with more than a quarter of their elements on "
       "the group's two end levels, each end holding more than one: the "
       "scale clips both tails of the group",
       "25% of a group of at least 32 elements on a grid of 4 or more bits, "
       "counting non-zero values (a zero on an end level is exact): "
       "round-to-nearest min/max puts one element on each end (the group's "
       "min and max; a one-sided outlier piles the bulk on the other end, "
       "hence both ends), and a gaussian clipped at the MSE-optimal 4-bit "
       "range about 1%; a quarter only comes from a scale that clips"},
      {"undecodable-tensor", Severity::kWarning,
       "a tensor whose values could not be checked",
       "a tensor of a type Tensormorph recognises but cannot decode (the "
       "IQ1/IQ2/IQ3 codebook types): its values were not checked, only its "
       "bytes (hashes, duplicates, the manifest)",
       ""},
      // Conventions.
      {"gptq-zero-convention", Severity::kError,
       "GPTQ zeros stored v1 under v2, or the reverse",
       "GPTQ zero-points stored in one convention under a config naming "
       "the other: v1 (checkpoint_format \"gptq\") stores zero - 1, so a "
       "symmetric 4-bit v1 checkpoint stores 7 where v2 stores 8; read the "
       "wrong way every value is off by one step (\"!!!\" output)",
       "every qzeros code equal to 2^(bits-1) - 1 (v1) or 2^(bits-1) (v2)"},
      {"ignore-pattern-unused", Severity::kWarning,
       "an ignore/targets pattern matching nothing",
       "a compressed-tensors `ignore` or `targets` entry (including re: "
       "patterns) that matches no module of the checkpoint: a typo that "
       "quantized what was meant to stay full precision, or the reverse",
       ""},
      {"duplicate-tensor", Severity::kInfo,
       "stored tensors with identical bytes",
       "stored tensors with identical bytes (by content hash): tied weights "
       "saved twice, or a packing bug that wrote one tensor in place of "
       "another",
       ""},
      // Integrity.
      {"manifest-mismatch", Severity::kError,
       "bytes that differ from --verify's manifest",
       "a tensor whose stored bytes differ from the --verify manifest's "
       "hash, or that is missing from the copy or not in the manifest",
       ""},
  };
  return *rules;
}

const CheckRule* FindCheckRule(absl::string_view id) {
  for (const CheckRule& r : CheckRules()) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

}  // namespace tensormorph
