#include "core/quant/conventions/context.h"

#include <climits>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "core/util/checked_math.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph::conventions {

namespace {
constexpr absl::string_view kRulePayload = "tensormorph/check-rule";
}  // namespace

absl::Status WithRule(absl::Status s, absl::string_view rule) {
  if (!s.ok()) s.SetPayload(kRulePayload, absl::Cord(rule));
  return s;
}

std::string RuleOf(const absl::Status& s) {
  auto rule = s.GetPayload(kRulePayload);
  return rule.has_value() ? std::string(*rule) : std::string();
}

Context::Context(const std::vector<StoredTensor>& stored,
                 std::vector<ResolveProblem>* problems)
    : stored_(stored), problems_(problems) {
  for (const StoredTensor& t : stored) by_name_.emplace(t.name, &t);
}

absl::Status Context::Tolerate(absl::Status s, absl::string_view tensor) {
  if (s.ok() || problems_ == nullptr) return s;
  std::string rule = RuleOf(s);
  // A recognised variant Tensormorph does not decode is not a broken file.
  if (rule.empty()) {
    rule =
        absl::IsUnimplemented(s) ? "undecodable-tensor" : "unresolved-tensor";
  }
  ResolveProblem p;
  p.rule = std::move(rule);
  p.tensor = std::string(tensor);
  p.message = std::string(s.message());
  problems_->push_back(std::move(p));
  return absl::OkStatus();
}

const StoredTensor* Context::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<const StoredTensor*> Context::ExpectIfPresent(
    absl::string_view convention, absl::string_view for_tensor,
    absl::string_view name, std::initializer_list<DType> allowed,
    const ShapeRule& shape) const {
  const StoredTensor* t = Find(name);
  if (t == nullptr) return nullptr;
  if (allowed.size() > 0) {
    if (auto s = ExpectDType(convention, t, allowed); !s.ok()) return s;
  }
  switch (shape.kind) {
    case ShapeRule::Kind::kAny:
      break;
    case ShapeRule::Kind::kRank:
      if (t->shape.size() != shape.rank) {
        return WithRule(
            Mismatch(convention,
                     absl::StrCat("'", t->name, "' is ",
                                  DescribeStored(t->dtype, t->shape), " but '",
                                  for_tensor, "' needs it ", shape.rank, "-D")),
            "companion-shape");
      }
      break;
    case ShapeRule::Kind::kExact:
      if (auto s = ExpectShape(convention, t, shape.dims, shape.why); !s.ok())
        return s;
      break;
  }
  return t;
}

absl::StatusOr<const StoredTensor*> Context::Expect(
    absl::string_view convention, absl::string_view for_tensor,
    absl::string_view name, std::initializer_list<DType> allowed,
    const ShapeRule& shape) const {
  auto t = ExpectIfPresent(convention, for_tensor, name, allowed, shape);
  if (t.ok() && *t == nullptr) {
    return WithRule(
        Mismatch(convention,
                 absl::StrCat("tensor '", for_tensor, "' needs '", name,
                              "', which the checkpoint lacks")),
        "missing-companion");
  }
  return t;
}

absl::Status Context::Add(absl::string_view convention, const std::string& name,
                          AffineParams params) {
  std::vector<const StoredTensor*> parts = params.parts;
  LogicalTensor t;
  t.name = name;
  t.shape = params.shape;
  t.num_elements = params.rows * params.cols;
  auto encoding = MakeAffineEncoding(std::move(params));
  if (!encoding.ok()) {
    return Mismatch(
        convention,
        absl::StrCat("'", name, "': ", encoding.status().message()));
  }
  t.encoding = *std::move(encoding);
  for (const StoredTensor* p : parts) claimed_.insert(p->name);
  out_.push_back(std::move(t));
  return absl::OkStatus();
}

void Context::AddEncoded(const std::string& name, std::vector<int64_t> shape,
                         std::shared_ptr<const Encoding> encoding) {
  LogicalTensor t;
  t.name = name;
  t.num_elements = 1;
  for (int64_t d : shape) t.num_elements *= d;
  t.shape = std::move(shape);
  for (const StoredTensor* p : encoding->parts()) claimed_.insert(p->name);
  t.encoding = std::move(encoding);
  out_.push_back(std::move(t));
}

absl::Status Mismatch(absl::string_view convention, absl::string_view message) {
  return WithReason(
      absl::DataLossError(absl::StrCat(convention, ": ", message)),
      ErrorReason::kConventionMismatch,
      {{"convention", std::string(convention)}});
}

absl::Status ExpectDType(absl::string_view convention, const StoredTensor* t,
                         std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t->dtype == d) return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (DType d : allowed) names.emplace_back(DTypeName(d));
  return WithRule(
      Mismatch(convention,
               absl::StrCat("'", t->name, "' is ", DTypeName(t->dtype),
                            " but must be ", absl::StrJoin(names, " or "))),
      "companion-shape");
}

absl::Status ExpectShape(absl::string_view convention, const StoredTensor* t,
                         const std::vector<int64_t>& want,
                         absl::string_view why) {
  if (t->shape == want) return absl::OkStatus();
  return WithRule(
      Mismatch(convention,
               absl::StrCat("'", t->name, "' is ",
                            DescribeStored(t->dtype, t->shape), " but ", why,
                            " needs [", absl::StrJoin(want, ","), "]")),
      "companion-shape");
}

absl::StatusOr<PackedInt> NeedPackedInt(const Context& ctx,
                                        absl::string_view convention,
                                        const std::string& prefix) {
  const std::string weight = prefix + "weight";
  PackedInt out{};
  TM_ASSIGN_OR_RETURN(out.qweight,
                      ctx.Expect(convention, weight, prefix + "qweight",
                                 {DType::kI32}, ShapeRule::Rank(2)));
  TM_ASSIGN_OR_RETURN(out.qzeros,
                      ctx.Expect(convention, weight, prefix + "qzeros",
                                 {DType::kI32}, ShapeRule::Rank(2)));
  TM_ASSIGN_OR_RETURN(
      out.scales,
      ctx.Expect(convention, weight, prefix + "scales",
                 {DType::kF16, DType::kBF16, DType::kF32}, ShapeRule::Rank(2)));
  return out;
}

absl::StatusOr<std::vector<int64_t>> ReadIntVector(absl::string_view convention,
                                                   const StoredTensor* t) {
  int width = 0;
  bool is_signed = true;
  switch (t->dtype) {
    case DType::kI8:
      width = 1;
      break;
    case DType::kU8:
      width = 1;
      is_signed = false;
      break;
    case DType::kI16:
      width = 2;
      break;
    case DType::kU16:
      width = 2;
      is_signed = false;
      break;
    case DType::kI32:
      width = 4;
      break;
    case DType::kU32:
      width = 4;
      is_signed = false;
      break;
    case DType::kI64:
      width = 8;
      break;
    case DType::kU64:
      width = 8;
      is_signed = false;
      break;
    default:
      return Mismatch(convention,
                      absl::StrCat("'", t->name, "' is ",
                                   DescribeStored(t->dtype, t->shape),
                                   " but must hold integers (I8, U8, I16, U16, "
                                   "I32, U32, I64 or U64)"));
  }
  const std::optional<uint64_t> need =
      t->num_elements < 0
          ? std::nullopt
          : CheckedMul<uint64_t>(static_cast<uint64_t>(t->num_elements),
                                 static_cast<uint64_t>(width));
  if (!need || *need != t->nbytes || t->data.size() != t->nbytes) {
    return Mismatch(
        convention,
        absl::StrCat("'", t->name, "' holds ", t->data.size(), " bytes but ",
                     t->num_elements, " elements of ", DTypeName(t->dtype),
                     " need ", t->num_elements, "x", width));
  }
  std::vector<int64_t> out(static_cast<size_t>(t->num_elements));
  const uint8_t* p = t->data.data();
  for (size_t i = 0; i < out.size(); ++i, p += width) {
    uint64_t u = 0;
    std::memcpy(&u, p, width);  // little-endian, as safetensors stores
    if (is_signed && width < 8) {
      const int shift = 64 - 8 * width;
      out[i] = static_cast<int64_t>(u << shift) >> shift;
    } else if (!is_signed && width == 8 &&
               u > static_cast<uint64_t>(INT64_MAX)) {
      return Mismatch(convention, absl::StrCat("'", t->name, "'[", i, "] = ", u,
                                               " does not fit in int64"));
    } else {
      out[i] = static_cast<int64_t>(u);
    }
  }
  return out;
}

absl::StatusOr<absl::string_view> ReadText(absl::string_view convention,
                                           const StoredTensor* t) {
  if (t->dtype != DType::kU8 ||
      t->data.size() != static_cast<uint64_t>(t->num_elements)) {
    return Mismatch(convention, absl::StrCat("'", t->name, "' is ",
                                             DescribeStored(t->dtype, t->shape),
                                             " but must hold text as U8"));
  }
  return absl::string_view(reinterpret_cast<const char*>(t->data.data()),
                           t->data.size());
}

absl::StatusOr<std::vector<float>> ReadFloatVector(absl::string_view convention,
                                                   const StoredTensor* t) {
  const DTypeInfo& info = GetDTypeInfo(t->dtype);
  if (!info.decodable || info.block_elems != 1 || info.block_bytes <= 0 ||
      t->data.size() !=
          static_cast<uint64_t>(t->num_elements) * info.block_bytes) {
    return Mismatch(convention, absl::StrCat("'", t->name, "' is ",
                                             DescribeStored(t->dtype, t->shape),
                                             " but must hold plain numbers"));
  }
  std::vector<float> out(static_cast<size_t>(t->num_elements));
  if (auto s =
          DecodeElements(t->dtype, t->data, 0, t->num_elements, out.data());
      !s.ok()) {
    return Mismatch(convention, absl::StrCat("'", t->name, "': ", s.message()));
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

int64_t CeilDiv(int64_t a, int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);  // never overflows, unlike a + b - 1
}

}  // namespace tensormorph::conventions
