// The convention rules of `tensormorph check` that need no lenient open:
// the GPTQ zero-point convention detected from the stored zeros, and
// compressed-tensors `ignore` / `targets` entries that match no module.
#ifndef TENSORMORPH_CORE_CHECK_CONVENTION_RULES_H_
#define TENSORMORPH_CORE_CHECK_CONVENTION_RULES_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/check/finding.h"
#include "core/format/checkpoint.h"
#include "core/quant/conventions/quant_config.h"

namespace tensormorph {

// gptq-zero-convention: for every GPTQ tensor (convention "gptq" = v1, or
// "gptq_v2", from checkpoint_format) whose qzeros codes are all one value,
// that value says how they were written: 2^(bits-1) - 1 is a symmetric
// zero stored v1 (zero - 1), 2^(bits-1) one stored v2. A checkpoint whose
// data says the other convention than its config gets one finding naming
// the first such tensor and how many there are. Asymmetric zeros (varying
// codes) and widths that straddle words (3-bit) say nothing and pass.
// Errors: those of GuardedRead.
absl::Status CheckGptqZeroConvention(const Checkpoint& ckpt,
                                     std::vector<Finding>* out);

// The quantization config the checkpoint was opened with, read again from
// the config files it names (Checkpoint::read_files), typed by
// ParseQuantConfigLenient (a key problem takes the key's default; a lenient
// open reports them, a strict one had none); a file that is not JSON reads
// as absent. nullopt for GGUF or when no config file exists.
// Errors: those of ReadWholeFile.
absl::StatusOr<std::optional<conventions::QuantConfig>> ReadQuantConfig(
    const Checkpoint& ckpt);

// ignore-pattern-unused: every compressed-tensors `ignore` entry and every
// config group's `targets` entry must match at least one module (a stored
// tensor's name without its last component), by the resolver's own
// matching (targets.h). Class names ("Linear") match any module and pass.
// `config_file` names the file in findings.
void CheckIgnorePatterns(const Checkpoint& ckpt,
                         const conventions::QuantConfig& config,
                         const std::string& config_file,
                         std::vector<Finding>* out);

// excluded-quantized: a ModelOpt module that exclude_modules (or ignore)
// excludes, yet whose weight is stored quantized (F8_E4M3, or NVFP4's U8
// with its scales). The resolver leaves such a module as stored; loaders
// build it unquantized and would read its codes as weights.
void CheckModelOptExcluded(const Checkpoint& ckpt,
                           const conventions::QuantConfig& config,
                           std::vector<Finding>* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_CONVENTION_RULES_H_
