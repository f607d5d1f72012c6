#include "core/stats_codes.h"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tensormorph {

namespace {

bool CountCodesScalar(const uint8_t* c, int64_t n, uint32_t count[16]) {
  std::fill(count, count + 16, 0u);
  // Four interleaved tables: a run of equal codes does not wait on its own
  // increments.
  uint32_t h[4][16] = {};
  int64_t j = 0;
  uint8_t any = 0;
  for (; j + 4 <= n; j += 4) {
    any |= c[j] | c[j + 1] | c[j + 2] | c[j + 3];
    if (any >= 16) return false;
    ++h[0][c[j]];
    ++h[1][c[j + 1]];
    ++h[2][c[j + 2]];
    ++h[3][c[j + 3]];
  }
  for (; j < n; ++j) {
    if (c[j] >= 16) return false;
    ++h[0][c[j]];
  }
  for (int k = 0; k < 16; ++k) count[k] = h[0][k] + h[1][k] + h[2][k] + h[3][k];
  return true;
}

#if defined(__x86_64__)
// 32 codes a load; per code value one compare, one mask and one popcount
// (the 16 constants set once). A tail shorter than 32 is masked out of
// every compare, and copied first where a load would pass `readable`.
__attribute__((target("avx2,popcnt"))) bool CountCodesAvx2(const uint8_t* c,
                                                           int64_t n,
                                                           int64_t readable,
                                                           uint32_t count[16]) {
  __m256i code[16];
  for (int k = 0; k < 16; ++k) code[k] = _mm256_set1_epi8(static_cast<char>(k));
  uint32_t sum[16] = {};
  alignas(32) uint8_t tail[32] = {};
  for (int64_t i = 0; i < n; i += 32) {
    const uint8_t* at = c + i;
    uint32_t valid = ~0u;
    if (n - i < 32) {
      valid = (uint32_t{1} << (n - i)) - 1;
      if (readable - i < 32) {
        std::memcpy(tail, at, static_cast<size_t>(n - i));
        at = tail;
      }
    }
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
    for (int k = 0; k < 16; ++k) {
      const uint32_t m = static_cast<uint32_t>(_mm256_movemask_epi8(
                             _mm256_cmpeq_epi8(x, code[k]))) &
                         valid;
      sum[k] += static_cast<uint32_t>(std::popcount(m));
    }
  }
  int64_t total = 0;
  for (int k = 0; k < 16; ++k) {
    count[k] = sum[k];
    total += sum[k];
  }
  return total == n;
}
#endif

}  // namespace

bool CountCodes(const uint8_t* c, int64_t n, int64_t readable, bool avx2,
                uint32_t count[16]) {
#if defined(__x86_64__)
  if (avx2) return CountCodesAvx2(c, n, readable, count);
#endif
  (void)avx2;
  (void)readable;
  return CountCodesScalar(c, n, count);
}

}  // namespace tensormorph
