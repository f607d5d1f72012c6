// Whether a reply can cross the wire and be parsed back. protobuf only logs
// invalid UTF-8 in a proto3 string field when it serializes one, so gRPC
// sends such a reply and the client's parser refuses it: the service checks
// before it writes, and fails the call instead.
#ifndef TENSORMORPH_SERVER_WIRE_CHECK_H_
#define TENSORMORPH_SERVER_WIRE_CHECK_H_

#include <google/protobuf/message.h>

#include "absl/status/status.h"

namespace tensormorph {

// OK when every string field of `message`, at any depth (repeated, nested,
// map entries), is valid UTF-8 and the serialized size is within protobuf's
// 2 GiB limit. Walks the fields by reflection (bytes fields are exempt).
// Errors: INTERNAL naming the field path ("parts[0].name") and the rule,
// with the offending value escaped.
absl::Status CheckWireSafe(const google::protobuf::Message& message);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_WIRE_CHECK_H_
