// Shared machinery of the convention resolvers: finding and claiming stored
// tensors through checked companion views, and reading small integer and
// float companions of any width with precise DATA_LOSS messages.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_CONTEXT_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_CONTEXT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/format/stored_tensor.h"
#include "core/quant/affine_encoding.h"
#include "core/quant/conventions/quant_config.h"
#include "core/quant/resolve_problem.h"
#include "core/tensor.h"

namespace tensormorph::conventions {

// What a companion tensor's shape must be.
struct ShapeRule {
  enum class Kind { kAny, kRank, kExact };
  Kind kind = Kind::kAny;
  size_t rank = 0;            // kRank
  std::vector<int64_t> dims;  // kExact
  std::string why;            // kExact: what needs it, for the message

  static ShapeRule Any() { return {}; }
  static ShapeRule Rank(size_t rank) { return {Kind::kRank, rank, {}, ""}; }
  static ShapeRule Exact(std::vector<int64_t> dims, std::string why) {
    return {Kind::kExact, dims.size(), std::move(dims), std::move(why)};
  }
};

// The stored tensors of one checkpoint as the resolvers see them. Companion
// tensors (scales, zero points, g_idx, weight_shape, packed words, global
// scales) are reached only through Expect / ExpectIfPresent, which check
// dtype and shape; their bytes only through ReadIntVector / ReadFloatVector
// below, or through matrix views that MakeAffineEncoding validates against
// the tensors' bytes before any decoding.
class Context {
 public:
  // With `problems` (a lenient open for `tensormorph check`), Tolerate
  // records a tensor that cannot be resolved there instead of failing.
  explicit Context(const std::vector<StoredTensor>& stored,
                   std::vector<ResolveProblem>* problems = nullptr);

  // The outcome of resolving one logical tensor `tensor`: `s` itself, or
  // with a problems sink, OK after recording a non-OK `s` there (its rule
  // from RuleOf; else "undecodable-tensor" for UNIMPLEMENTED and
  // "unresolved-tensor" for the rest). A failed tensor
  // claims nothing, so its stored tensors stay tensors of their own.
  absl::Status Tolerate(absl::Status s, absl::string_view tensor);

  // Every stored tensor, for recognising a convention by name and dtype.
  const std::vector<StoredTensor>& stored() const { return stored_; }
  bool Has(absl::string_view name) const { return Find(name) != nullptr; }

  // The companion `name` of `for_tensor`, its dtype one of `allowed` (any
  // when empty) and its shape following `shape`.
  // Errors: DATA_LOSS "<convention>: ..." naming the tensor that needs it
  // and, for a missing tensor, a wrong dtype or shape, expected vs actual.
  absl::StatusOr<const StoredTensor*> Expect(
      absl::string_view convention, absl::string_view for_tensor,
      absl::string_view name, std::initializer_list<DType> allowed,
      const ShapeRule& shape) const;
  // As Expect, but nullptr when `name` is absent.
  absl::StatusOr<const StoredTensor*> ExpectIfPresent(
      absl::string_view convention, absl::string_view for_tensor,
      absl::string_view name, std::initializer_list<DType> allowed,
      const ShapeRule& shape) const;

  // Adds a logical tensor built from `params` (validated by
  // MakeAffineEncoding), claiming its parts.
  // Errors: those of MakeAffineEncoding, prefixed with `convention`.
  absl::Status Add(absl::string_view convention, const std::string& name,
                   AffineParams params);
  // Adds a logical tensor of shape `shape` decoded by `encoding` (an
  // encoding of its own, such as HQQ's), claiming the encoding's parts.
  void AddEncoded(const std::string& name, std::vector<int64_t> shape,
                  std::shared_ptr<const Encoding> encoding);
  bool claimed(absl::string_view name) const { return claimed_.contains(name); }

  std::vector<LogicalTensor> TakeTensors() { return std::move(out_); }

 private:
  const StoredTensor* Find(absl::string_view name) const;

  const std::vector<StoredTensor>& stored_;
  std::vector<ResolveProblem>* problems_;
  // Views of the stored tensors' names, which outlive the context.
  absl::flat_hash_map<absl::string_view, const StoredTensor*> by_name_;
  absl::flat_hash_set<absl::string_view> claimed_;
  std::vector<LogicalTensor> out_;
};

// DATA_LOSS: "<convention>: <message>".
absl::Status Mismatch(absl::string_view convention, absl::string_view message);

// `s` marked with the `tensormorph check` rule it breaks (a payload: the
// message is unchanged, so a strict open reads exactly as before).
// Expect marks a missing companion "missing-companion", ExpectDType and
// ExpectShape "companion-shape".
absl::Status WithRule(absl::Status s, absl::string_view rule);
// The rule WithRule put on `s`, or "" when none.
std::string RuleOf(const absl::Status& s);

// Checks dtype and shape, naming the tensor, what it is for, and expected vs
// actual in the message.
absl::Status ExpectDType(absl::string_view convention, const StoredTensor* t,
                         std::initializer_list<DType> allowed);
absl::Status ExpectShape(absl::string_view convention, const StoredTensor* t,
                         const std::vector<int64_t>& want,
                         absl::string_view why);

// The qweight (I32), qzeros (I32) and scales (F16/BF16/F32) of `prefix`,
// each 2-D, as GPTQ and AWQ store them; DATA_LOSS naming what is missing or
// mistyped.
struct PackedInt {
  const StoredTensor* qweight;
  const StoredTensor* qzeros;
  const StoredTensor* scales;
};
absl::StatusOr<PackedInt> NeedPackedInt(const Context& ctx,
                                        absl::string_view convention,
                                        const std::string& prefix);

// Every element of a small integer tensor (g_idx, weight_shape) of any
// integer width (I8, U8, I16, U16, I32, U32, I64, U64), as int64.
// Errors: DATA_LOSS naming the tensor when its dtype is not an integer, its
// bytes do not hold exactly its elements, or a U64 element exceeds int64.
absl::StatusOr<std::vector<int64_t>> ReadIntVector(absl::string_view convention,
                                                   const StoredTensor* t);
// The bytes of a U8 tensor holding text (bitsandbytes' quant state JSON).
// Errors: DATA_LOSS naming the tensor when it is not U8 or its bytes do not
// match its element count.
absl::StatusOr<absl::string_view> ReadText(absl::string_view convention,
                                           const StoredTensor* t);
// Every element of a small float tensor (codebooks), as float32.
// Errors: DATA_LOSS naming the tensor when its dtype does not decode to
// float or its bytes do not hold its elements.
absl::StatusOr<std::vector<float>> ReadFloatVector(absl::string_view convention,
                                                   const StoredTensor* t);

// The 256 values of an FP8 dtype, the 16 of FP4 E2M1.
std::vector<float> Fp8Table(DType dtype);
std::vector<float> E2M1Table();

int64_t CeilDiv(int64_t a, int64_t b);

// Per-convention resolvers. Each claims the stored tensors it turns into
// logical ones. Errors: DATA_LOSS when metadata and tensors disagree;
// UNIMPLEMENTED for a recognised but unsupported variant.
absl::Status ResolveGptq(Context& ctx, const GptqConfig& config);
absl::Status ResolveAwq(Context& ctx, const AwqConfig& config);
absl::Status ResolveCompressedTensors(Context& ctx,
                                      const CompressedTensorsConfig& config);
absl::Status ResolveFp8(Context& ctx, const Fp8Config& config);
absl::Status ResolveMxfp4GptOss(Context& ctx);
absl::Status ResolveBitsandbytes(Context& ctx);
absl::Status ResolveMlx(Context& ctx, const MlxConfig& config);
absl::Status ResolveBitsandbytesInt8(Context& ctx);
absl::Status ResolveModelOpt(Context& ctx, const ModelOptConfig& config);
absl::Status ResolveHqq(Context& ctx, const HqqConfig& config);

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_CONTEXT_H_
