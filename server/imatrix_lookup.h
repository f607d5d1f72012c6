// Importance matrices named in requests (GetImportanceMatrix,
// QuantDiffRequest.imatrix): opened beneath the server's roots as a
// checkpoint's files are, and converted to the API's messages.
#ifndef TENSORMORPH_SERVER_IMATRIX_LOOKUP_H_
#define TENSORMORPH_SERVER_IMATRIX_LOOKUP_H_

#include <sys/stat.h>

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
// there); those of ImportanceMatrix::Open. `file`, when given, receives
// the stat(2) of the file as it was resolved (st_ino 0 in remote storage),
// for GetImportanceMatrixResponse.identity.
absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> OpenImportanceMatrix(
    const PathSandbox& sandbox, absl::string_view requested,
    absl::string_view field, struct stat* file = nullptr);

// GetImportanceMatrix's reply for `m`, read from `path` (as requested), the
// file `file` (its identity, unless st_ino is 0).
void FillImportanceMatrix(const ImportanceMatrix& m, const std::string& path,
                          const struct stat& file,
                          v1::GetImportanceMatrixResponse* out);

v1::ImatrixUse ImatrixUseToProto(ImatrixUse use);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_IMATRIX_LOOKUP_H_
