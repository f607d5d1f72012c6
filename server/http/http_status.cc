#include "server/http/http_status.h"

#include <nlohmann/json.hpp>

#include "core/util/error_reason.h"

namespace tensormorph {

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kCancelled:
      return 499;  // nginx's "client closed request", as grpc-gateway uses
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:  // UNKNOWN, INTERNAL, DATA_LOSS
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [key, value] : ReasonMetadataOf(status)) {
    metadata[key] = value;
  }
  const nlohmann::json body = {
      {"code", static_cast<int>(status.code())},
      {"message", std::string(status.message())},
      {"details", nlohmann::json::array(
                      {{{"@type", "type.googleapis.com/google.rpc.ErrorInfo"},
                        {"reason", ReasonNameOf(status)},
                        {"domain", std::string(kErrorDomain)},
                        {"metadata", std::move(metadata)}}})}};
  // A message quotes names out of files, which need not be UTF-8: replace
  // rather than throw.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tensormorph
