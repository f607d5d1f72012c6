// The one mapping between absl::Status and grpc::Status: the code, the
// message, and the machine-readable reason (core/util/error_reason.h) as
// gRPC status details.
#ifndef TENSORMORPH_PROTO_STATUS_MAPPING_H_
#define TENSORMORPH_PROTO_STATUS_MAPPING_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tensormorph {

// The two code enums share their numeric values (both follow google.rpc.Code);
// these functions are the only place that relies on it.
//
// ToGrpcStatus: a failed status carries error_details (sent by gRPC as the
// trailer grpc-status-details-bin): a serialized google.rpc.Status
// {code, message, details: [google.rpc.ErrorInfo {reason, domain
// "tensormorph.dev", metadata}]}. The reason is the one attached, else the
// code's generic one (ReasonNameOf), so every error a client sees has one.
// A message over 2 KiB is cut (a trailer past 8 KiB is refused).
grpc::Status ToGrpcStatus(const absl::Status& status);

// FromGrpcStatus: the code and message, and the ErrorInfo's reason and
// metadata attached again as the reason payload (the code's generic reason
// without metadata is left implicit, so the status equals one made here
// with that code and message); a status without details
// (a peer that sends none, a refusal made before the handler ran) gets its
// code's generic reason, so ReasonNameOf is the same on both sides.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_STATUS_MAPPING_H_
