// A fast printer of proto3 messages in protobuf's JSON mapping, printing
// what google::protobuf::util::MessageToJsonString prints with
// always_print_primitive_fields = true (protobuf 3.21), ~5x faster (see
// tests/bench/json_print_bench.cc): that printer serializes the message,
// re-reads the wire format through a chain of object writers and formats
// numbers with snprintf, which dominated the gateway's large replies (a
// 1024x1024 heatmap). Most of what remains is formatting the doubles.
//
// Contract: for a proto3 message the output is byte-identical to
// protobuf's, except for the order of map entries (below). In detail:
//  - fields by json_name, in declaration order; fields at their defaults
//    printed (scalars, strings, bytes, enums; repeated fields as [], maps
//    as {}); singular message fields (in a oneof or not) only when set,
//    in place;
//  - scalar members of oneofs, proto3 `optional` fields among them, only
//    when set, after all the others, in field-number order (protobuf's
//    printer appends them in wire order);
//  - 64-bit integers as quoted decimals, 32-bit ones as numbers; bool as
//    true/false; enums by name, a number without a name as the number;
//    bytes as standard base64 with padding;
//  - double as printf's %.15g when that reads back to the same double, else
//    %.17g; float as %.6g, else %.9g, and always %.9g for a subnormal float
//    (protobuf re-reads with strtof, which reports ERANGE for those);
//    NaN, Infinity and -Infinity as quoted strings;
//  - strings escaped as protobuf escapes them: " and \ by backslash, \b \t
//    \n \f \r, other C0 and C1 controls, DEL, < and >, and some invisible
//    code points (U+00AD, U+2028..U+202E, U+FEFF, ...) as \uXXXX (lowercase
//    hex, supplementary ones as surrogate pairs); everything else verbatim.
//    Bytes that are not UTF-8 are dropped as protobuf drops them (a lead
//    byte with the bytes read after it up to the first bad one);
//  - map entries sorted by key (protobuf prints them in hash order, which
//    differs from run to run; the set of entries is the same).
// Messages it does not cover are printed by protobuf itself: proto2
// messages and well-known types (google.protobuf.*, which have their own
// JSON forms), also when nested.
// Thread safety: a pure function.
#ifndef TENSORMORPH_PROTO_JSON_PRINT_H_
#define TENSORMORPH_PROTO_JSON_PRINT_H_

#include <google/protobuf/message.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tensormorph {

// Appends `message` as JSON to `*out`.
void AppendMessageJson(const google::protobuf::Message& message,
                       std::string* out);

// `message` as JSON.
std::string PrintMessageJson(const google::protobuf::Message& message);

// The pieces, for printers of one message type written by hand (the CLI's
// scalar replies), held to the same output: a double's or a float's value
// written at `out` (returning the end; at most kMaxJsonNumberChars
// characters), and a string's appended.
inline constexpr size_t kMaxJsonNumberChars = 32;
char* WriteJsonDouble(double value, char* out);
char* WriteJsonFloat(float value, char* out);
void AppendJsonString(std::string_view text, std::string* out);
// Whether AppendJsonString writes `text` as itself between quotes: printable
// ASCII that protobuf's printer does not escape.
bool JsonStringIsVerbatim(std::string_view text);

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_JSON_PRINT_H_
