#include "core/quant/matrix_view.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/quant/codec.h"
#include "core/quant/float_formats.h"

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

// Nibble streams to one code per byte, 16 input bytes at a time.
// `high_first`: the first code of each byte is its high nibble.
void SpreadNibbleBytes(const uint8_t* in, int64_t bytes, bool high_first,
                       uint8_t* out) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (; i + 16 <= bytes; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m128i first = _mm_and_si128(x, mask);
    __m128i second = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
    if (high_first) std::swap(first, second);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm_unpacklo_epi8(first, second));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i + 16),
                     _mm_unpackhi_epi8(first, second));
  }
#endif
  for (; i < bytes; ++i) {
    const uint8_t lo = in[i] & 0xF, hi = in[i] >> 4;
    out[2 * i] = high_first ? hi : lo;
    out[2 * i + 1] = high_first ? lo : hi;
  }
}

// A stored row of ModelOpt's INT4 pairs (kNibblePairsOfRows) to its two
// logical rows: low nibbles to `even`, high ones to `odd`; a null row is
// skipped. 16 bytes at a time.
void SplitNibblePairs(const uint8_t* in, int64_t n, uint8_t* even,
                      uint8_t* odd) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (; i + 16 <= n; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    if (even != nullptr) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(even + i),
                       _mm_and_si128(x, mask));
    }
    if (odd != nullptr) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(odd + i),
                       _mm_and_si128(_mm_srli_epi16(x, 4), mask));
    }
  }
#endif
  for (; i < n; ++i) {
    if (even != nullptr) even[i] = in[i] & 0xF;
    if (odd != nullptr) odd[i] = in[i] >> 4;
  }
}

// Four consecutive words' nibbles, each word's eight (low nibble first) to
// its own row of `out`, rows `stride` bytes apart.
void SpreadFourWords(const uint8_t* words, uint8_t* out, int64_t stride) {
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words));
  const __m128i lo = _mm_and_si128(x, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
  const __m128i s01 = _mm_unpacklo_epi8(lo, hi),
                s23 = _mm_unpackhi_epi8(lo, hi);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), s01);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + stride),
                   _mm_srli_si128(s01, 8));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 2 * stride), s23);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 3 * stride),
                   _mm_srli_si128(s23, 8));
#else
  for (int i = 0; i < 4; ++i)
    SpreadNibbleBytes(words + 4 * i, 4, false, out + i * stride);
#endif
}

// AWQ's transposed qweight: the word at stored (c, r / 8) holds the codes of
// rows r..r+7 (slots permuted) at column c. Eight columns' words make an 8x8
// matrix of codes [column][slot], transposed here into [slot][column].
void TransposedNibbleBlock(const uint32_t words[8], uint64_t rows[8]) {
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi8(0x0F);
  __m128i v[8];  // v[k]: the eight codes of column k, one per byte
  for (int h = 0; h < 2; ++h) {
    const __m128i x =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + 4 * h));
    const __m128i lo = _mm_and_si128(x, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
    const __m128i s01 = _mm_unpacklo_epi8(lo, hi),
                  s23 = _mm_unpackhi_epi8(lo, hi);
    v[4 * h] = s01;
    v[4 * h + 1] = _mm_srli_si128(s01, 8);
    v[4 * h + 2] = s23;
    v[4 * h + 3] = _mm_srli_si128(s23, 8);
  }
  const __m128i a0 = _mm_unpacklo_epi8(v[0], v[1]),
                a1 = _mm_unpacklo_epi8(v[2], v[3]);
  const __m128i a2 = _mm_unpacklo_epi8(v[4], v[5]),
                a3 = _mm_unpacklo_epi8(v[6], v[7]);
  const __m128i b0 = _mm_unpacklo_epi16(a0, a1),
                b1 = _mm_unpackhi_epi16(a0, a1);
  const __m128i b2 = _mm_unpacklo_epi16(a2, a3),
                b3 = _mm_unpackhi_epi16(a2, a3);
  const __m128i t[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2),
                        _mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3)};
  for (int k = 0; k < 4; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(rows + 2 * k), t[k]);
  }
#else
  for (int s = 0; s < 8; ++s) {
    uint64_t row = 0;
    for (int k = 0; k < 8; ++k) {
      row |= static_cast<uint64_t>((words[k] >> (4 * s)) & 0xF) << (8 * k);
    }
    rows[s] = row;
  }
#endif
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
    case Kind::kNibblePairsOfRows: {
      const uint8_t byte = tensor->data[(r / 2) * stored_cols + c];
      return r % 2 == 0 ? byte & 0xF : byte >> 4;
    }
  }
  return 0;
}

void IntMatrix::GetTile(int64_t r, int64_t nr, int64_t c, int64_t n,
                        uint8_t* out, int64_t stride) const {
  const uint8_t* data = tensor->data.data();
  auto word = [&](int64_t i) {
    uint32_t w;
    std::memcpy(&w, data + i * 4, 4);
    return w;
  };
  const bool bytes = kind == Kind::kDirect &&
                     GetDTypeInfo(tensor->dtype).block_bytes == 1 && bits == 8;
  const bool nibble_words =
      (kind == Kind::kPackedAlongCols || kind == Kind::kPackedAlongRows) &&
      bits == 4 && (per_word == 0 || per_word == 8);
  if (bytes && !transposed) {
    for (int64_t i = 0; i < nr; ++i) {
      std::memcpy(out + i * stride, data + (r + i) * stored_cols + c,
                  static_cast<size_t>(n));
    }
    return;
  }
  if (kind == Kind::kNibbles && !transposed && stored_cols % 2 == 0 &&
      c % 2 == 0 && n % 2 == 0) {
    for (int64_t i = 0; i < nr; ++i) {
      SpreadNibbleBytes(data + ((r + i) * stored_cols + c) / 2, n / 2,
                        high_nibble_first, out + i * stride);
    }
    return;
  }
  if (kind == Kind::kNibblePairsOfRows && !transposed) {
    // Each stored row read once for the two logical rows it holds.
    for (int64_t i = 0; i < nr;) {
      const int64_t row = r + i;
      const uint8_t* src = data + (row / 2) * stored_cols + c;
      if (row % 2 == 1) {
        SplitNibblePairs(src, n, nullptr, out + i * stride);
        ++i;
      } else if (i + 1 < nr) {
        SplitNibblePairs(src, n, out + i * stride, out + (i + 1) * stride);
        i += 2;
      } else {
        SplitNibblePairs(src, n, out + i * stride, nullptr);
        ++i;
      }
    }
    return;
  }
  if (nibble_words && kind == Kind::kPackedAlongCols && !transposed &&
      !interleaved && c % 2 == 0 && n % 2 == 0) {
    // compressed-tensors: a stored row is the logical row, its words a
    // nibble stream, low nibble first.
    for (int64_t i = 0; i < nr; ++i) {
      SpreadNibbleBytes(data + (r + i) * stored_cols * 4 + c / 2, n / 2, false,
                        out + i * stride);
    }
    return;
  }
  if (nibble_words && kind == Kind::kPackedAlongRows && transposed &&
      !interleaved) {
    // GPTQ: stored row w holds columns 8w..8w+7 of every logical row, one
    // word per row, so a tile's words of one stored row are contiguous.
    for (int64_t w = c / 8; w <= (c + n - 1) / 8; ++w) {
      const uint8_t* words = data + (w * stored_cols + r) * 4;
      const int64_t lo = std::max(c, 8 * w), hi = std::min(c + n, 8 * w + 8);
      uint8_t* col = out + (lo - c);
      int64_t i = 0;
      if (hi - lo == 8) {
        for (; i + 4 <= nr; i += 4)
          SpreadFourWords(words + 4 * i, col + i * stride, stride);
      }
      for (; i < nr; ++i) {
        uint32_t v;
        std::memcpy(&v, words + 4 * i, 4);
        for (int64_t k = lo; k < hi; ++k) {
          col[i * stride + (k - lo)] = (v >> (4 * (k - 8 * w))) & 0xF;
        }
      }
    }
    return;
  }
  if (nibble_words && kind == Kind::kPackedAlongCols && transposed) {
    // AWQ: stored row c holds column c of every logical row, a word per eight
    // rows; eight columns are transposed at a time.
    int64_t j = c;
    for (; j + 8 <= c + n; j += 8) {
      for (int64_t band = r / 8; band <= (r + nr - 1) / 8; ++band) {
        uint32_t words[8];
        uint64_t rows8[8];
        for (int k = 0; k < 8; ++k) {
          words[k] = word((j + k) * stored_cols + band);
        }
        TransposedNibbleBlock(words, rows8);
        for (int k = 0; k < 8; ++k) {
          const int64_t row = band * 8 + k;
          if (row < r || row >= r + nr) continue;
          std::memcpy(out + (row - r) * stride + (j - c),
                      &rows8[interleaved ? slot_of[k] : k], 8);
        }
      }
    }
    for (int64_t i = 0; i < nr; ++i) {
      for (int64_t k = j; k < c + n; ++k) {
        out[i * stride + k - c] = static_cast<uint8_t>(Get(r + i, k));
      }
    }
    return;
  }
  for (int64_t i = 0; i < nr; ++i) {
    for (int64_t k = 0; k < n; ++k) {
      out[i * stride + k] = static_cast<uint8_t>(Get(r + i, c + k));
    }
  }
}

void FloatMatrix::GetTile(int64_t r, int64_t nr, int64_t c, int64_t n,
                          float* out) const {
  if (!transposed && tensor->dtype == DType::kF8E4M3) {
    // NVFP4's block scales, one per 16 values: looked up, since converting
    // each (F8E4M3ToF32, through ldexp) cost as much as decoding the codes.
    static const std::array<float, 256> table = [] {
      std::array<float, 256> t;
      for (int b = 0; b < 256; ++b) t[b] = F8E4M3ToF32(static_cast<uint8_t>(b));
      return t;
    }();
    for (int64_t i = 0; i < nr; ++i) {
      const uint8_t* src = tensor->data.data() + (r + i) * cols + c;
      for (int64_t j = 0; j < n; ++j) out[i * n + j] = table[src[j]];
    }
    return;
  }
  if (!transposed) {
    for (int64_t i = 0; i < nr; ++i) {
      (void)DecodeElements(tensor->dtype, tensor->data, (r + i) * cols + c, n,
                           out + i * n);
    }
    return;
  }
  // Stored [cols, rows]: a logical column is a stored row.
  thread_local std::vector<float> column;
  column.resize(static_cast<size_t>(nr));
  for (int64_t j = 0; j < n; ++j) {
    (void)DecodeElements(tensor->dtype, tensor->data, (c + j) * rows + r, nr,
                         column.data());
    for (int64_t i = 0; i < nr; ++i) out[i * n + j] = column[i];
  }
}

float FloatMatrix::Get(int64_t r, int64_t c) const {
  if (transposed) std::swap(r, c);
  const int64_t stored_cols = transposed ? rows : cols;
  float v = 0;
  (void)DecodeElements(tensor->dtype, tensor->data, r * stored_cols + c, 1, &v);
  return v;
}

}  // namespace tensormorph
