#include "core/quant/raw_codes.h"

#include <algorithm>
#include <cstring>

#include "core/quant/codec.h"

namespace tensormorph {
namespace {

// Each unpacks one storage block's codes, in element order, as the
// dtype's inspector reads them (ggml_*_codecs.cc).
using BlockCodes = void (*)(const uint8_t* block, uint8_t* out);

// Q4_0 (d, then 16 bytes) and Q4_1 (d, m, then 16 bytes): element i < 16 is
// the low nibble of byte i, element i >= 16 the high nibble of byte i - 16.
template <int kHeader>
void Nibbles32(const uint8_t* p, uint8_t* out) {
  const uint8_t* qs = p + kHeader;
  for (int i = 0; i < 16; ++i) {
    out[i] = qs[i] & 0x0F;
    out[i + 16] = qs[i] >> 4;
  }
}

// Q8_0: d, then 32 signed bytes whose bit patterns are the codes.
void Bytes32(const uint8_t* p, uint8_t* out) { std::memcpy(out, p + 2, 32); }

// Q4_K and Q5_K: element e = 64 * chunk + r reads byte chunk * 32 + r % 32
// of qs, its low nibble for r < 32 and its high one above; Q5_K adds 16
// where bit (r < 32 ? 0 : 1) + 2 * chunk of qh[r % 32] is set.
template <bool kFiveBit>
void Q45K(const uint8_t* p, uint8_t* out) {
  const uint8_t* qh = p + 16;
  const uint8_t* qs = kFiveBit ? p + 48 : p + 16;
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[chunk * 32 + l];
      uint8_t lo = byte & 0x0F, hi = byte >> 4;
      if (kFiveBit) {
        lo += ((qh[l] >> (2 * chunk)) & 1) << 4;
        hi += ((qh[l] >> (2 * chunk + 1)) & 1) << 4;
      }
      out[chunk * 64 + l] = lo;
      out[chunk * 64 + 32 + l] = hi;
    }
  }
}

// Q6_K: ql[128], qh[64], then scales and d. Element e = 128 * half +
// 32 * quarter + l takes its low 4 bits from ql[64 * half + l + (quarter odd
// ? 32 : 0)] (low nibble for quarters 0 and 1, high for 2 and 3) and its
// high 2 bits from bits 2 * quarter of qh[32 * half + l].
void Q6K(const uint8_t* p, uint8_t* out) {
  const uint8_t* ql_all = p;
  const uint8_t* qh_all = p + 128;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = ql_all + 64 * half;
    const uint8_t* qh = qh_all + 32 * half;
    for (int quarter = 0; quarter < 4; ++quarter) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t low = quarter % 2 == 0 ? ql[l] : ql[l + 32];
        const int lowbits = quarter < 2 ? (low & 0xF) : (low >> 4);
        out[128 * half + 32 * quarter + l] = static_cast<uint8_t>(
            lowbits | (((qh[l] >> (2 * quarter)) & 3) << 4));
      }
    }
  }
}

BlockCodes BlockCodesOf(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return Nibbles32<2>;
    case DType::kQ4_1:
      return Nibbles32<4>;
    case DType::kQ8_0:
      return Bytes32;
    case DType::kQ4_K:
      return Q45K<false>;
    case DType::kQ5_K:
      return Q45K<true>;
    case DType::kQ6_K:
      return Q6K;
    default:
      return nullptr;
  }
}

}  // namespace

absl::Status CodesOfElements(DType dtype, absl::Span<const uint8_t> data,
                             int64_t first, int64_t count, uint8_t* out) {
  const BlockCodes codes = BlockCodesOf(dtype);
  if (codes == nullptr) {
    ScalarInfo s;
    for (int64_t i = 0; i < count; ++i) {
      if (absl::Status st = InspectElement(dtype, data, first + i, &s);
          !st.ok())
        return st;
      out[i] = static_cast<uint8_t>(s.code_bits_value);
    }
    return absl::OkStatus();
  }
  const DTypeInfo& info = GetDTypeInfo(dtype);
  const int64_t be = info.block_elems;
  uint8_t scratch[256];
  int64_t block = first / be, within = first % be;
  while (count > 0) {
    const uint8_t* p = data.data() + block * info.block_bytes;
    const int64_t n = std::min(count, be - within);
    if (n == be) {
      codes(p, out);
    } else {  // a partial block at either end
      codes(p, scratch);
      std::memcpy(out, scratch + within, static_cast<size_t>(n));
    }
    out += n;
    count -= n;
    ++block;
    within = 0;
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
