#include "core/quant/conventions/context.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"

namespace tensormorph::conventions {

Context::Context(const std::vector<StoredTensor>& stored,
                 const nlohmann::json& qconfig)
    : stored_(stored), qconfig_(qconfig) {
  for (const StoredTensor& t : stored) by_name_.emplace(t.name, &t);
}

const StoredTensor* Context::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<const StoredTensor*> Context::Need(
    absl::string_view convention, absl::string_view for_tensor,
    const std::string& name) const {
  const StoredTensor* t = Find(name);
  if (t == nullptr) {
    return Mismatch(convention,
                    absl::StrCat("tensor '", for_tensor, "' needs '", name,
                                 "', which the checkpoint lacks"));
  }
  return t;
}

void Context::Add(const std::string& name, AffineParams params) {
  for (const StoredTensor* p : params.parts) claimed_.insert(p->name);
  LogicalTensor t;
  t.name = name;
  t.shape = params.shape;
  t.num_elements = params.rows * params.cols;
  t.encoding = MakeAffineEncoding(std::move(params));
  out_.push_back(std::move(t));
}

absl::Status Mismatch(absl::string_view convention, absl::string_view message) {
  return absl::DataLossError(absl::StrCat(convention, ": ", message));
}

absl::Status ExpectDType(absl::string_view convention, const StoredTensor* t,
                         std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t->dtype == d) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (DType d : allowed) names.emplace_back(DTypeName(d));
  return Mismatch(convention,
                  absl::StrCat("'", t->name, "' is ", DTypeName(t->dtype),
                               " but must be ", absl::StrJoin(names, " or ")));
}

absl::Status ExpectShape(absl::string_view convention, const StoredTensor* t,
                         const std::vector<int64_t>& want,
                         absl::string_view why) {
  if (t->shape == want) return absl::OkStatus();
  return Mismatch(
      convention,
      absl::StrCat("'", t->name, "' is ", DescribeStored(t->dtype, t->shape),
                   " but ", why, " needs [", absl::StrJoin(want, ","), "]"));
}

absl::StatusOr<PackedInt> NeedPackedInt(const Context& ctx,
                                        absl::string_view convention,
                                        const std::string& prefix) {
  const std::string weight = prefix + "weight";
  PackedInt out{};
  const StoredTensor** slots[] = {&out.qweight, &out.qzeros, &out.scales};
  const char* names[] = {"qweight", "qzeros", "scales"};
  for (int i = 0; i < 3; ++i) {
    auto t = ctx.Need(convention, weight, prefix + names[i]);
    if (!t.ok()) return t.status();
    *slots[i] = *t;
  }
  if (auto s = ExpectDType(convention, out.qweight, {DType::kI32}); !s.ok())
    return s;
  if (auto s = ExpectDType(convention, out.qzeros, {DType::kI32}); !s.ok())
    return s;
  if (auto s = ExpectDType(convention, out.scales,
                           {DType::kF16, DType::kBF16, DType::kF32});
      !s.ok()) {
    return s;
  }
  return out;
}

int64_t JsonInt(const nlohmann::json& j, const char* key, int64_t def) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer())
    return def;
  return j[key].get<int64_t>();
}
bool JsonBool(const nlohmann::json& j, const char* key, bool def) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_boolean()) return def;
  return j[key].get<bool>();
}
std::string JsonString(const nlohmann::json& j, const char* key,
                       const std::string& def) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return def;
  return j[key].get<std::string>();
}

std::vector<int64_t> ReadInts(const StoredTensor* t) {
  std::vector<int64_t> out(static_cast<size_t>(t->num_elements));
  const int width = GetDTypeInfo(t->dtype).block_bytes;
  for (int64_t i = 0; i < t->num_elements; ++i) {
    if (width == 4) {
      int32_t v;
      std::memcpy(&v, t->data.data() + 4 * i, 4);
      out[i] = v;
    } else {
      std::memcpy(&out[i], t->data.data() + 8 * i, 8);
    }
  }
  return out;
}

std::vector<float> Fp8Table(DType dtype) {
  std::vector<float> table(256);
  for (int c = 0; c < 256; ++c) {
    const uint8_t b = static_cast<uint8_t>(c);
    (void)DecodeElements(dtype, {&b, 1}, 0, 1, &table[c]);
  }
  return table;
}

std::vector<float> E2M1Table() {
  return std::vector<float>(std::begin(kE2M1Values), std::end(kE2M1Values));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace tensormorph::conventions
