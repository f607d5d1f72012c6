// GGUF metadata values: a typed key/value list read from the header.
#ifndef TENSORMORPH_CORE_FORMAT_GGUF_METADATA_H_
#define TENSORMORPH_CORE_FORMAT_GGUF_METADATA_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kNumGgufTypes = 13;

// "uint32", "string", "array", ...
absl::string_view GgufTypeName(GgufType type);
// Size in bytes of a fixed-size scalar type, 0 for string and array.
uint64_t GgufScalarSize(GgufType type);

// One key/value pair. `key` is the EscapeUtf8 spelling of the stored key
// (see gguf_reader.h). Scalars are decoded; strings are views into the
// mapped file, raw bytes that need not be UTF-8; arrays keep their element
// type, count and raw bytes (already validated) so that a 150,000-entry
// vocabulary costs nothing until asked.
struct GgufKv {
  std::string key;
  GgufType type;
  // Scalar payloads (by type: unsigned, signed, floating, bool).
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  absl::string_view str;
  // Arrays.
  GgufType elem_type = GgufType::kUint8;
  uint64_t count = 0;
  absl::Span<const uint8_t> raw;  // the elements' bytes (arrays only)

  // The value as an unsigned integer when it is one of the integer types and
  // non-negative.
  std::optional<uint64_t> AsUnsigned() const;
};

// Renders a value for people: scalars as written, strings quoted and
// escaped with EscapeUtf8 (so the result is valid UTF-8), arrays as
// "[a, b, c, ... (N items)]" with at most `max_items` items.
std::string GgufValueToString(const GgufKv& kv, size_t max_items = 8);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_GGUF_METADATA_H_
