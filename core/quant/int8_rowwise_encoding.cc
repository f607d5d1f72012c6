#include "core/quant/int8_rowwise_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/quant/block_util.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// out[i] = float(q[i]) * s * kBnbInv127, in that order: element by element
// the reference's expression, which the compiler vectorizes without
// reordering (-ffp-contract=off), cloned for AVX-512 and AVX2 and picked
// at load time (portable binaries: no -march=native).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void ScaleRow(const int8_t* q, int64_t n, float s, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(q[i]) * s * kBnbInv127;
  }
}

class Int8RowwiseEncoding final : public Encoding {
 public:
  explicit Int8RowwiseEncoding(Int8RowwiseParams p)
      : p_(std::move(p)), cols_(p_.weight->shape[1]) {}

  const EncodingInfo& info() const override { return p_.info; }
  std::vector<const StoredTensor*> parts() const override { return p_.parts; }

  // A row segment at a time (ScaleRow: Inspect's expression per element).
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    const int8_t* q = Codes();
    while (count > 0) {
      const int64_t r = first / cols_, c = first % cols_;
      const int64_t n = std::min(count, cols_ - c);
      ScaleRow(q + first, n, Scb(r), out);
      out += n;
      first += n;
      count -= n;
    }
    return absl::OkStatus();
  }

  absl::Status RawCodes(int64_t first, int64_t count,
                        uint8_t* out) const override {
    std::memcpy(out, p_.weight->data.data() + first,
                static_cast<size_t>(count));
    return absl::OkStatus();
  }

  absl::Status GroupIds(absl::Span<const int64_t> indices,
                        int64_t* out) const override {
    for (size_t i = 0; i < indices.size(); ++i) out[i] = indices[i] / cols_;
    return absl::OkStatus();
  }

  // One run per row segment: levels -127..127 of step SCB / 127.
  absl::Status DecodeRuns(int64_t first, int64_t count, float* values,
                          std::vector<QuantRun>* runs) const override {
    TM_RETURN_IF_ERROR(Decode(first, count, values));
    runs->clear();
    for (int64_t i = 0; i < count;) {
      const int64_t r = (first + i) / cols_, c = (first + i) % cols_;
      const int64_t n = std::min(count - i, cols_ - c);
      const double step = std::fabs(static_cast<double>(Scb(r)) / 127);
      runs->push_back({n, r, step, step, -127 * step, 127 * step});
      i += n;
    }
    return absl::OkStatus();
  }

  absl::Status Inspect(int64_t flat, ScalarInfo* s) const override {
    const int64_t r = flat / cols_;
    const int8_t q = Codes()[flat];
    const float scb = Scb(r);
    *s = ScalarInfo();
    s->code_bits_value = static_cast<uint8_t>(q);
    s->code = q;
    s->code_width = 8;
    s->block = s->group = r;
    s->scale = static_cast<double>(scb) / 127;
    s->level = q;
    s->value = static_cast<float>(q) * scb * kBnbInv127;
    FillUniformSteps(s->scale, -127, 127, 0, s);
    s->AddParam("SCB", scb);
    return absl::OkStatus();
  }

 private:
  const int8_t* Codes() const {
    return reinterpret_cast<const int8_t*>(p_.weight->data.data());
  }
  float Scb(int64_t r) const {
    float f;
    std::memcpy(&f, p_.scb->data.data() + r * 4, 4);
    return f;
  }

  Int8RowwiseParams p_;
  int64_t cols_;
};

absl::Status Invalid(const StoredTensor* t, absl::string_view rule) {
  return absl::DataLossError(absl::StrCat(
      "'", t->name, "' (", DescribeStored(t->dtype, t->shape), "): ", rule));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Encoding>> MakeInt8RowwiseEncoding(
    Int8RowwiseParams p) {
  if (p.weight == nullptr || p.scb == nullptr) {
    return absl::DataLossError("LLM.int8 encoding without weight or SCB");
  }
  const StoredTensor* w = p.weight;
  if (w->dtype != DType::kI8 || w->shape.size() != 2 ||
      static_cast<int64_t>(w->data.size()) != w->num_elements) {
    return Invalid(w, "must be I8[out, in]");
  }
  const StoredTensor* s = p.scb;
  if (s->dtype != DType::kF32 || s->num_elements != w->shape[0] ||
      static_cast<int64_t>(s->data.size()) != s->num_elements * 4) {
    return Invalid(
        s, absl::StrCat("must be F32[", w->shape[0], "], one absmax per row"));
  }
  return std::shared_ptr<const Encoding>(
      std::make_shared<Int8RowwiseEncoding>(std::move(p)));
}

}  // namespace tensormorph
