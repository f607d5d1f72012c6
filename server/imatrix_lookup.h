// Importance matrices named in requests (GetImportanceMatrix,
// QuantDiffRequest.imatrix): opened beneath the server's roots as a
// checkpoint's files are, and converted to the API's messages.
#ifndef TENSORMORPH_SERVER_IMATRIX_LOOKUP_H_
#define TENSORMORPH_SERVER_IMATRIX_LOOKUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/diff/weighted_error.h"
#include "core/imatrix/importance_matrix.h"
#include "server/path_sandbox.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// What the sandbox's messages call the file (PathSandbox::Resolve's noun).
inline constexpr absl::string_view kImportanceMatrixNoun = "importance matrix";

// The matrix `requested` names, resolved by `sandbox` (roots, symlinks that
// stay beneath them) and read through its FileAccess. Not cached: a file
// of a few megabytes, read once per call.
// Errors: INVALID_ARGUMENT REQUEST_INVALID {field: `field`} for an empty
// path; those of PathSandbox::Resolve, saying "importance matrix" where a
// checkpoint's say "checkpoint" (PERMISSION_DENIED OUTSIDE_ROOTS {path};
// NOT_FOUND {path}, not CHECKPOINT_NOT_FOUND, for a file that is not
// there); those of ImportanceMatrix::Open.
absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> OpenImportanceMatrix(
    const PathSandbox& sandbox, absl::string_view requested,
    absl::string_view field);

// GetImportanceMatrix's reply for `m`, read from `path` (as requested).
void FillImportanceMatrix(const ImportanceMatrix& m, const std::string& path,
                          v1::GetImportanceMatrixResponse* out);

v1::ImatrixUse ImatrixUseToProto(ImatrixUse use);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_IMATRIX_LOOKUP_H_
