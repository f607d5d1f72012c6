#include "core/util/error_reason.h"

#include <cstdint>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

using Code = absl::StatusCode;

// The one list (docs/errors.md is generated from nothing: a test compares
// it with this table).
constexpr ErrorReasonInfo kTable[] = {
    {ErrorReason::kCheckpointNotFound, "CHECKPOINT_NOT_FOUND", Code::kNotFound,
     false, "no checkpoint at that path inside the roots", "checkpoint"},
    {ErrorReason::kTensorNotFound, "TENSOR_NOT_FOUND", Code::kNotFound, false,
     "the checkpoint has no tensor (or stored part) of that name",
     "checkpoint, tensor"},
    {ErrorReason::kOutsideRoots, "OUTSIDE_ROOTS", Code::kPermissionDenied,
     false, "a path resolves outside the server's roots", "path"},
    {ErrorReason::kHeaderInvalid, "HEADER_INVALID", Code::kDataLoss, false,
     "a file breaks a rule of its format (header, metadata, offsets); rule "
     "names which (the table below)",
     "file, rule, tensor, key, expected, actual"},
    {ErrorReason::kIndexInvalid, "INDEX_INVALID", Code::kDataLoss, false,
     "a sharded checkpoint's index (model.safetensors.index.json) or split "
     "set breaks a rule",
     "file, rule"},
    {ErrorReason::kConventionMismatch, "CONVENTION_MISMATCH", Code::kDataLoss,
     false,
     "a quantization convention's parts contradict it (shape, dtype, config)",
     "convention"},
    {ErrorReason::kSliceInvalid, "SLICE_INVALID", Code::kInvalidArgument, false,
     "a slice expression does not parse or has the wrong rank", ""},
    {ErrorReason::kSliceOutOfRange, "SLICE_OUT_OF_RANGE", Code::kOutOfRange,
     false, "a slice index lies outside its dimension", "dimension, size"},
    {ErrorReason::kIndexOutOfRange, "INDEX_OUT_OF_RANGE", Code::kOutOfRange,
     false, "a scalar or leading index lies outside its dimension",
     "dimension, size"},
    {ErrorReason::kLimitExceeded, "LIMIT_EXCEEDED", Code::kResourceExhausted,
     false, "a request or the server's load passes one of its limits",
     "limit, limit_value, asked"},
    {ErrorReason::kFileChanged, "FILE_CHANGED", Code::kFailedPrecondition,
     false,
     "a file changed while it was opened or mapped (a read past its new end)",
     "file"},
    {ErrorReason::kFileChangedDuringRead, "FILE_CHANGED_DURING_READ",
     Code::kAborted, false,
     "a file's (or remote object's) identity changed between the start and "
     "end of a read, or another process held it open for writing: discard "
     "the data and read again",
     "file"},
    {ErrorReason::kUnsupportedDtype, "UNSUPPORTED_DTYPE", Code::kUnimplemented,
     false, "a dtype Tensormorph does not decode", "dtype"},
    {ErrorReason::kUnsupportedConvention, "UNSUPPORTED_CONVENTION",
     Code::kUnimplemented, false,
     "a quantization convention or option Tensormorph does not decode",
     "convention"},
    {ErrorReason::kPageTokenInvalid, "PAGE_TOKEN_INVALID",
     Code::kInvalidArgument, false,
     "a page_token that is not a previous page's next_page_token", ""},
    {ErrorReason::kEnumValueInvalid, "ENUM_VALUE_INVALID",
     Code::kInvalidArgument, false,
     "a request enum field holds a number that is not one of its values",
     "field"},
    {ErrorReason::kImatrixNotApplicable, "IMATRIX_NOT_APPLICABLE",
     Code::kFailedPrecondition, false,
     "an importance matrix asked to weigh one tensor (a heatmap's) has no "
     "entry of its name (use MISSING) or one of another size (MISMATCH)",
     "path, tensor, use"},
    {ErrorReason::kHttpFramingInvalid, "HTTP_FRAMING_INVALID",
     Code::kInvalidArgument, false,
     "an HTTP request whose body cannot be told apart from what follows it, "
     "or cannot be read (a malformed chunked body, one shorter than its "
     "Content-Length); rule names which (HTTP framing rules, below)",
     "rule"},
    {ErrorReason::kRequestInvalid, "REQUEST_INVALID", Code::kInvalidArgument,
     true,
     "a malformed request (any other INVALID_ARGUMENT); where one option is "
     "refused (statistics and heatmaps), field names it",
     "field"},
    {ErrorReason::kNotFound, "NOT_FOUND", Code::kNotFound, true,
     "something else named does not exist; where it is a file (an "
     "importance matrix), path names it",
     "path"},
    {ErrorReason::kPermissionDenied, "PERMISSION_DENIED",
     Code::kPermissionDenied, true, "a path the server may not read", ""},
    {ErrorReason::kOutOfRange, "OUT_OF_RANGE", Code::kOutOfRange, true,
     "any other OUT_OF_RANGE", ""},
    {ErrorReason::kDataLoss, "DATA_LOSS", Code::kDataLoss, true,
     "a corrupt file (any other DATA_LOSS)", ""},
    {ErrorReason::kResourceExhausted, "RESOURCE_EXHAUSTED",
     Code::kResourceExhausted, true, "any other RESOURCE_EXHAUSTED", ""},
    {ErrorReason::kFailedPrecondition, "FAILED_PRECONDITION",
     Code::kFailedPrecondition, true, "any other FAILED_PRECONDITION", ""},
    {ErrorReason::kUnimplemented, "UNIMPLEMENTED", Code::kUnimplemented, true,
     "any other UNIMPLEMENTED (an unknown method)", ""},
    {ErrorReason::kUnauthenticated, "UNAUTHENTICATED", Code::kUnauthenticated,
     true, "a missing or wrong bearer token", ""},
    {ErrorReason::kCancelled, "CANCELLED", Code::kCancelled, true,
     "the call was cancelled (by its client or the server)", ""},
    {ErrorReason::kDeadlineExceeded, "DEADLINE_EXCEEDED",
     Code::kDeadlineExceeded, true, "the call's deadline passed", ""},
    {ErrorReason::kUnavailable, "UNAVAILABLE", Code::kUnavailable, true,
     "the server is unreachable or draining: retry (elsewhere)", ""},
    {ErrorReason::kAborted, "ABORTED", Code::kAborted, true, "any ABORTED", ""},
    {ErrorReason::kAlreadyExists, "ALREADY_EXISTS", Code::kAlreadyExists, true,
     "any ALREADY_EXISTS", ""},
    {ErrorReason::kInternal, "INTERNAL", Code::kInternal, true,
     "a bug or a broken transport (any INTERNAL)", ""},
    {ErrorReason::kUnknown, "UNKNOWN", Code::kUnknown, true, "any UNKNOWN", ""},
};

// A metadata value longer than this is cut: the details travel in a
// trailer, which a peer refuses past 8 KiB.
constexpr size_t kMaxValueBytes = 512;

// The payload: netstrings ("<length>:<bytes>,"), the reason's name first,
// then key and value alternately. Any bytes survive.
void AppendNetstring(std::string& out, absl::string_view s) {
  absl::StrAppend(&out, s.size(), ":", s, ",");
}

std::optional<absl::string_view> ReadNetstring(absl::string_view& in) {
  const size_t colon = in.find(':');
  if (colon == absl::string_view::npos) return std::nullopt;
  uint64_t size = 0;
  if (!absl::SimpleAtoi(in.substr(0, colon), &size)) return std::nullopt;
  if (size > in.size() - colon - 1 || in.size() - colon - 1 - size < 1 ||
      in[colon + 1 + size] != ',') {
    return std::nullopt;
  }
  const absl::string_view s = in.substr(colon + 1, size);
  in.remove_prefix(colon + 2 + size);
  return s;
}

struct Decoded {
  std::string reason;
  ErrorMetadata metadata;
};

std::optional<Decoded> Decode(const absl::Status& status) {
  const auto payload = status.GetPayload(kErrorReasonPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  const std::string flat(*payload);
  absl::string_view in = flat;
  std::optional<absl::string_view> reason = ReadNetstring(in);
  if (!reason.has_value() || reason->empty()) return std::nullopt;
  Decoded out{std::string(*reason), {}};
  while (!in.empty()) {
    std::optional<absl::string_view> key = ReadNetstring(in);
    std::optional<absl::string_view> value = ReadNetstring(in);
    if (!key.has_value() || !value.has_value()) break;
    out.metadata.emplace_back(*key, *value);
  }
  return out;
}

}  // namespace

absl::Span<const ErrorReasonInfo> ErrorReasonTable() { return kTable; }

const ErrorReasonInfo& InfoOf(ErrorReason reason) {
  return kTable[static_cast<size_t>(reason)];
}

absl::Status WithReasonName(absl::Status status, absl::string_view reason,
                            ErrorMetadata metadata) {
  if (status.ok() || reason.empty()) return status;
  std::string payload;
  AppendNetstring(payload, reason);
  for (auto& [key, value] : metadata) {
    AppendNetstring(payload, key);
    AppendNetstring(payload,
                    absl::string_view(value).substr(0, kMaxValueBytes));
  }
  status.SetPayload(kErrorReasonPayloadUrl, absl::Cord(std::move(payload)));
  return status;
}

absl::Status WithReason(absl::Status status, ErrorReason reason,
                        ErrorMetadata metadata) {
  return WithReasonName(std::move(status), InfoOf(reason).name,
                        std::move(metadata));
}

std::string AttachedReasonOf(const absl::Status& status) {
  std::optional<Decoded> d = Decode(status);
  return d.has_value() ? std::move(d->reason) : std::string();
}

std::string ReasonNameOf(const absl::Status& status) {
  if (status.ok()) return "";
  std::string attached = AttachedReasonOf(status);
  if (!attached.empty()) return attached;
  return std::string(InfoOf(GenericReason(status.code())).name);
}

ErrorMetadata ReasonMetadataOf(const absl::Status& status) {
  std::optional<Decoded> d = Decode(status);
  return d.has_value() ? std::move(d->metadata) : ErrorMetadata();
}

bool IsReason(const absl::Status& status, ErrorReason reason) {
  return !status.ok() && ReasonNameOf(status) == InfoOf(reason).name;
}

ErrorReason GenericReason(absl::StatusCode code) {
  for (const ErrorReasonInfo& info : kTable) {
    if (info.generic && info.code == code) return info.reason;
  }
  return ErrorReason::kInternal;
}

absl::Status CopyReason(const absl::Status& from, absl::Status to) {
  if (to.ok()) return to;
  if (auto payload = from.GetPayload(kErrorReasonPayloadUrl)) {
    to.SetPayload(kErrorReasonPayloadUrl, *std::move(payload));
  }
  return to;
}

absl::Status LimitExceededError(absl::string_view message,
                                absl::string_view limit, int64_t limit_value,
                                int64_t asked) {
  return WithReason(absl::ResourceExhaustedError(message),
                    ErrorReason::kLimitExceeded,
                    {{"limit", std::string(limit)},
                     {"limit_value", absl::StrCat(limit_value)},
                     {"asked", absl::StrCat(asked)}});
}

absl::Status HeaderInvalidError(absl::string_view message,
                                absl::string_view file,
                                absl::string_view rule) {
  return WithReason(absl::DataLossError(message), ErrorReason::kHeaderInvalid,
                    {{"file", std::string(file)}, {"rule", std::string(rule)}});
}

absl::Status RequestFieldError(absl::string_view field,
                               absl::string_view message) {
  return WithReason(absl::InvalidArgumentError(message),
                    ErrorReason::kRequestInvalid,
                    {{"field", std::string(field)}});
}

}  // namespace tensormorph
