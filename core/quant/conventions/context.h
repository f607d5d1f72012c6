// Shared machinery of the convention resolvers: finding and claiming stored
// tensors, and checking their shapes with precise DATA_LOSS messages.
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
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace tensormorph::conventions {

class Context {
 public:
  Context(const std::vector<StoredTensor>& stored,
          const nlohmann::json& qconfig);

  const nlohmann::json& config() const { return qconfig_; }
  const std::vector<StoredTensor>& stored() const { return stored_; }
  const StoredTensor* Find(absl::string_view name) const;
  // The companion `name`, or DATA_LOSS naming the convention, the tensor that
  // needs it, and what is missing.
  absl::StatusOr<const StoredTensor*> Need(absl::string_view convention,
                                           absl::string_view for_tensor,
                                           const std::string& name) const;

  // Adds a logical tensor built from `params`, claiming its parts.
  void Add(const std::string& name, AffineParams params);
  bool claimed(absl::string_view name) const { return claimed_.contains(name); }
  void Claim(const StoredTensor* t) { claimed_.insert(t->name); }

  std::vector<LogicalTensor> TakeTensors() { return std::move(out_); }

 private:
  const std::vector<StoredTensor>& stored_;
  const nlohmann::json& qconfig_;
  // Views of the stored tensors' names, which outlive the context.
  absl::flat_hash_map<absl::string_view, const StoredTensor*> by_name_;
  absl::flat_hash_set<absl::string_view> claimed_;
  std::vector<LogicalTensor> out_;
};

// DATA_LOSS: "<convention>: <message>".
absl::Status Mismatch(absl::string_view convention, absl::string_view message);

// Checks dtype and shape, naming the tensor, what it is for, and expected vs
// actual in the message.
absl::Status ExpectDType(absl::string_view convention, const StoredTensor* t,
                         std::initializer_list<DType> allowed);
absl::Status ExpectShape(absl::string_view convention, const StoredTensor* t,
                         const std::vector<int64_t>& want,
                         absl::string_view why);

// The qweight (I32), qzeros (I32) and scales (F16/BF16/F32) of `prefix`,
// as GPTQ and AWQ store them; DATA_LOSS naming what is missing or mistyped.
struct PackedInt {
  const StoredTensor* qweight;
  const StoredTensor* qzeros;
  const StoredTensor* scales;
};
absl::StatusOr<PackedInt> NeedPackedInt(const Context& ctx,
                                        absl::string_view convention,
                                        const std::string& prefix);

// Config helpers: a missing key or null gives the default.
int64_t JsonInt(const nlohmann::json& j, const char* key, int64_t def);
bool JsonBool(const nlohmann::json& j, const char* key, bool def);
std::string JsonString(const nlohmann::json& j, const char* key,
                       const std::string& def = "");

// Reads a small I32/I64 tensor fully (g_idx, weight_shape).
std::vector<int64_t> ReadInts(const StoredTensor* t);

// The 256 values of an FP8 dtype, the 16 of FP4 E2M1.
std::vector<float> Fp8Table(DType dtype);
std::vector<float> E2M1Table();

int64_t CeilDiv(int64_t a, int64_t b);

// Per-convention resolvers. Each claims the stored tensors it turns into
// logical ones. Errors: DATA_LOSS when metadata and tensors disagree;
// UNIMPLEMENTED for a recognised but unsupported variant.
absl::Status ResolveGptq(Context& ctx);
absl::Status ResolveAwq(Context& ctx);
absl::Status ResolveCompressedTensors(Context& ctx);
absl::Status ResolveFp8(Context& ctx);
absl::Status ResolveMxfp4GptOss(Context& ctx);
absl::Status ResolveBitsandbytes(Context& ctx);

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_CONTEXT_H_
