// One ScalarInspection as JSON, written field by field without reflection:
// `tensormorph --json scalar` prints 100,000 of them (57 MB) and the
// reflective printer (proto/json_print) spent most of the command's time on
// finding fields rather than formatting them.
//
// Contract: byte-identical to AppendMessageJson of the same message (which
// prints what protobuf's JSON mapping prints). The fields are named here, so
// the messages' fields are pinned by tests/client/cli/scalar_json_test.cc:
// a field added to ScalarInspection, GridCodeword, Param or SourceScalar
// fails it until it is written here too.
// Thread safety: a pure function.
#ifndef TENSORMORPH_CLIENT_CLI_SCALAR_JSON_H_
#define TENSORMORPH_CLIENT_CLI_SCALAR_JSON_H_

#include <string>

#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// Appends `s` as JSON to `*out`.
void AppendScalarJson(const v1::ScalarInspection& s, std::string* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_SCALAR_JSON_H_
