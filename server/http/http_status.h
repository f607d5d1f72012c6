// How a gRPC status reads over HTTP: grpc-gateway's status mapping and its
// error body, so HTTP clients written for grpc-gateway services work here.
#ifndef TENSORMORPH_SERVER_HTTP_HTTP_STATUS_H_
#define TENSORMORPH_SERVER_HTTP_HTTP_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace tensormorph {

// The HTTP status grpc-gateway answers a code with
// (runtime.HTTPStatusFromCode): NOT_FOUND 404,
// INVALID_ARGUMENT/FAILED_PRECONDITION/OUT_OF_RANGE 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, RESOURCE_EXHAUSTED 429, CANCELLED 499, UNAVAILABLE
// 503, DEADLINE_EXCEEDED 504, ...; OK is 200.
int HttpStatusOf(absl::StatusCode code);

// grpc-gateway's error body (its google.rpc.Status as JSON):
//   {"code": 5, "message": "...", "details": [{"@type":
//    "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TENSOR_NOT_FOUND",
//    "domain": "tensormorph.dev", "metadata": {"tensor": "..."}}]}
// code is the google.rpc.Code number; the reason is the status's attached
// one or its code's generic one (core/util/error_reason.h), so there is
// always one. Invalid UTF-8 is replaced, so the body is always valid JSON.
std::string ErrorJson(const absl::Status& status);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_HTTP_STATUS_H_
