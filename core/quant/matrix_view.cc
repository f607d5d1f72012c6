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

void IntMatrix::GetRun(int64_t r, int64_t c, int64_t n, uint32_t* out) const {
  const uint32_t mask = bits >= 32
                            ? 0xFFFFFFFFu
                            : static_cast<uint32_t>((uint64_t{1} << bits) - 1);
  const uint8_t* data = tensor->data.data();
  auto word = [&](int64_t i) {
    uint32_t w;
    std::memcpy(&w, data + i * 4, 4);
    return w;
  };
  if (!transposed && kind == Kind::kDirect &&
      GetDTypeInfo(tensor->dtype).block_bytes == 1) {
    const uint8_t* p = data + r * stored_cols + c;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i] & mask;
    return;
  }
  if (transposed && kind == Kind::kDirect &&
      GetDTypeInfo(tensor->dtype).block_bytes == 1) {
    const uint8_t* p = data + c * stored_cols + r;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i * stored_cols] & mask;
    return;
  }
  // Codes per word: a continuous bit stream of a width dividing 32 never
  // straddles words, so it is packed per word too.
  const int pw = interleaved                  ? 8
                 : per_word > 0               ? per_word
                 : bits > 0 && 32 % bits == 0 ? 32 / bits
                                              : 0;
  if (kind == Kind::kPackedAlongCols && pw > 0 && !transposed) {
    // Codes of a stored row, pw to a word (AWQ permutes the slots).
    int64_t w = r * stored_cols + c / pw;
    int k = static_cast<int>(c % pw);
    uint32_t v = word(w);
    for (int64_t i = 0; i < n; ++i) {
      const int slot = interleaved ? slot_of[k] : k;
      out[i] = (v >> (bits * slot)) & mask;
      if (++k == pw && i + 1 < n) {
        k = 0;
        v = word(++w);
      }
    }
    return;
  }
  if (kind == Kind::kPackedAlongCols && pw > 0) {
    // Transposed (AWQ's qweight): logical c walks stored rows, one word each,
    // always the same slot.
    const int k = static_cast<int>(r % pw);
    const int shift = bits * (interleaved ? slot_of[k] : k);
    const int64_t base = c * stored_cols + r / pw;
    for (int64_t i = 0; i < n; ++i)
      out[i] = (word(base + i * stored_cols) >> shift) & mask;
    return;
  }
  if (kind == Kind::kPackedAlongRows && pw > 0) {
    if (!transposed) {  // along c: one word per code, the same slot
      const int64_t base = (r / pw) * stored_cols;
      const int shift = bits * static_cast<int>(r % pw);
      for (int64_t i = 0; i < n; ++i)
        out[i] = (word(base + c + i) >> shift) & mask;
      return;
    }
    // Transposed (GPTQ's qweight): logical c walks the packed stored rows.
    int64_t w = (c / pw) * stored_cols + r;
    int k = static_cast<int>(c % pw);
    uint32_t v = word(w);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = (v >> (bits * k)) & mask;
      if (++k == pw && i + 1 < n) {
        k = 0;
        w += stored_cols;
        v = word(w);
      }
    }
    return;
  }
  if (!transposed && kind == Kind::kNibbles) {
    int64_t i0 = r * stored_cols + c;
    for (int64_t i = 0; i < n; ++i, ++i0) {
      const uint8_t byte = data[i0 / 2];
      const bool high = (i0 % 2 == 0) == high_nibble_first;
      out[i] = high ? byte >> 4 : byte & 0xF;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = Get(r, c + i);
}

float FloatMatrix::Get(int64_t r, int64_t c) const {
  if (transposed) std::swap(r, c);
  const int64_t stored_cols = transposed ? rows : cols;
  float v = 0;
  (void)DecodeElements(tensor->dtype, tensor->data, r * stored_cols + c, 1, &v);
  return v;
}

}  // namespace tensormorph
