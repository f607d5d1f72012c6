// Machine-readable error reasons: a stable UPPER_SNAKE name (and a few
// key-value facts) attached to an absl::Status where the error is made, so a
// client can branch on "TENSOR_NOT_FOUND" instead of matching English.
//
// The reasons are one closed list, ErrorReasonTable() below; docs/errors.md
// is the same table for people (a test keeps the two equal). A reason is
// never renamed or reused: clients branch on it. Each comes with one code;
// ErrorReasonTable() says which, and what the metadata keys are.
//
// The reason travels as a Status payload (kErrorReasonPayloadUrl), so core
// needs nothing but Abseil; proto/status_mapping turns it into the
// google.rpc.ErrorInfo of gRPC's status details and back.
//
// Every error that leaves the server carries a reason: where none was
// attached, ReasonNameOf() derives the code's generic one (INVALID_ARGUMENT
// -> REQUEST_INVALID, NOT_FOUND -> NOT_FOUND, ...; ErrorReasonInfo::generic).
//
// Payloads survive copies and moves of a Status, but not a new Status made
// from code() and message(): code that rewraps a message keeps the payload
// with CopyReason().
//
// Thread safety: pure functions.
#ifndef TENSORMORPH_CORE_UTIL_ERROR_REASON_H_
#define TENSORMORPH_CORE_UTIL_ERROR_REASON_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

// The closed list. Append only; the order is the table's, nothing else.
enum class ErrorReason {
  // Specific reasons, attached where the error is made.
  kCheckpointNotFound,
  kTensorNotFound,
  kOutsideRoots,
  kHeaderInvalid,
  kIndexInvalid,
  kConventionMismatch,
  kSliceInvalid,
  kSliceOutOfRange,
  kIndexOutOfRange,
  kLimitExceeded,
  kFileChanged,
  kFileChangedDuringRead,
  kUnsupportedDtype,
  kUnsupportedConvention,
  kPageTokenInvalid,
  kEnumValueInvalid,
  kImatrixNotApplicable,
  kHttpFramingInvalid,
  // Generic reasons: one per code, for errors that carry no specific one.
  kRequestInvalid,
  kNotFound,
  kPermissionDenied,
  kOutOfRange,
  kDataLoss,
  kResourceExhausted,
  kFailedPrecondition,
  kUnimplemented,
  kUnauthenticated,
  kCancelled,
  kDeadlineExceeded,
  kUnavailable,
  kAborted,
  kAlreadyExists,
  kInternal,
  kUnknown,
};

struct ErrorReasonInfo {
  ErrorReason reason;
  absl::string_view name;  // "TENSOR_NOT_FOUND": ErrorInfo.reason
  absl::StatusCode code;   // the code it always comes with
  bool generic;            // derived from the code when none is attached
  absl::string_view when;  // one line, for docs/errors.md
  // ErrorInfo.metadata keys it carries, comma-separated ("" = none).
  absl::string_view metadata;
};

// Every reason, in ErrorReason order.
absl::Span<const ErrorReasonInfo> ErrorReasonTable();
const ErrorReasonInfo& InfoOf(ErrorReason reason);

// ErrorInfo.metadata: ordered key-value pairs (keys snake_case).
using ErrorMetadata = std::vector<std::pair<std::string, std::string>>;

// The Status payload's type URL (ours, never sent on the wire).
inline constexpr absl::string_view kErrorReasonPayloadUrl =
    "type.tensormorph.dev/tensormorph.ErrorReason";
// google.rpc.ErrorInfo.domain of every reason.
inline constexpr absl::string_view kErrorDomain = "tensormorph.dev";

// `status` with `reason` and `metadata` attached, replacing an earlier
// reason. An OK status is returned unchanged (it carries no payload).
absl::Status WithReason(absl::Status status, ErrorReason reason,
                        ErrorMetadata metadata = {});
// The same with a reason's name, as it came off the wire: a name this build
// does not know is kept as is (a newer server's reason).
absl::Status WithReasonName(absl::Status status, absl::string_view reason,
                            ErrorMetadata metadata = {});

// The attached reason's name; "" when none is attached (and for OK).
std::string AttachedReasonOf(const absl::Status& status);
// The attached reason's name, or else the code's generic one; "" for OK.
std::string ReasonNameOf(const absl::Status& status);
// The attached metadata; empty when none.
ErrorMetadata ReasonMetadataOf(const absl::Status& status);
// True when `status` carries `reason` (attached, or the code's generic one).
bool IsReason(const absl::Status& status, ErrorReason reason);

// The generic reason of a code (kInternal for codes outside the list).
ErrorReason GenericReason(absl::StatusCode code);

// `to` with `from`'s reason and metadata, when `from` has one attached: for
// code that rewraps a message into a new Status.
absl::Status CopyReason(const absl::Status& from, absl::Status to);

// Factories for the reasons made in more than one place.
// RESOURCE_EXHAUSTED LIMIT_EXCEEDED {limit, limit_value, asked}.
absl::Status LimitExceededError(absl::string_view message,
                                absl::string_view limit, int64_t limit_value,
                                int64_t asked);
// DATA_LOSS HEADER_INVALID {file, rule}: a file breaks a format rule.
absl::Status HeaderInvalidError(absl::string_view message,
                                absl::string_view file, absl::string_view rule);
// INVALID_ARGUMENT REQUEST_INVALID {field}: a request's option is refused;
// `field` names it (e.g. "group", "rows", "mode") so that a client can say
// which one without reading the message.
absl::Status RequestFieldError(absl::string_view field,
                               absl::string_view message);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_ERROR_REASON_H_
