// Calls refused, counted by reason for /metrics
// (tensormorph_refused_calls_total{reason}): gRPC calls by the status code
// they were refused with (call_metrics_interceptor.h counts them once, at
// their close), HTTP requests the gateway refused itself by the reason it
// names. An operator sees a client probing tokens, a limit being hit or a
// page on a foreign site trying the port, without reading the log.
#ifndef TENSORMORPH_SERVER_REFUSALS_H_
#define TENSORMORPH_SERVER_REFUSALS_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tensormorph {

// The reasons, as the metric's label and the log's refused= field:
//   auth           UNAUTHENTICATED: no token, or a wrong one
//   forbidden      PERMISSION_DENIED: a path outside the roots, a
//                  cross-origin call from an origin not allowed
//   limit          RESOURCE_EXHAUSTED: a named limit
//   bad_request    INVALID_ARGUMENT, OUT_OF_RANGE; HTTP: a malformed
//                  request, no such endpoint, a wrong method or type
//   unimplemented  UNIMPLEMENTED: no such method, an unsupported encoding
//   draining       UNAVAILABLE from the admission interceptor or the
//                  gateway: the server is shutting down (an UNAVAILABLE
//                  from storage is an error, not a refusal)
//   host           HTTP: a Host header the server does not answer as
//   framing        HTTP: ambiguous Content-Length / Transfer-Encoding
// RefusalReason: the reason for a call a handler refused with `code`, ""
// when `code` is not a refusal (OK, NOT_FOUND, UNAVAILABLE, a
// cancellation...).
absl::string_view RefusalReason(grpc::StatusCode code);

// Counts one refusal under `reason` (one of the above; any other counts as
// "other"). Process-wide, as the log is. Thread-safe, lock-free.
void CountRefusal(absl::string_view reason);

// Every reason with a non-zero count, in the order above.
std::vector<std::pair<std::string, int64_t>> RefusalCounts();

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_REFUSALS_H_
