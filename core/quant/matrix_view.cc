#include "core/quant/matrix_view.h"

#include <cstring>

#include "core/quant/codec.h"

namespace tensormorph {
namespace {

uint32_t Word(const StoredTensor* t, int64_t index) {
  uint32_t w;
  std::memcpy(&w, t->data.data() + index * 4, 4);
  return w;
}

// `bits` bits starting at bit `bit` of a stream of 32-bit words, where
// consecutive words are `stride` words apart starting at `first`.
uint32_t StreamBits(const StoredTensor* t, int64_t first, int64_t stride,
                    int64_t bit, int bits) {
  const int64_t w = bit / 32;
  const int shift = static_cast<int>(bit % 32);
  uint64_t v = Word(t, first + w * stride) >> shift;
  if (shift + bits > 32) {
    v |= static_cast<uint64_t>(Word(t, first + (w + 1) * stride))
         << (32 - shift);
  }
  return static_cast<uint32_t>(v & ((uint64_t{1} << bits) - 1));
}

}  // namespace

uint32_t IntMatrix::Get(int64_t r, int64_t c) const {
  if (transposed) std::swap(r, c);
  switch (kind) {
    case Kind::kDirect: {
      const DTypeInfo& info = GetDTypeInfo(tensor->dtype);
      const uint8_t* p =
          tensor->data.data() + (r * stored_cols + c) * info.block_bytes;
      uint64_t v = 0;
      std::memcpy(&v, p, info.block_bytes);
      return static_cast<uint32_t>(v & ((uint64_t{1} << bits) - 1));
    }
    case Kind::kPackedAlongCols: {
      if (interleaved) {  // 4-bit, eight per word, permuted slots
        const uint32_t w = Word(tensor, r * stored_cols + c / 8);
        return (w >> (4 * slot_of[c % 8])) & 0xF;
      }
      if (per_word > 0) {
        const uint32_t w = Word(tensor, r * stored_cols + c / per_word);
        return (w >> (bits * (c % per_word))) & ((1u << bits) - 1);
      }
      return StreamBits(tensor, r * stored_cols, 1, c * bits, bits);
    }
    case Kind::kPackedAlongRows:
      if (per_word > 0) {
        const uint32_t w = Word(tensor, (r / per_word) * stored_cols + c);
        return (w >> (bits * (r % per_word))) & ((1u << bits) - 1);
      }
      return StreamBits(tensor, c, stored_cols, r * bits, bits);
    case Kind::kNibbles: {
      const int64_t i = r * stored_cols + c;
      const uint8_t byte = tensor->data[i / 2];
      const bool high = (i % 2 == 0) == high_nibble_first;
      return high ? byte >> 4 : byte & 0xF;
    }
  }
  return 0;
}

float FloatMatrix::Get(int64_t r, int64_t c) const {
  if (transposed) std::swap(r, c);
  const int64_t stored_cols = transposed ? rows : cols;
  float v = 0;
  (void)DecodeElements(tensor->dtype, tensor->data, r * stored_cols + c, 1, &v);
  return v;
}

}  // namespace tensormorph
