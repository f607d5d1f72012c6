// Pairs the tensors of a quantized checkpoint with those of its source, by
// the rules of ReferenceResolver (reference_resolver.h).
#ifndef TENSORMORPH_CORE_DIFF_PAIRING_H_
#define TENSORMORPH_CORE_DIFF_PAIRING_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/diff/reference_resolver.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

struct TensorPair {
  const LogicalTensor* quant = nullptr;
  const LogicalTensor* ref = nullptr;
  RowMap row_map;  // empty = rows correspond one to one
};

struct Pairing {
  std::string method;  // "by name" or "GGUF -> Hugging Face names (llama)"
  // The same, structured (for the API): names translated from a GGUF's, and
  // its architecture ("?" when it names none; empty when not translated).
  bool translated = false;
  std::string architecture;
  std::vector<TensorPair> pairs;
  std::vector<std::string> only_in_quant;
  std::vector<std::string> only_in_ref;
  std::vector<std::string> shape_mismatches;  // "name: [a,b] vs [c,d]"
  // Paired by name and shape but with no elements (a zero dimension):
  // skipped, not diffed.
  std::vector<std::string> empty;
};

// Pairs every quantized tensor whose name matches `glob` (fnmatch; empty =
// all) with its reference by ReferenceResolver's rules (names translated
// and Q/K rows un-permuted for a llama GGUF against a Hugging Face source).
// A pairing may hold no pair: CheckPairing says why that is an error.
// Errors: INVALID_ARGUMENT when a Q/K row count does not divide into heads.
absl::StatusOr<Pairing> PairTensors(const Checkpoint& quant,
                                    const Checkpoint& ref,
                                    const std::string& glob = "");

// Refuses a diff that would pass vacuously or measure nonsense; `quant_label`
// and `ref_label` name the checkpoints in messages as the caller spelled
// them. OK when the arguments are the right way round and at least one pair
// is left to compare.
// Errors:
//  - INVALID_ARGUMENT "arguments probably reversed" when `quant` holds no
//    quantized tensor while `ref` does (checked first: reversed arguments
//    may pair perfectly and "succeed" with errors of hundreds of steps);
//  - INVALID_ARGUMENT when `glob` matches no tensor of `quant`, naming it;
//  - FAILED_PRECONDITION when no pair is left, saying why: no name found a
//    counterpart (with the names tried), every pair differs in shape, or
//    is empty (a few of each listed).
absl::Status CheckPairing(const Pairing& pairing, const Checkpoint& quant,
                          const Checkpoint& ref, const std::string& glob,
                          absl::string_view quant_label,
                          absl::string_view ref_label);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_PAIRING_H_
