// Strict JSON parsing for headers and configs from untrusted files.
#ifndef TENSORMORPH_CORE_FORMAT_JSON_HEADER_H_
#define TENSORMORPH_CORE_FORMAT_JSON_HEADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tensormorph {

inline constexpr int kMaxJsonDepth = 64;

// The type names nlohmann's SAX interface asks of a handler.
struct JsonSaxTypes {
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;
};

// Which of ParseStrictJson's rules a refused text broke, for a caller that
// names the rule in its error's metadata (the message already says it).
enum class JsonRefusal {
  kSyntax,        // not JSON (strings that are not UTF-8 included)
  kDuplicateKey,  // an object holds a key twice
  kTooDeep,       // nesting deeper than kMaxJsonDepth
};

// Parses `text` as one JSON value, rejecting what nlohmann accepts silently:
// duplicate keys in an object and nesting deeper than kMaxJsonDepth. Strings
// must be valid UTF-8. `what` names the document in messages ("file
// 'model.safetensors': header").
// Errors: DATA_LOSS naming the rule and the byte position; the rule is also
// written to *refusal when it is not null, and for kDuplicateKey the keys
// leading to the duplicate, outermost first, ending in it, to
// *duplicate_path when that is not null ({"w"} for a top-level "w" given
// twice, {"w", "dtype"} for a "dtype" given twice in "w"'s object).
absl::StatusOr<nlohmann::json> ParseStrictJson(
    absl::string_view text, absl::string_view what,
    JsonRefusal* refusal = nullptr,
    std::vector<std::string>* duplicate_path = nullptr);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_JSON_HEADER_H_
