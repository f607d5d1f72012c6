// The two forms' parsers behind ImportanceMatrix::Parse (one file each).
#ifndef TENSORMORPH_CORE_IMATRIX_IMATRIX_FORMS_H_
#define TENSORMORPH_CORE_IMATRIX_IMATRIX_FORMS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/imatrix/importance_matrix.h"

namespace tensormorph {

// Errors: DATA_LOSS HEADER_INVALID {file, rule}; those of ParseGguf.
absl::StatusOr<ImportanceMatrix::Contents> ParseGgufImatrix(
    absl::Span<const uint8_t> bytes, absl::string_view label);
// Errors: DATA_LOSS HEADER_INVALID {file, rule}.
absl::StatusOr<ImportanceMatrix::Contents> ParseLegacyImatrix(
    absl::Span<const uint8_t> bytes, absl::string_view label);

// DATA_LOSS HEADER_INVALID naming `label`, `what` and `rule`.
absl::Status ImatrixError(absl::string_view label, absl::string_view rule,
                          absl::string_view what);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IMATRIX_IMATRIX_FORMS_H_
