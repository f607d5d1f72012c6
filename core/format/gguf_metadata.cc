#include "core/format/gguf_metadata.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/io/byte_reader.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

constexpr absl::string_view kTypeNames[] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64"};

// Renders one already-validated value of `type` at the reader's position.
void AppendValue(ByteReader& r, GgufType type, size_t max_items,
                 std::string* out);

template <typename T>
T Get(ByteReader& r) {
  T v{};
  r.Read(&v);
  return v;
}

void AppendArray(ByteReader& r, size_t max_items, std::string* out) {
  const GgufType elem = static_cast<GgufType>(Get<uint32_t>(r));
  const uint64_t n = Get<uint64_t>(r);
  out->append("[");
  for (uint64_t k = 0; k < n; ++k) {
    if (k == max_items) {
      absl::StrAppend(out, ", ... (", n, " items)");
      break;
    }
    if (k > 0) out->append(", ");
    AppendValue(r, elem, max_items, out);
  }
  out->append("]");
}

void AppendValue(ByteReader& r, GgufType type, size_t max_items,
                 std::string* out) {
  switch (type) {
    case GgufType::kUint8:
      absl::StrAppend(out, Get<uint8_t>(r));
      return;
    case GgufType::kInt8:
      absl::StrAppend(out, Get<int8_t>(r));
      return;
    case GgufType::kUint16:
      absl::StrAppend(out, Get<uint16_t>(r));
      return;
    case GgufType::kInt16:
      absl::StrAppend(out, Get<int16_t>(r));
      return;
    case GgufType::kUint32:
      absl::StrAppend(out, Get<uint32_t>(r));
      return;
    case GgufType::kInt32:
      absl::StrAppend(out, Get<int32_t>(r));
      return;
    case GgufType::kUint64:
      absl::StrAppend(out, Get<uint64_t>(r));
      return;
    case GgufType::kInt64:
      absl::StrAppend(out, Get<int64_t>(r));
      return;
    case GgufType::kFloat32:
      absl::StrAppend(out, Get<float>(r));
      return;
    case GgufType::kFloat64:
      absl::StrAppend(out, Get<double>(r));
      return;
    case GgufType::kBool:
      out->append(Get<uint8_t>(r) != 0 ? "true" : "false");
      return;
    case GgufType::kString: {
      const uint64_t len = Get<uint64_t>(r);
      absl::string_view s;
      r.ReadBytes(len, &s);
      absl::StrAppend(out, "\"", EscapeUtf8(s), "\"");
      return;
    }
    case GgufType::kArray:
      AppendArray(r, max_items, out);
      return;
  }
}

}  // namespace

absl::string_view GgufTypeName(GgufType type) {
  const auto i = static_cast<uint32_t>(type);
  return i < kNumGgufTypes ? kTypeNames[i] : "invalid";
}

uint64_t GgufScalarSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

std::optional<uint64_t> GgufKv::AsUnsigned() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
      return u;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      if (i >= 0) return static_cast<uint64_t>(i);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::string GgufValueToString(const GgufKv& kv, size_t max_items) {
  std::string out;
  switch (kv.type) {
    case GgufType::kString:
      absl::StrAppend(&out, "\"", EscapeUtf8(kv.str), "\"");
      break;
    case GgufType::kArray: {
      // `raw` starts at the first element; re-render from a synthetic header.
      out.append("[");
      ByteReader r(kv.raw);
      for (uint64_t k = 0; k < kv.count; ++k) {
        if (k == max_items) {
          absl::StrAppend(&out, ", ... (", kv.count, " items)");
          break;
        }
        if (k > 0) out.append(", ");
        AppendValue(r, kv.elem_type, max_items, &out);
      }
      out.append("]");
      break;
    }
    case GgufType::kBool:
      out = kv.u != 0 ? "true" : "false";
      break;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      absl::StrAppend(&out, kv.f);
      break;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      absl::StrAppend(&out, kv.i);
      break;
    default:
      absl::StrAppend(&out, kv.u);
      break;
  }
  return out;
}

}  // namespace tensormorph
