// An importance matrix as llama.cpp's llama-imatrix writes it: per weight
// tensor, the sum over calibration tokens of each input column's squared
// activation, and how many tokens reached it (per expert, for MoE tensors).
// llama-quantize weighs each column's squared rounding error by it; the diff
// does the same (core/diff/weighted_error.h).
//
// Two forms, told apart by the file's first bytes:
//  - GGUF (general.type "imatrix"): per tensor NAME, "NAME.in_sum2" (F32,
//    ne0 = columns, ne1 = experts) and "NAME.counts" (F32, ne0 = 1, ne1 =
//    experts), optionally "NAME.in_sum" (the plain sums, shaped as
//    in_sum2); keys imatrix.chunk_count, imatrix.chunk_size (uint32) and
//    imatrix.datasets (array of strings). Other tensors are passed over, as
//    llama-quantize does.
//  - legacy .dat: int32 entry count; per entry int32 name length, the name,
//    int32 ncall, int32 nval, float[nval] (each already sum / count *
//    ncall); then optionally int32 chunk count, int32 dataset name length
//    and the name. Experts are not recorded: one entry of nval values.
//
// Weights(e) are llama-quantize's, to the bit: GGUF in_sum2 / count in
// float (1 for every column of an expert whose count is 0, "never reached");
// legacy value / ncall in float (the value itself when ncall is 0).
//
// Every value read is checked at open, so the rest may rely on it: entry
// names unique and non-empty; columns, experts >= 1; counts finite, >= 0
// and whole; sums finite and >= 0; sizes and lengths within the file, with
// overflow-checked arithmetic. Refusals are DATA_LOSS HEADER_INVALID {file,
// rule}; the rules are listed in docs/errors.md.
//
// Thread safety: immutable after Open; safe to share.
#ifndef TENSORMORPH_CORE_IMATRIX_IMPORTANCE_MATRIX_H_
#define TENSORMORPH_CORE_IMATRIX_IMPORTANCE_MATRIX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/io/file_access.h"

namespace tensormorph {

enum class ImatrixForm { kGguf, kLegacy };

// Limits of a legacy file (the GGUF reader has its own).
inline constexpr int64_t kMaxImatrixNameBytes = 4096;
// The largest file Open reads (it is held in memory while parsed; a
// 256-expert model's is about 1.5 GiB).
inline constexpr uint64_t kMaxImatrixFileBytes = uint64_t{4} << 30;

struct ImatrixEntry {
  std::string name;  // EscapeUtf8 spelling (core/util/utf8.h)
  int64_t columns = 0;
  // GGUF: in_sum2's ne1. Legacy: 1 (the file does not say; a 3-D tensor of
  // E experts takes nval / E columns each, as llama-quantize does).
  int64_t experts = 1;
  // GGUF: tokens per expert. Legacy: the entry's ncall, once.
  std::vector<double> counts;
  // Chunks the entry saw: legacy ncall; GGUF ceil(max count / chunk_size)
  // (what llama-imatrix writes as ncall when it converts), 0 without a
  // chunk size.
  int64_t chunks = 0;
  bool has_in_sum = false;     // GGUF: the plain sums are present too
  std::vector<float> weights;  // experts * columns, expert-major

  // Experts whose count is 0 (GGUF only; legacy files never say).
  std::vector<int64_t> ExpertsNeverReached() const;
  // llama-quantize's weights of a tensor of `experts` experts, expert `e`:
  // the e-th of `experts` equal slices. REQUIRES: weights.size() divisible
  // by experts, 0 <= e < experts.
  absl::Span<const float> Weights(int64_t e, int64_t experts = 1) const;
};

class ImportanceMatrix {
 public:
  // Reads `path` through `access` (the server passes its roots' FileAccess,
  // so a file outside them is refused as a checkpoint is) and parses it.
  // Errors: those of ReadWholeFile (NOT_FOUND, PERMISSION_DENIED outside
  // the roots, FAILED_PRECONDITION when it changes while read, DATA_LOSS
  // over kMaxImatrixFileBytes); DATA_LOSS as Parse.
  static absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> Open(
      const std::string& path, const FileAccess& access);
  // Parses `bytes` (named `label` in messages), sniffing the form.
  // Errors: DATA_LOSS HEADER_INVALID {file, rule}; those of ParseGguf.
  static absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> Parse(
      absl::Span<const uint8_t> bytes, absl::string_view label);

  ImatrixForm form() const { return form_; }
  // imatrix.chunk_count, or the legacy trailer's chunk count (0: none).
  int64_t chunk_count() const { return chunk_count_; }
  int64_t chunk_size() const { return chunk_size_; }  // GGUF only; else 0
  const std::vector<std::string>& datasets() const { return datasets_; }
  // Sorted by name, names unique.
  const std::vector<ImatrixEntry>& entries() const { return entries_; }
  // The entry of that name, or null.
  const ImatrixEntry* Find(absl::string_view name) const;

  // What the forms' parsers fill (imatrix_forms.h).
  struct Contents {
    ImatrixForm form = ImatrixForm::kGguf;
    int64_t chunk_count = 0, chunk_size = 0;
    std::vector<std::string> datasets;
    std::vector<ImatrixEntry> entries;
  };
  explicit ImportanceMatrix(Contents c);

 private:
  ImatrixForm form_;
  int64_t chunk_count_, chunk_size_;
  std::vector<std::string> datasets_;
  std::vector<ImatrixEntry> entries_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IMATRIX_IMPORTANCE_MATRIX_H_
