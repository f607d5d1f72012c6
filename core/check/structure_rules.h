// The structure rules of `tensormorph check`, found in the files of a
// leniently opened checkpoint (OpenOptions::lenient) rather than by
// refusing to open it: the index against its shards, quantized weights
// against their companions, companion shapes and FP8 scale layouts against
// the config, config keys, and compressed-tensors' quantization_status and
// format against what is stored.
#ifndef TENSORMORPH_CORE_CHECK_STRUCTURE_RULES_H_
#define TENSORMORPH_CORE_CHECK_STRUCTURE_RULES_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/check/finding.h"
#include "core/format/checkpoint.h"
#include "core/quant/conventions/quant_config.h"

namespace tensormorph {

// The module of a tensor name: the name less its last dotted component
// ("m.qweight" and "m.weight" are both "m").
std::string ModuleOfTensor(const std::string& name);

// quantization-status and quantization-format, for a compressed-tensors
// config: each module with a weight_scale stores its weight the way
// `quantization_status` ("compressed": in `format`; "frozen",
// "initialized", "calibration": uncompressed, as dense floats) and its
// scheme's `format` say (pack-quantized: I32 weight_packed; nvfp4/mxfp4:
// U8 weight_packed; int-/naive-quantized: integer weight codes, signed
// (I8) when symmetric; float-quantized: FP8 weight codes). One finding per
// rule, naming the first such module's weight and how many there are.
// Adds the modules found to `explained`: their resolver problems are the
// same cause, not more findings. Adds the modules saved uncompressed as
// their status says to `dense`: no convention resolves their float
// weights, and that is no problem either (they are still plain tensors to
// check).
void CheckCompressedTensorsStorage(const Checkpoint& ckpt,
                                   const conventions::QuantConfig& config,
                                   const std::string& config_file,
                                   std::set<std::string>* explained,
                                   std::set<std::string>* dense,
                                   std::vector<Finding>* out);

// The problems a lenient open recorded (Checkpoint::problems()) as
// findings of their rules (shard-missing, index-tensor-missing,
// shard-tensor-unindexed, missing-companion, orphan-companion,
// companion-shape, fp8-scale-layout, config-key, unresolved-tensor), less
// those of modules in `explained`.
void ReportOpenProblems(const Checkpoint& ckpt,
                        const std::set<std::string>& explained,
                        std::vector<Finding>* out);

// missing-companion and orphan-companion that resolution cannot see,
// since it starts from a tensor that is absent: codes with no scale
// (compressed-tensors' weight_packed or integer/FP8 weight without its
// weight_scale) and companions with no weight (GPTQ/AWQ qzeros, scales,
// g_idx without qweight; compressed-tensors' weight_zero_point, weight_g_idx,
// weight_shape without weight_scale; FP8's weight_scale_inv without
// weight). Only for the method the config names (or FP8 when detected);
// modules in `explained` or with an open problem are left to those.
void CheckCompanions(const Checkpoint& ckpt,
                     const std::optional<conventions::QuantConfig>& config,
                     const std::set<std::string>& explained,
                     std::vector<Finding>* out);

// The modules whose tensors the value rules must not decode: those a
// structure finding names (their stored tensors were not resolved, and
// decoded as plain tensors would say nothing true).
std::set<std::string> ModulesNotDecoded(const std::vector<Finding>& found);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_STRUCTURE_RULES_H_
