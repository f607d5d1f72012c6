// The GGUF form of llama-imatrix (save_imatrix), read as llama-quantize's
// load_imatrix reads it: tensors paired by their ".in_sum2" / ".counts"
// suffixes, the metadata it requires, and more checks than it makes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/format/gguf_reader.h"
#include "core/imatrix/imatrix_forms.h"
#include "core/util/checked_math.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

struct Parts {
  const StoredTensor* in_sum2 = nullptr;
  const StoredTensor* counts = nullptr;
  const StoredTensor* in_sum = nullptr;
};

std::string ShapeOf(const StoredTensor& t) {
  return DescribeStored(t.dtype, t.shape);
}

// The floats of an F32 tensor (the reader bounded its bytes).
std::vector<float> FloatsOf(const StoredTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.num_elements));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

absl::Status CheckMetadata(const GgufFile& f, absl::string_view label,
                           ImportanceMatrix::Contents* c) {
  const GgufKv* type = f.Find("general.type");
  if (type == nullptr || type->type != GgufType::kString ||
      type->str != "imatrix") {
    return ImatrixError(
        label, "general.type",
        absl::StrCat("general.type is ",
                     type == nullptr ? "missing" : GgufValueToString(*type),
                     ", not \"imatrix\" (a model, not an importance matrix?)"));
  }
  for (absl::string_view key : {"imatrix.chunk_count", "imatrix.chunk_size"}) {
    const GgufKv* kv = f.Find(key);
    if (kv == nullptr || kv->type != GgufType::kUint32) {
      return ImatrixError(
          label, key,
          absl::StrCat(key, " is ",
                       kv == nullptr ? "missing" : GgufTypeName(kv->type),
                       ", not a uint32"));
    }
    (key == "imatrix.chunk_count" ? c->chunk_count : c->chunk_size) =
        static_cast<int64_t>(kv->u);
  }
  const GgufKv* ds = f.Find("imatrix.datasets");
  if (ds == nullptr || ds->type != GgufType::kArray ||
      (ds->count > 0 && ds->elem_type != GgufType::kString)) {
    return ImatrixError(label, "imatrix.datasets",
                        "imatrix.datasets is missing or not an array of "
                        "strings");
  }
  // The reader validated the array: each string a uint64 length and bytes.
  size_t at = 0;
  for (uint64_t i = 0; i < ds->count; ++i) {
    uint64_t len = 0;
    std::memcpy(&len, ds->raw.data() + at, sizeof(len));
    at += sizeof(len);
    c->datasets.push_back(EscapeUtf8(absl::string_view(
        reinterpret_cast<const char*>(ds->raw.data() + at), len)));
    at += len;
  }
  return absl::OkStatus();
}

// The tensors by entry name; other tensors are passed over.
absl::StatusOr<std::map<std::string, Parts>> PairTensors(
    const GgufFile& f, absl::string_view label) {
  std::map<std::string, Parts> by_name;
  for (const StoredTensor& t : f.tensors) {
    absl::string_view n = t.name;
    const StoredTensor** slot = nullptr;
    if (absl::ConsumeSuffix(&n, ".in_sum2")) {
      slot = &by_name[std::string(n)].in_sum2;
    } else if (absl::ConsumeSuffix(&n, ".counts")) {
      slot = &by_name[std::string(n)].counts;
    } else if (absl::ConsumeSuffix(&n, ".in_sum")) {
      slot = &by_name[std::string(n)].in_sum;
    } else {
      continue;
    }
    if (n.empty()) {
      return ImatrixError(label, "entry_name",
                          absl::StrCat("tensor '", t.name, "' names no entry"));
    }
    if (t.dtype != DType::kF32) {
      return ImatrixError(
          label, "dtype",
          absl::StrCat("tensor '", t.name, "' is ", ShapeOf(t), ", not F32"));
    }
    *slot = &t;
  }
  for (const auto& [name, p] : by_name) {
    if (p.in_sum2 == nullptr || p.counts == nullptr) {
      return ImatrixError(
          label, "pairs",
          absl::StrCat("entry '", name, "' has ",
                       p.in_sum2 == nullptr ? "no .in_sum2" : "no .counts",
                       " tensor beside its other"));
    }
  }
  return by_name;
}

// Columns and experts from in_sum2 (rank 1 or 2: ggml drops trailing
// dimensions of 1), and counts and in_sum shaped to match.
absl::Status CheckShapes(const Parts& p, absl::string_view label,
                         ImatrixEntry* e) {
  const std::vector<int64_t>& s = p.in_sum2->shape;
  if (s.empty() || s.size() > 2 || s.back() < 1 || s.front() < 1) {
    return ImatrixError(
        label, "in_sum2.shape",
        absl::StrCat("'", p.in_sum2->name, "' is ", ShapeOf(*p.in_sum2),
                     ", not [experts, columns] of at least 1"));
  }
  e->columns = s.back();
  e->experts = s.size() == 2 ? s.front() : 1;
  const std::vector<int64_t>& k = p.counts->shape;
  const bool counts_ok = p.counts->num_elements == e->experts &&
                         (k.size() == 1 || (k.size() == 2 && k.back() == 1));
  if (!counts_ok) {
    return ImatrixError(
        label, "counts.shape",
        absl::StrCat("'", p.counts->name, "' is ", ShapeOf(*p.counts), " but '",
                     p.in_sum2->name, "' has ", e->experts,
                     " expert(s): one count each"));
  }
  if (p.in_sum != nullptr && p.in_sum->shape != s) {
    return ImatrixError(
        label, "in_sum.shape",
        absl::StrCat("'", p.in_sum->name, "' is ", ShapeOf(*p.in_sum), ", not ",
                     ShapeOf(*p.in_sum2)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ImatrixEntry> EntryOf(const std::string& name, const Parts& p,
                                     int64_t chunk_size,
                                     absl::string_view label) {
  ImatrixEntry e;
  e.name = name;
  absl::Status shapes = CheckShapes(p, label, &e);
  if (!shapes.ok()) return shapes;
  const std::vector<float> counts = FloatsOf(*p.counts);
  double most = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    const float c = counts[j];
    if (!std::isfinite(c) || c < 0 || c != std::floor(c)) {
      return ImatrixError(
          label, "counts.value",
          absl::StrCat("'", p.counts->name, "' expert ", j, " has count ", c,
                       ", not a whole number >= 0"));
    }
    e.counts.push_back(c);
    most = std::max(most, static_cast<double>(c));
  }
  e.chunks = chunk_size > 0 ? static_cast<int64_t>(std::ceil(
                                  most / static_cast<double>(chunk_size)))
                            : 0;
  e.has_in_sum = p.in_sum != nullptr;
  if (p.in_sum != nullptr) {
    for (float v : FloatsOf(*p.in_sum)) {
      if (!std::isfinite(v)) {
        return ImatrixError(label, "in_sum.value",
                            absl::StrCat("'", p.in_sum->name,
                                         "' holds a value that is not finite"));
      }
    }
  }
  e.weights = FloatsOf(*p.in_sum2);
  const size_t cols = static_cast<size_t>(e.columns);
  for (size_t i = 0; i < e.weights.size(); ++i) {
    const float v = e.weights[i];
    if (!std::isfinite(v) || v < 0) {
      return ImatrixError(
          label, "in_sum2.value",
          absl::StrCat("'", p.in_sum2->name, "' element ", i, " is ", v,
                       ", not a finite sum of squares"));
    }
    // llama-quantize: in_sum2 / count in float; 1 where the count is 0.
    const float c = counts[i / cols];
    e.weights[i] = c > 0.0f ? v / c : 1.0f;
  }
  return e;
}

}  // namespace

absl::StatusOr<ImportanceMatrix::Contents> ParseGgufImatrix(
    absl::Span<const uint8_t> bytes, absl::string_view label) {
  absl::StatusOr<GgufFile> f = ParseGguf(bytes, label);
  if (!f.ok()) return f.status();
  ImportanceMatrix::Contents c;
  c.form = ImatrixForm::kGguf;
  absl::Status meta = CheckMetadata(*f, label, &c);
  if (!meta.ok()) return meta;
  absl::StatusOr<std::map<std::string, Parts>> by_name = PairTensors(*f, label);
  if (!by_name.ok()) return by_name.status();
  for (const auto& [name, parts] : *by_name) {
    absl::StatusOr<ImatrixEntry> e = EntryOf(name, parts, c.chunk_size, label);
    if (!e.ok()) return e.status();
    c.entries.push_back(*std::move(e));
  }
  return c;
}

}  // namespace tensormorph
