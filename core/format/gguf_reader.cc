#include "core/format/gguf_reader.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/format/header_rule.h"
#include "core/io/byte_reader.h"
#include "core/util/checked_math.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

// Smallest encodings, used to bound counts by the bytes remaining.
constexpr uint64_t kMinKvBytes =
    8 + 1 + 4 + 1;  // key len, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

class GgufParser {
 public:
  GgufParser(absl::Span<const uint8_t> file, absl::string_view label)
      : file_(file), r_(file), label_(EscapeUtf8(label)) {}

  absl::StatusOr<GgufFile> Parse();

 private:
  // DATA_LOSS HEADER_INVALID naming the rule broken; `extra` is the
  // metadata beyond file and rule (header_rule.h).
  absl::Status Corrupt(HeaderRule rule, absl::string_view msg,
                       ErrorMetadata extra = {}) const {
    return HeaderRuleError(rule, absl::StrCat("file '", label_, "': ", msg),
                           label_, std::move(extra));
  }
  // A read that ran out of bytes.
  absl::Status Truncated(absl::string_view what, uint64_t need) const {
    return Corrupt(
        HeaderRule::kTruncated,
        absl::StrCat("truncated: ", what, " needs ", need, " bytes at offset ",
                     r_.offset(), " but ", r_.remaining(), " remain"));
  }
  template <typename T>
  absl::Status ReadField(absl::string_view what, T* out) {
    if (!r_.Read(out)) return Truncated(what, sizeof(T));
    return absl::OkStatus();
  }
  // Reads a T and widens it into *out.
  template <typename T, typename U>
  absl::Status ReadAs(absl::string_view what, U* out) {
    T v{};
    if (!r_.Read(&v)) return Truncated(what, sizeof(T));
    *out = static_cast<U>(v);
    return absl::OkStatus();
  }
  absl::Status ReadString(absl::string_view what, absl::string_view* out);
  absl::Status ReadValue(absl::string_view key, GgufType type, int depth,
                         GgufKv* kv);
  absl::Status ReadKv(uint64_t index, GgufFile* out);
  absl::Status ReadTensorInfo(uint64_t index, StoredTensor* t,
                              uint64_t* rel_offset);
  // Magic, version and the two counts, each bounded by the bytes remaining.
  absl::Status ReadPreamble(GgufFile* out, uint64_t* n_tensors, uint64_t* n_kv);
  // Places every tensor in the data section after the tensor infos, as ggml
  // does: each at the padded end of the one before, all inside the file.
  absl::Status LayOutData(GgufFile& out,
                          absl::Span<const uint64_t> rel_offsets) const;
  // Sets nbytes of tensor k, of an unknown type, to its extent (header).
  absl::Status BoundUnknownExtent(GgufFile& out,
                                  absl::Span<const uint64_t> rel_offsets,
                                  uint64_t k) const;

  absl::Span<const uint8_t> file_;
  ByteReader r_;
  std::string label_;  // escaped: messages are bound for protobuf
};

absl::Status GgufParser::ReadString(absl::string_view what,
                                    absl::string_view* out) {
  uint64_t len = 0;
  if (!r_.Read(&len)) return Truncated(absl::StrCat(what, " length"), 8);
  if (len > r_.remaining()) {
    return Corrupt(HeaderRule::kStringLength,
                   absl::StrCat(what, ": string length ", len, " exceeds the ",
                                r_.remaining(), " bytes remaining"));
  }
  r_.ReadBytes(len, out);
  return absl::OkStatus();
}

absl::Status GgufParser::ReadValue(absl::string_view key, GgufType type,
                                   int depth, GgufKv* kv) {
  const std::string what = absl::StrCat("key '", key, "'");
  switch (type) {
    case GgufType::kUint8:
      return ReadAs<uint8_t>(what, &kv->u);
    case GgufType::kBool:
      return ReadAs<uint8_t>(what, &kv->u);
    case GgufType::kInt8:
      return ReadAs<int8_t>(what, &kv->i);
    case GgufType::kUint16:
      return ReadAs<uint16_t>(what, &kv->u);
    case GgufType::kInt16:
      return ReadAs<int16_t>(what, &kv->i);
    case GgufType::kUint32:
      return ReadAs<uint32_t>(what, &kv->u);
    case GgufType::kInt32:
      return ReadAs<int32_t>(what, &kv->i);
    case GgufType::kUint64:
      return ReadAs<uint64_t>(what, &kv->u);
    case GgufType::kInt64:
      return ReadAs<int64_t>(what, &kv->i);
    case GgufType::kFloat32:
      return ReadAs<float>(what, &kv->f);
    case GgufType::kFloat64:
      return ReadAs<double>(what, &kv->f);
    case GgufType::kString:
      return ReadString(what, &kv->str);
    case GgufType::kArray: {
      if (depth >= kGgufMaxArrayDepth) {
        return Corrupt(HeaderRule::kArrayDepth,
                       absl::StrCat(what, ": arrays nested deeper than ",
                                    kGgufMaxArrayDepth, " levels"),
                       {{"key", std::string(key)}});
      }
      uint32_t et = 0;
      uint64_t n = 0;
      if (auto s = ReadField(absl::StrCat(what, " array type"), &et); !s.ok()) {
        return s;
      }
      if (et >= kNumGgufTypes) {
        return Corrupt(
            HeaderRule::kArrayType,
            absl::StrCat(what, ": array element type ", et,
                         " is not a GGUF type (0..", kNumGgufTypes - 1, ")"),
            {{"key", std::string(key)}});
      }
      if (auto s = ReadField(absl::StrCat(what, " array length"), &n);
          !s.ok()) {
        return s;
      }
      const GgufType elem = static_cast<GgufType>(et);
      // Every element takes at least one byte (strings 8, arrays 12).
      const uint64_t min_elem = elem == GgufType::kString ? 8
                                : elem == GgufType::kArray
                                    ? 12
                                    : GgufScalarSize(elem);
      if (n > r_.remaining() / min_elem) {
        return Corrupt(
            HeaderRule::kArrayLength,
            absl::StrCat(what, ": array of ", n, " ", GgufTypeName(elem),
                         " needs at least ", min_elem, " bytes each but ",
                         r_.remaining(), " bytes remain"),
            {{"key", std::string(key)}});
      }
      kv->elem_type = elem;
      kv->count = n;
      const uint64_t start = r_.offset();
      if (min_elem > 0 && elem != GgufType::kString &&
          elem != GgufType::kArray) {
        r_.Skip(n * min_elem);
      } else {
        for (uint64_t k = 0; k < n; ++k) {
          GgufKv element;
          if (auto s = ReadValue(key, elem, depth + 1, &element); !s.ok()) {
            return s;
          }
        }
      }
      kv->raw = file_.subspan(start, r_.offset() - start);
      return absl::OkStatus();
    }
  }
  return Corrupt(HeaderRule::kValueType,
                 absl::StrCat(what, ": invalid value type"),
                 {{"key", std::string(key)}});
}

absl::Status GgufParser::ReadKv(uint64_t index, GgufFile* out) {
  absl::string_view raw_key;
  if (auto s = ReadString(absl::StrCat("key ", index), &raw_key); !s.ok()) {
    return s;
  }
  if (raw_key.empty()) {
    return Corrupt(HeaderRule::kKeyEmpty,
                   absl::StrCat("key ", index, " is empty"));
  }
  // ggml accepts any bytes; the key is its escaped spelling from here on
  // (in messages too), which is unambiguous, so duplicates stay duplicates.
  const std::string key = EscapeUtf8(raw_key);
  uint32_t type = 0;
  if (auto s = ReadField(absl::StrCat("key '", key, "' type"), &type);
      !s.ok()) {
    return s;
  }
  if (type >= kNumGgufTypes) {
    return Corrupt(
        HeaderRule::kValueType,
        absl::StrCat("key '", key, "': value type ", type,
                     " is not a GGUF type (0..", kNumGgufTypes - 1, ")"),
        {{"key", key}});
  }
  GgufKv kv;
  kv.key = key;
  kv.type = static_cast<GgufType>(type);
  if (auto s = ReadValue(key, kv.type, 0, &kv); !s.ok()) return s;
  out->metadata.push_back(std::move(kv));
  return absl::OkStatus();
}

absl::Status GgufParser::ReadTensorInfo(uint64_t index, StoredTensor* t,
                                        uint64_t* rel_offset) {
  absl::string_view name;
  if (auto s = ReadString(absl::StrCat("tensor info ", index, " name"), &name);
      !s.ok()) {
    return s;
  }
  if (name.size() > kGgufMaxNameBytes) {
    return Corrupt(
        HeaderRule::kNameLength,
        absl::StrCat("tensor info ", index, ": name of ", name.size(),
                     " bytes exceeds ggml's limit of ", kGgufMaxNameBytes));
  }
  // The logical name is the escaped spelling (see the header).
  t->name = EscapeUtf8(name);
  const std::string where = absl::StrCat("tensor '", t->name, "'");
  uint32_t n_dims = 0;
  if (auto s = ReadField(absl::StrCat(where, " n_dims"), &n_dims); !s.ok()) {
    return s;
  }
  if (n_dims > kGgufMaxDims) {
    return Corrupt(HeaderRule::kRank,
                   absl::StrCat(where, ": n_dims ", n_dims,
                                " exceeds ggml's maximum of ", kGgufMaxDims),
                   {{"tensor", t->name}});
  }
  int64_t ne[kGgufMaxDims] = {1, 1, 1, 1};
  for (uint32_t j = 0; j < n_dims; ++j) {
    if (auto s = ReadField(absl::StrCat(where, " ne[", j, "]"), &ne[j]);
        !s.ok()) {
      return s;
    }
    // As ggml: only a negative dimension is invalid; a zero one makes an
    // empty tensor (0 elements, 0 bytes), as in safetensors. (ggml's own
    // element-count check divides INT64_MAX by ne[1..3], so a zero there is
    // a division by zero in ggml; CheckedProduct below has no such hole.)
    if (ne[j] < 0) {
      return Corrupt(HeaderRule::kShape,
                     absl::StrCat(where, ": ne[", j, "] = ", ne[j],
                                  " but every dimension must be >= 0"),
                     {{"tensor", t->name}});
    }
  }
  auto count = CheckedProduct(absl::MakeConstSpan(ne, n_dims));
  if (!count) {
    std::string dims;
    for (uint32_t j = 0; j < n_dims; ++j) {
      absl::StrAppend(&dims, j ? ", " : "", ne[j]);
    }
    return Corrupt(HeaderRule::kSizeOverflow,
                   absl::StrCat(where, ": ne = (", dims,
                                ") has more elements than int64 can count"),
                   {{"tensor", t->name}});
  }
  uint32_t type_id = 0;
  if (auto s = ReadField(absl::StrCat(where, " type"), &type_id); !s.ok()) {
    return s;
  }
  t->ggml_type_id = type_id;
  auto dtype = DTypeFromGgmlTypeId(type_id);
  if (!dtype) {
    // Listed, never decoded; Parse bounds its extent by the layout.
    if (auto s = ReadField(absl::StrCat(where, " offset"), rel_offset);
        !s.ok()) {
      return s;
    }
    t->dtype = DType::kGgmlUnknown;
    t->num_elements = *count;
    for (int j = static_cast<int>(n_dims) - 1; j >= 0; --j) {
      t->shape.push_back(ne[j]);
    }
    return absl::OkStatus();
  }
  const DTypeInfo& info = GetDTypeInfo(*dtype);
  if (ne[0] % info.block_elems != 0) {
    return Corrupt(
        HeaderRule::kBlockSize,
        absl::StrCat(where, ": ne[0] = ", ne[0], " is not a multiple of the ",
                     info.name, " block size ", info.block_elems),
        {{"tensor", t->name}});
  }
  auto nbytes = CheckedMul<uint64_t>(
      static_cast<uint64_t>(*count / info.block_elems), info.block_bytes);
  if (!nbytes) {
    return Corrupt(HeaderRule::kSizeOverflow,
                   absl::StrCat(where, ": byte size overflows 64 bits"),
                   {{"tensor", t->name}});
  }
  if (auto s = ReadField(absl::StrCat(where, " offset"), rel_offset); !s.ok()) {
    return s;
  }
  t->dtype = *dtype;
  t->num_elements = *count;
  t->nbytes = *nbytes;
  for (int j = static_cast<int>(n_dims) - 1; j >= 0; --j) {
    t->shape.push_back(ne[j]);
  }
  return absl::OkStatus();
}

absl::Status GgufParser::BoundUnknownExtent(
    GgufFile& out, absl::Span<const uint64_t> rel_offsets, uint64_t k) const {
  StoredTensor& t = out.tensors[k];
  const std::string where = absl::StrCat("tensor '", t.name, "' (",
                                         StoredDTypeName(t), ", size unknown)");
  const uint64_t data_size =
      file_.size() > out.data_offset ? file_.size() - out.data_offset : 0;
  if (rel_offsets[k] > data_size) {
    return Corrupt(HeaderRule::kUnknownTypeExtent,
                   absl::StrCat(where, ": offset ", rel_offsets[k],
                                " is past the end of the data section (",
                                data_size, " bytes)"),
                   {{"tensor", t.name}});
  }
  uint64_t end = data_size;
  if (k + 1 < rel_offsets.size()) {
    end = rel_offsets[k + 1];
    if (end < rel_offsets[k] || end % out.alignment != 0) {
      return Corrupt(HeaderRule::kUnknownTypeExtent,
                     absl::StrCat(where, ": the next tensor's offset ", end,
                                  " must be aligned to ", out.alignment,
                                  " and not before this one's ", rel_offsets[k],
                                  ", since it bounds this tensor's extent"),
                     {{"tensor", t.name}});
    }
  }
  t.nbytes = end - rel_offsets[k];
  return absl::OkStatus();
}

absl::Status GgufParser::ReadPreamble(GgufFile* out, uint64_t* n_tensors,
                                      uint64_t* n_kv) {
  char magic[4];
  if (!r_.Read(&magic)) return Truncated("magic", 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return Corrupt(HeaderRule::kMagic, "magic is not 'GGUF'");
  }
  uint32_t version = 0;
  if (auto s = ReadField("version", &version); !s.ok()) return s;
  if ((version & 0xFFFF) == 0 && version != 0) {
    return Corrupt(
        HeaderRule::kByteOrder,
        absl::StrCat(
            "version ", version, " (0x", absl::Hex(version),
            ") looks byte-swapped: this is probably a big-endian GGUF file, "
            "which is not supported"));
  }
  if (version == 1) {
    return absl::UnimplementedError(absl::StrCat(
        "file '", label_, "': GGUF version 1 is not supported (2 and 3 are)"));
  }
  if (version < 1 || version > 3) {
    return absl::UnimplementedError(
        absl::StrCat("file '", label_, "': GGUF version ", version,
                     " is not supported (2 and 3 are)"));
  }
  out->version = version;
  if (auto s = ReadField("tensor count", n_tensors); !s.ok()) return s;
  if (auto s = ReadField("metadata key count", n_kv); !s.ok()) return s;
  if (*n_kv > r_.remaining() / kMinKvBytes) {
    return Corrupt(
        HeaderRule::kKvCount,
        absl::StrCat("metadata key count ", *n_kv, " cannot fit in the ",
                     r_.remaining(), " bytes remaining (", kMinKvBytes,
                     " bytes each at least)"));
  }
  if (*n_tensors > r_.remaining() / kMinTensorInfoBytes) {
    return Corrupt(
        HeaderRule::kTensorCount,
        absl::StrCat("tensor count ", *n_tensors, " cannot fit in the ",
                     r_.remaining(), " bytes remaining (", kMinTensorInfoBytes,
                     " bytes each at least)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufFile> GgufParser::Parse() {
  GgufFile out;
  uint64_t n_tensors = 0, n_kv = 0;
  if (auto s = ReadPreamble(&out, &n_tensors, &n_kv); !s.ok()) return s;

  absl::flat_hash_set<absl::string_view> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    if (auto s = ReadKv(k, &out); !s.ok()) return s;
  }
  for (const GgufKv& kv : out.metadata) {
    if (!keys.insert(kv.key).second) {
      return Corrupt(HeaderRule::kDuplicateKey,
                     absl::StrCat("duplicate key '", kv.key, "'"),
                     {{"key", kv.key}});
    }
  }
  if (const GgufKv* a = out.Find("general.alignment")) {
    if (a->type != GgufType::kUint32) {
      return Corrupt(HeaderRule::kAlignment,
                     absl::StrCat("key 'general.alignment' has type ",
                                  GgufTypeName(a->type), " but must be uint32"),
                     {{"key", "general.alignment"}});
    }
    if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return Corrupt(HeaderRule::kAlignment,
                     absl::StrCat("key 'general.alignment' = ", a->u,
                                  " but must be a non-zero power of two"),
                     {{"key", "general.alignment"}});
    }
    out.alignment = static_cast<uint32_t>(a->u);
  }

  std::vector<uint64_t> rel_offsets(n_tensors);
  out.tensors.resize(n_tensors);
  absl::flat_hash_set<absl::string_view> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    if (auto s = ReadTensorInfo(k, &out.tensors[k], &rel_offsets[k]); !s.ok()) {
      return s;
    }
  }
  for (const StoredTensor& t : out.tensors) {
    if (!names.insert(t.name).second) {
      return Corrupt(HeaderRule::kDuplicateName,
                     absl::StrCat("duplicate tensor name '", t.name, "'"),
                     {{"tensor", t.name}});
    }
  }
  if (auto s = LayOutData(out, rel_offsets); !s.ok()) return s;
  return out;
}

absl::Status GgufParser::LayOutData(
    GgufFile& out, absl::Span<const uint64_t> rel_offsets) const {
  auto data_offset = CheckedAlignUp(r_.offset(), out.alignment);
  if (!data_offset) {
    return Corrupt(HeaderRule::kSizeOverflow, "data section offset overflows");
  }
  out.data_offset = *data_offset;
  uint64_t expected = 0;  // running padded sum, as ggml computes ctx->size
  for (uint64_t k = 0; k < rel_offsets.size(); ++k) {
    StoredTensor& t = out.tensors[k];
    if (rel_offsets[k] != expected) {
      return Corrupt(
          HeaderRule::kOffset,
          absl::StrCat("tensor '", t.name, "': offset ", rel_offsets[k],
                       " but expected ", expected,
                       " (each tensor starts where the previous one's data, "
                       "padded to ",
                       out.alignment, " bytes, ends)"),
          {{"tensor", t.name},
           {"expected", absl::StrCat(expected)},
           {"actual", absl::StrCat(rel_offsets[k])}});
    }
    auto abs_offset = CheckedAdd<uint64_t>(out.data_offset, rel_offsets[k]);
    if (t.dtype == DType::kGgmlUnknown) {
      if (auto s = BoundUnknownExtent(out, rel_offsets, k); !s.ok()) return s;
    }
    auto end =
        abs_offset ? CheckedAdd<uint64_t>(*abs_offset, t.nbytes) : std::nullopt;
    if (!end || *end > file_.size()) {
      return Corrupt(
          HeaderRule::kDataRange,
          absl::StrCat("tensor '", t.name,
                       "': ", DescribeStored(t.dtype, t.shape),
                       " needs bytes [", abs_offset.value_or(0), ", ",
                       end ? absl::StrCat(*end) : std::string("overflow"),
                       ") but the file is ", file_.size(), " bytes"),
          {{"tensor", t.name}});
    }
    t.offset = *abs_offset;
    t.data = file_.subspan(t.offset, t.nbytes);
    auto padded = CheckedAlignUp(t.nbytes, out.alignment);
    auto next = padded ? CheckedAdd<uint64_t>(expected, *padded) : std::nullopt;
    if (!next) {
      return Corrupt(HeaderRule::kSizeOverflow,
                     "tensor data size overflows 64 bits",
                     {{"tensor", t.name}});
    }
    expected = *next;
  }
  return absl::OkStatus();
}

}  // namespace

const GgufKv* GgufFile::Find(absl::string_view key) const {
  for (const GgufKv& kv : metadata) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

bool LooksLikeGguf(absl::Span<const uint8_t> file) {
  return file.size() >= 4 && std::memcmp(file.data(), "GGUF", 4) == 0;
}

absl::StatusOr<GgufFile> ParseGguf(absl::Span<const uint8_t> file,
                                   absl::string_view file_label) {
  return GgufParser(file, file_label).Parse();
}

}  // namespace tensormorph
