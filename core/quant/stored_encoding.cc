#include "core/quant/stored_encoding.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/quant/codec.h"
#include "core/quant/raw_codes.h"
#include "core/quant/sub_block_runs.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

std::string GranularityOf(DType dtype, const DTypeInfo& info) {
  switch (dtype) {
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ6_K:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ1_M:
      return "per-block 256 (16 sub-blocks of 16)";
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
      return "per-block 256 (8 sub-blocks of 32)";
    case DType::kNVFP4:
      return "per-block 64 (4 sub-blocks of 16)";
    default:
      break;
  }
  return HasBlockParams(dtype) ? absl::StrCat("per-block ", info.block_elems)
                               : "none";
}

// ggml types whose blocks carry a real-valued offset ("m", "dmin") beside
// the scale: value = d * code + m, or d * sc * code - dmin * m. (Q8_1's "s"
// is the block's sum for dot products, not a term of the value.)
bool HasOffset(DType dtype) {
  switch (dtype) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return true;
    default:
      return false;
  }
}

class StoredEncoding final : public Encoding {
 public:
  StoredEncoding(const StoredTensor& t, absl::string_view convention)
      : tensor_(t) {
    const DTypeInfo& dinfo = GetDTypeInfo(t.dtype);
    info_.scheme = StoredDTypeName(t);
    info_.convention = std::string(convention);
    info_.bits = dinfo.code_bits;
    info_.granularity = GranularityOf(t.dtype, dinfo);
    info_.quantized = info_.granularity != "none";
    info_.block_elems = dinfo.block_elems;
    info_.symmetric = !HasOffset(t.dtype);
  }

  const EncodingInfo& info() const override { return info_; }
  std::vector<const StoredTensor*> parts() const override { return {&tensor_}; }
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    if (tensor_.dtype == DType::kGgmlUnknown) return UnknownType();
    return DecodeElements(tensor_.dtype, tensor_.data, first, count, out);
  }
  absl::Status Inspect(int64_t index, ScalarInfo* out) const override {
    if (tensor_.dtype == DType::kGgmlUnknown) return UnknownType();
    return InspectElement(tensor_.dtype, tensor_.data, index, out);
  }

  // ggml groups are arithmetic of the index: the storage block, and the
  // sub-block within it where the type has them (InspectElement's id).
  absl::Status GroupIds(absl::Span<const int64_t> indices,
                        int64_t* out) const override {
    if (GetCodec(tensor_.dtype) == nullptr) {
      return Encoding::GroupIds(indices, out);  // Inspect's refusal
    }
    if (!HasBlockParams(tensor_.dtype)) {
      std::fill_n(out, indices.size(), int64_t{-1});
      return absl::OkStatus();
    }
    // block * subs + sub_block = index / (elements per sub-block), blocks
    // being whole sub-blocks; a shift where that is a power of two (every
    // ggml type's is).
    const int64_t sub_elems = GetDTypeInfo(tensor_.dtype).block_elems /
                              SubBlocksPerBlock(tensor_.dtype);
    if ((sub_elems & (sub_elems - 1)) == 0) {
      const int shift = std::countr_zero(static_cast<uint64_t>(sub_elems));
      for (size_t i = 0; i < indices.size(); ++i) out[i] = indices[i] >> shift;
    } else {
      for (size_t i = 0; i < indices.size(); ++i)
        out[i] = indices[i] / sub_elems;
    }
    return absl::OkStatus();
  }

  absl::Status RawCodes(int64_t first, int64_t count,
                        uint8_t* out) const override {
    if (tensor_.dtype == DType::kGgmlUnknown) return UnknownType();
    return CodesOfElements(tensor_.dtype, tensor_.data, first, count, out);
  }

  const float* StoredF32() const override {
    if (tensor_.dtype != DType::kF32 ||
        reinterpret_cast<uintptr_t>(tensor_.data.data()) % alignof(float) !=
            0) {
      return nullptr;
    }
    return reinterpret_cast<const float*>(tensor_.data.data());
  }

  const uint16_t* StoredF16() const override { return Stored16(DType::kF16); }
  const uint16_t* StoredBF16() const override { return Stored16(DType::kBF16); }

  // The 16-bit codes where the tensor is of `dtype` and they are aligned.
  const uint16_t* Stored16(DType dtype) const {
    if (tensor_.dtype != dtype ||
        reinterpret_cast<uintptr_t>(tensor_.data.data()) % alignof(uint16_t) !=
            0) {
      return nullptr;
    }
    return reinterpret_cast<const uint16_t*>(tensor_.data.data());
  }

  const FloatStepTable* PlainFloatSteps() const override {
    return FloatStepTable::For(tensor_.dtype);
  }

  void Prefetch(int64_t index) const override {
    const DTypeInfo& info = GetDTypeInfo(tensor_.dtype);
    __builtin_prefetch(tensor_.data.data() +
                       index / info.block_elems * info.block_bytes);
  }

  // Values come from the block decoder; for evenly spaced levels the
  // block parameters (GetSubBlockRuns) or else one inspected element per
  // sub-block supply the step, range and group of the sub-block's run
  // (codebooks and floats are inspected element by element).
  absl::Status DecodeRuns(int64_t first, int64_t count, float* values,
                          std::vector<QuantRun>* runs) const override {
    const DTypeInfo& info = GetDTypeInfo(tensor_.dtype);
    if (!info.uniform_levels) {
      return Encoding::DecodeRuns(first, count, values, runs);
    }
    absl::Status s =
        DecodeElements(tensor_.dtype, tensor_.data, first, count, values);
    if (!s.ok()) return s;
    runs->clear();
    const int64_t sub = info.sub_block_elems;
    const SubBlockRunsFn block_runs = GetSubBlockRuns(tensor_.dtype);
    const int64_t be = info.block_elems;
    const int64_t subs = SubBlocksPerBlock(tensor_.dtype);
    for (int64_t i = 0; i < count;) {
      // Whole blocks: their runs from the block parameters alone.
      if (block_runs != nullptr && (first + i) % be == 0 && count - i >= be) {
        const int64_t block = (first + i) / be, nb = (count - i) / be;
        const size_t at = runs->size();
        runs->resize(at + static_cast<size_t>(nb * subs));
        const uint8_t* p = tensor_.data.data() + block * info.block_bytes;
        for (int64_t b = 0; b < nb; ++b, p += info.block_bytes) {
          block_runs(p, (block + b) * subs, runs->data() + at + b * subs);
        }
        i += nb * be;
        continue;
      }
      ScalarInfo si;
      s = InspectElement(tensor_.dtype, tensor_.data, first + i, &si);
      if (!s.ok()) return s;
      const int64_t len = std::min(count - i, sub - (first + i) % sub);
      runs->push_back({len, GroupIdOf(si), si.step_below, si.step_above,
                       si.range_min, si.range_max});
      i += len;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status UnknownType() const {
    return WithReason(
        absl::UnimplementedError(absl::StrCat(
            "tensor '", tensor_.name, "' is stored as ",
            StoredDTypeName(tensor_),
            ", which Tensormorph does not decode (its block size is unknown)")),
        ErrorReason::kUnsupportedDtype, {{"dtype", StoredDTypeName(tensor_)}});
  }

  const StoredTensor& tensor_;
  EncodingInfo info_;
};

}  // namespace

std::shared_ptr<const Encoding> MakeStoredEncoding(
    const StoredTensor& tensor, absl::string_view convention) {
  return std::make_shared<StoredEncoding>(tensor, convention);
}

}  // namespace tensormorph
