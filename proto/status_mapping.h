// The one mapping between absl::StatusCode and grpc::StatusCode.
#ifndef TENSORMORPH_PROTO_STATUS_MAPPING_H_
#define TENSORMORPH_PROTO_STATUS_MAPPING_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tensormorph {

// The two enums share their numeric values (both follow google.rpc.Code);
// these functions are the only place that relies on it.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_STATUS_MAPPING_H_
