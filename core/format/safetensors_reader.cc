#include "core/format/safetensors_reader.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/format/header_rule.h"
#include "core/format/json_header.h"
#include "core/format/safetensors_fast_header.h"
#include "core/util/checked_math.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

using nlohmann::json;

bool IsSpace(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// DATA_LOSS HEADER_INVALID naming the rule broken; `extra` is the metadata
// beyond file and rule (header_rule.h).
absl::Status Corrupt(absl::string_view file, HeaderRule rule,
                     absl::string_view msg, ErrorMetadata extra = {}) {
  // A file name is any bytes; the message is bound for protobuf.
  return HeaderRuleError(rule,
                         absl::StrCat("file '", EscapeUtf8(file), "': ", msg),
                         file, std::move(extra));
}

// What a refusal about one tensor adds to file and rule.
ErrorMetadata TensorMetadata(const std::string& name) {
  return {{"tensor", name}};
}

// What a duplicate key adds to file and rule, from its path in the header
// (ParseStrictJson): a tensor named twice, or a key given twice in one
// tensor's entry, names the tensor; a key twice in __metadata__ names the
// key.
ErrorMetadata DuplicateMetadata(const std::vector<std::string>& path) {
  if (path.empty()) return {};
  if (path[0] == "__metadata__") {
    return path.size() >= 2 ? ErrorMetadata{{"key", path[1]}} : ErrorMetadata{};
  }
  ErrorMetadata m = TensorMetadata(path[0]);
  if (path.size() >= 2) m.push_back({"key", path[1]});
  return m;
}

// Reads a JSON integer in [0, kMaxSafetensorsExtent].
bool ReadExtent(const json& v, uint64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  }
  return *out <= kMaxSafetensorsExtent;
}

using Entry = SafetensorsEntry;

absl::StatusOr<Entry> ParseEntry(absl::string_view file,
                                 const std::string& name, const json& info) {
  // Messages are built only on the error paths: an open parses thousands.
  const auto where = [&name] { return absl::StrCat("tensor '", name, "'"); };
  if (name.empty() || name.size() > kMaxTensorNameBytes) {
    return Corrupt(file, HeaderRule::kNameLength,
                   absl::StrCat("tensor name length ", name.size(),
                                " is outside [1, ", kMaxTensorNameBytes, "]"));
  }
  if (!info.is_object()) {
    return Corrupt(file, HeaderRule::kEntry,
                   absl::StrCat(where(),
                                ": expected an object with "
                                "dtype, shape and data_offsets, got ",
                                info.type_name()),
                   TensorMetadata(name));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(field)) {
      return Corrupt(file, HeaderRule::kEntry,
                     absl::StrCat(where(), ": missing '", field, "'"),
                     TensorMetadata(name));
    }
  }
  const json& dt = info["dtype"];
  if (!dt.is_string()) {
    return Corrupt(
        file, HeaderRule::kDtype,
        absl::StrCat(where(), ": dtype must be a string, got ", dt.type_name()),
        TensorMetadata(name));
  }
  const std::string& dtype_name = dt.get_ref<const std::string&>();
  auto dtype = DTypeFromSafetensorsName(dtype_name);
  if (!dtype) {
    return WithReason(absl::UnimplementedError(absl::StrCat(
                          "file '", file, "': ", where(), ": dtype '",
                          dtype_name, "' is not supported")),
                      ErrorReason::kUnsupportedDtype, {{"dtype", dtype_name}});
  }
  const json& shape = info["shape"];
  if (!shape.is_array()) {
    return Corrupt(file, HeaderRule::kShape,
                   absl::StrCat(where(), ": shape must be an array, got ",
                                shape.type_name()),
                   TensorMetadata(name));
  }
  if (shape.size() > kMaxTensorRank) {
    return Corrupt(file, HeaderRule::kRank,
                   absl::StrCat(where(), ": rank ", shape.size(),
                                " exceeds the limit of ", kMaxTensorRank),
                   TensorMetadata(name));
  }
  Entry e;
  e.tensor.name = name;
  e.tensor.dtype = *dtype;
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t d;
    if (!ReadExtent(shape[i], &d)) {
      return Corrupt(
          file, HeaderRule::kShape,
          absl::StrCat(where(), ": shape[", i, "] = ", shape[i].dump(),
                       " is not an integer in [0, 2^48]"),
          TensorMetadata(name));
    }
    e.tensor.shape.push_back(static_cast<int64_t>(d));
  }
  const json& offs = info["data_offsets"];
  if (!offs.is_array() || offs.size() != 2 || !ReadExtent(offs[0], &e.begin) ||
      !ReadExtent(offs[1], &e.end)) {
    return Corrupt(file, HeaderRule::kDataOffsets,
                   absl::StrCat(where(), ": data_offsets = ", offs.dump(),
                                " is not two integers in [0, 2^48]"),
                   TensorMetadata(name));
  }
  return e;
}

// The header through a JSON document: slower, but every way a header can be
// wrong gets its own message.
absl::Status ReadHeaderDocument(
    absl::string_view text, absl::string_view label,
    std::vector<std::pair<std::string, std::string>>* metadata,
    std::vector<Entry>* entries) {
  JsonRefusal refusal = JsonRefusal::kSyntax;
  std::vector<std::string> duplicate;
  auto parsed = ParseStrictJson(
      text, absl::StrCat("file '", label, "': header"), &refusal, &duplicate);
  if (!parsed.ok()) {
    // Bytes that are not UTF-8 anywhere in the header are that rule, even
    // where the JSON broke first (the parser checks only strings).
    const HeaderRule rule =
        !IsValidUtf8(text)                      ? HeaderRule::kHeaderUtf8
        : refusal == JsonRefusal::kDuplicateKey ? HeaderRule::kDuplicateKey
        : refusal == JsonRefusal::kTooDeep      ? HeaderRule::kHeaderDepth
                                                : HeaderRule::kHeaderJson;
    return HeaderRuleError(rule, parsed.status().message(), label,
                           rule == HeaderRule::kDuplicateKey
                               ? DuplicateMetadata(duplicate)
                               : ErrorMetadata{});
  }
  const json& root = *parsed;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        return Corrupt(label, HeaderRule::kMetadata,
                       absl::StrCat("__metadata__ must be an object of "
                                    "strings, got ",
                                    value.type_name()));
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return Corrupt(
              label, HeaderRule::kMetadata,
              absl::StrCat("__metadata__['", mk, "'] must be a string, got ",
                           mv.type_name()),
              {{"key", mk}});
        }
        metadata->emplace_back(mk, mv.get<std::string>());
      }
      continue;
    }
    auto e = ParseEntry(label, key, value);
    if (!e.ok()) return e.status();
    entries->push_back(*std::move(e));
  }
  return absl::OkStatus();
}

// The reference sorts by offsets, then requires each tensor to start where
// the previous ended and to be exactly as long as its dtype and shape say.
// (Names break ties, so the order never depends on how the header was read.)
absl::StatusOr<SafetensorsHeader> CheckLayout(absl::Span<const uint8_t> file,
                                              absl::string_view label,
                                              SafetensorsHeader h,
                                              std::vector<Entry> entries) {
  const uint64_t n = h.header_bytes;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.tensor.name) <
           std::tie(b.begin, b.end, b.tensor.name);
  });
  uint64_t expected_begin = 0;
  const std::string* previous = nullptr;  // name of the tensor before
  for (Entry& e : entries) {
    StoredTensor& t = e.tensor;
    const auto desc = [&t] { return DescribeStored(t.dtype, t.shape); };
    if (e.begin != expected_begin) {
      return Corrupt(
          label, HeaderRule::kOffset,
          absl::StrCat("tensor '", t.name, "': data_offsets start at ", e.begin,
                       " but expected ", expected_begin, " (",
                       previous == nullptr ? "the first tensor starts the data"
                                           : absl::StrCat("the end of tensor '",
                                                          *previous, "'"),
                       "): offsets must be contiguous, without ",
                       e.begin < expected_begin ? "overlaps" : "gaps"),
          {{"tensor", t.name},
           {"expected", absl::StrCat(expected_begin)},
           {"actual", absl::StrCat(e.begin)}});
    }
    if (e.end < e.begin) {
      return Corrupt(
          label, HeaderRule::kOffsetOrder,
          absl::StrCat("tensor '", t.name, "': data_offsets [", e.begin, ",",
                       e.end, ") end before they begin"),
          TensorMetadata(t.name));
    }
    auto count = CheckedProduct(t.shape);
    const DTypeInfo& info = GetDTypeInfo(t.dtype);
    std::optional<uint64_t> bits;
    if (count) {
      bits = CheckedMul<uint64_t>(static_cast<uint64_t>(*count),
                                  static_cast<uint64_t>(info.block_bytes) * 8);
    }
    if (!bits) {
      return Corrupt(label, HeaderRule::kSizeOverflow,
                     absl::StrCat("tensor '", t.name, "': ", desc(),
                                  " overflows 64-bit size arithmetic"),
                     TensorMetadata(t.name));
    }
    if (*count % info.block_elems != 0) {
      return Corrupt(label, HeaderRule::kBlockSize,
                     absl::StrCat("tensor '", t.name, "': ", desc(), " is ",
                                  *count, " elements of ", info.code_bits,
                                  " bits, which does not end on a byte"),
                     TensorMetadata(t.name));
    }
    const uint64_t size = static_cast<uint64_t>(*count / info.block_elems) *
                          static_cast<uint64_t>(info.block_bytes);
    if (e.end - e.begin != size) {
      return Corrupt(
          label, HeaderRule::kDataSize,
          absl::StrCat("tensor '", t.name, "': data_offsets [", e.begin, ",",
                       e.end, ") hold ", e.end - e.begin, " bytes but ", desc(),
                       " needs ", size, " bytes"),
          {{"tensor", t.name},
           {"expected", absl::StrCat(size)},
           {"actual", absl::StrCat(e.end - e.begin)}});
    }
    t.num_elements = *count;
    t.offset = h.data_start + e.begin;
    t.nbytes = size;
    expected_begin = e.end;
    previous = &t.name;
  }
  const uint64_t data_bytes = file.size() - h.data_start;
  if (expected_begin != data_bytes) {
    return Corrupt(
        label, HeaderRule::kDataEnd,
        absl::StrCat("tensors end at data offset ", expected_begin,
                     " but the file holds ", data_bytes,
                     " data bytes after the header (8 + ", n,
                     " + data must equal the file size ", file.size(), ")"),
        {{"expected", absl::StrCat(data_bytes)},
         {"actual", absl::StrCat(expected_begin)}});
  }
  for (Entry& e : entries) {
    e.tensor.data = file.subspan(e.tensor.offset, e.tensor.nbytes);
    h.tensors.push_back(std::move(e.tensor));
  }
  return h;
}

}  // namespace

bool LooksLikeSafetensors(absl::Span<const uint8_t> file) {
  if (file.size() < 10) return false;
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  if (n < 2 || n > file.size() - 8) return false;
  for (uint64_t i = 8; i < 8 + n; ++i) {
    if (file[i] == '{') return true;
    if (!IsSpace(file[i])) return false;
  }
  return false;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensors(
    absl::Span<const uint8_t> file, absl::string_view label) {
  if (file.size() < 8) {
    return Corrupt(label, HeaderRule::kHeaderLength,
                   absl::StrCat("file is ", file.size(),
                                " bytes, shorter than the 8-byte "
                                "header length"));
  }
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  if (n > kMaxSafetensorsHeaderBytes) {
    return Corrupt(label, HeaderRule::kHeaderLimit,
                   absl::StrCat("header length ", n, " exceeds the limit of ",
                                kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (n > file.size() - 8) {
    return Corrupt(
        label, HeaderRule::kHeaderLength,
        absl::StrCat("header length ", n, " but only ", file.size() - 8,
                     " bytes follow the length field"));
  }
  absl::string_view text(reinterpret_cast<const char*>(file.data() + 8), n);
  size_t first = 0;
  while (first < text.size() && IsSpace(text[first])) ++first;
  if (first == text.size() || text[first] != '{') {
    return Corrupt(label, HeaderRule::kHeaderObject,
                   "header must be a JSON object starting with '{'");
  }
  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_start = 8 + n;
  std::vector<Entry> entries;
  if (auto fast = ReadSafetensorsHeaderFast(
          text, kMaxTensorRank, kMaxSafetensorsExtent, kMaxTensorNameBytes)) {
    entries = std::move(fast->entries);
    h.metadata = std::move(fast->metadata);
  } else {
    TM_RETURN_IF_ERROR(ReadHeaderDocument(text, label, &h.metadata, &entries));
  }
  return CheckLayout(file, label, std::move(h), std::move(entries));
}

}  // namespace tensormorph
