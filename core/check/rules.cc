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
      // Structure, from a lenient open (OpenOptions::lenient).
      {"shard-missing", Severity::kError, "a shard the index names is absent",
       "a shard file the safetensors index's weight_map names that does not "
       "exist: every tensor placed there is missing (an interrupted "
       "download or copy)",
       ""},
      {"shard-corrupt", Severity::kError, "a shard file that cannot be read",
       "a shard (or a checkpoint's one file) whose header breaks its "
       "format's rules, safetensors or GGUF (truncated, a length past the "
       "file, overlapping or misaligned offsets, bad JSON): every tensor in "
       "it is unreadable; the other shards are still checked",
       ""},
      {"index-corrupt", Severity::kError, "an index that cannot be followed",
       "a model.safetensors.index.json that is not JSON, has no weight_map "
       "object, or names a shard outside its directory: loaders stop at it; "
       "the directory's shards are checked without it",
       ""},
      {"duplicate-name", Severity::kError, "one tensor name stored twice",
       "a tensor name stored in two files: which copy a loader takes "
       "depends on its order of reading (a re-save into a directory that "
       "still held the old shards)",
       ""},
      {"index-tensor-missing", Severity::kError,
       "the index names a tensor its shard lacks",
       "a tensor the index's weight_map places in a shard that does not "
       "hold it (the repacked checkpoint whose index lists per-layer scales "
       "absent from the shards): loaders fail or leave it uninitialised",
       ""},
      {"shard-tensor-unindexed", Severity::kWarning,
       "a shard tensor the index does not list",
       "a tensor stored in a shard that the index's weight_map does not "
       "place there: loaders that follow the index never load it",
       ""},
      {"missing-companion", Severity::kError,
       "a quantized weight without its companions",
       "a quantized weight without a companion its convention needs (GPTQ "
       "qzeros/scales, g_idx under desc_act, compressed-tensors "
       "weight_scale, weight_shape or weight_zero_point, FP8 "
       "weight_scale_inv): it cannot be decoded",
       ""},
      {"orphan-companion", Severity::kError,
       "a companion without its quantized weight",
       "a scale, zero-point, g_idx or weight_shape whose quantized weight "
       "is not stored: the weight was lost, or the companion is a leftover",
       ""},
      {"companion-shape", Severity::kError,
       "companion shapes or dtypes contradict the config",
       "companion shapes and dtypes that disagree with the config's bits, "
       "group size and strategy (GPTQ scales [in/group, out], qzeros "
       "[in/group, out*bits/32]; compressed-tensors weight_scale per "
       "channel [out, 1], group [out, ceil(in/group)], tensor [1], block "
       "[ceil(out/R), ceil(in/C)]; weight_packed [out, ceil(in/(32/bits))]): "
       "the config does not describe the tensors",
       ""},
      {"fp8-scale-layout", Severity::kError,
       "FP8 scales not laid out as the strategy implies",
       "FP8 scales whose layout is not the one the strategy implies: block "
       "scales must be [ceil(rows/R), ceil(cols/C)] for weight_block_size "
       "[R, C] (ceil(rows/128) x ceil(cols/128) for DeepSeek's 128x128), "
       "per-channel [rows, 1], per-tensor one value; block scales without "
       "a weight_block_size cannot be placed",
       ""},
      {"config-key", Severity::kError,
       "a config key of the wrong type, width or range",
       "a quantization config key with a wrong type, an out-of-range or "
       "unsupported value (bits, group_size, strategy, format...), a "
       "required key missing, or a config file that is not JSON: each is "
       "reported with its key, and the key's default used for the rest of "
       "the check",
       ""},
      {"unresolved-tensor", Severity::kError,
       "a tensor whose convention could not be resolved",
       "a quantized tensor whose companions contradict each other in a way "
       "the rules above do not name (a g_idx out of range, codes that do "
       "not fit their bytes): it was reported, not decoded",
       ""},
      // Values, from one streaming pass over the decoded tensors.
      {"nan-value", Severity::kError, "NaN in decoded values",
       "NaN among a quantized tensor's decoded values (a NaN scale, an fp16 "
       "overflow, a corrupt block): the model outputs NaN wherever it "
       "reaches",
       ""},
      {"inf-value", Severity::kError, "Inf in decoded values",
       "Inf among a quantized tensor's decoded values (an overflowed scale "
       "or cast)",
       ""},
      {"nan-stored-value", Severity::kWarning,
       "NaN stored in an unquantized tensor",
       "NaN stored as such in an unquantized (plain float) tensor: maybe "
       "meant (a mask, test data), maybe a corrupt export; unlike nan-value "
       "it did not come from a decode",
       ""},
      {"inf-stored-value", Severity::kWarning,
       "Inf stored in an unquantized tensor",
       "+-Inf stored as such in an unquantized (plain float) tensor: maybe "
       "meant (an attention mask of -Inf), maybe an overflowed export",
       ""},
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
       "many values at a group's end levels (the scale may clip)",
       "quantization groups with more than a quarter of their elements on "
       "the group's two end levels, each end holding more than one: the "
       "scale may clip both tails of the group (values at an end level are "
       "not clipping by themselves; only a source tells, see diff's "
       "clipped). Not judged where the format cannot clip (a min/max range: "
       "Q4_1, Q5_1, asymmetric compressed-tensors int), nor, with "
       "--source, where the diff judges the tensor's clipping itself",
       "25% of a group of at least 32 elements on a grid of 4 or more bits, "
       "counting non-zero values (a zero on an end level is exact): "
       "round-to-nearest puts at most the group's min and max on its ends "
       "(a one-sided outlier may pile the bulk on the other end, hence both "
       "ends), and a gaussian clipped at the MSE-optimal 4-bit range about "
       "1%; a quarter comes from a scale that clips, or from a source that "
       "really sits on two values"},
      {"undecodable-tensor", Severity::kWarning,
       "a tensor whose values could not be checked",
       "a tensor of a type Tensormorph recognises but cannot decode (the "
       "IQ1/IQ2/IQ3 codebook types): its values were not checked, only its "
       "bytes (duplicates; with --manifest or --verify, their hashes)",
       ""},
      // Conventions.
      {"gptq-zero-convention", Severity::kError,
       "GPTQ zeros stored v1 under v2, or the reverse",
       "GPTQ zero-points stored in one convention under a config naming "
       "the other: v1 (checkpoint_format \"gptq\") stores zero - 1, so a "
       "symmetric 4-bit v1 checkpoint stores 7 where v2 stores 8; read the "
       "wrong way every value is off by one step (\"!!!\" output)",
       "every qzeros code equal to 2^(bits-1) - 1 (v1) or 2^(bits-1) (v2)"},
      {"quantization-status", Severity::kError,
       "quantization_status contradicts the stored weights",
       "a compressed-tensors quantization_status that contradicts the "
       "stored weights: \"compressed\" over dense float weights, or "
       "\"frozen\" / \"initialized\" / \"calibration\" (saved "
       "uncompressed) over packed or integer/FP8 codes",
       ""},
      {"quantization-format", Severity::kError,
       "the config's format contradicts the stored codes",
       "a compressed-tensors format that contradicts the stored codes: "
       "pack-quantized needs I32 weight_packed, nvfp4/mxfp4-pack-quantized "
       "U8 weight_packed, int-/naive-quantized integer weight codes (I8 when "
       "symmetric: U8 codes under a symmetric int8 config decode silently "
       "wrong), float-quantized FP8 weight codes",
       ""},
      {"ignore-pattern-unused", Severity::kWarning,
       "an ignore/targets pattern matching nothing",
       "a compressed-tensors `ignore` or `targets` entry (including re: "
       "patterns) that matches no module of the checkpoint: a typo that "
       "quantized what was meant to stay full precision, or the reverse",
       ""},
      {"excluded-quantized", Severity::kError,
       "an excluded module stored quantized",
       "a module a ModelOpt config excludes from quantization "
       "(exclude_modules / ignore, or under MIXED_PRECISION a module "
       "quantized_layers does not list) whose weight is stored quantized "
       "anyway (FP8, or U8 with its scales): loaders build it unquantized "
       "and read the codes as weights. Tensormorph leaves its stored tensors "
       "as they are",
       ""},
      {"duplicate-tensor", Severity::kInfo,
       "stored tensors with identical bytes",
       "stored tensors with identical bytes (same size, a sampled content "
       "fingerprint, then the content hash and a byte comparison): tied "
       "weights saved twice, or a packing bug that wrote one tensor in place "
       "of another",
       ""},
      // Against a source (--source), by the diff's gates.
      {"source-err-steps", Severity::kError,
       "errors past the format's rounding bound against the source",
       "a quantized tensor with an element further from its source than a "
       "correct quantizer of its format reaches (diff's max_excess_steps): "
       "clipped beyond what the format clips by design, or not the nearest "
       "level where the format rounds to nearest: a wrong scale or "
       "zero-point, or codes of another tensor. Information only for "
       "quantizers that choose codes on purpose (GPTQ, AWQ, IQ grids)",
       "max_excess_steps > 0: each format states its bound (0.5 step for "
       "exact scales; 0.5 + (|level| + 0.5) u for ggml Q8_0/Q4_x/Q5_x, u the "
       "f16 half-ulp of the stored scale relative to it; one more step at "
       "Q4_0/Q5_0's short end; any clip for the searched scales of "
       "K-quants and IQ4)"},
      {"source-sqnr", Severity::kWarning,
       "SQNR against the source below the bit width's floor",
       "a quantized tensor whose SQNR against its source is below the "
       "floor for its format: far more error than rounding to that many "
       "bits gives (an error below 0 dB, worse than zeros, is an error)",
       "sqnr_db < 6.02 b + 1.76 - 12 for b = 2..8 bits: the b-bit uniform "
       "quantizer's SQNR over a full-scale signal (6.02 b + 1.76 dB), less "
       "12 dB because weights do not fill the range: gaussian weights "
       "whose group reaches k sigma lose 10 log10(k^2/3) + 1.76 dB, 11.4 dB "
       "at k = 5.3 (the largest of a million samples: a per-tensor "
       "scale). 2-bit 1.8 dB, 3-bit 7.8, 4-bit 13.8, 8-bit 37.9. "
       "Codebooks, lattices and float codes: 0 dB"},
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
