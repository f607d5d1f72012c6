// A request's strings checked before it is sent: proto3 `string` fields must
// be UTF-8, and one that is not is refused by the receiving side's parser
// with no word of which field (and logged by protobuf on this side). A
// path or tensor name given as raw bytes (a file named in Latin-1) is
// instead refused here, naming the field and the spelling the API takes:
// such bytes as `\xHH` (core/util/utf8.h), as listings spell them.
#ifndef TENSORMORPH_CLIENT_REQUEST_UTF8_H_
#define TENSORMORPH_CLIENT_REQUEST_UTF8_H_

#include <google/protobuf/message.h>

#include "absl/status/status.h"

namespace tensormorph {

// OK when every string field of `request`, at any depth (repeated fields
// and map values included), is valid UTF-8.
// Errors: INVALID_ARGUMENT REQUEST_INVALID {field: its path, as
// "checkpoint" or "indices.coords"} for the first that is not, showing
// its value escaped.
absl::Status CheckRequestUtf8(const google::protobuf::Message& request);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_REQUEST_UTF8_H_
