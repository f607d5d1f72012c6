// Overflow-checked integer arithmetic for sizes that come from untrusted files.
#ifndef TENSORMORPH_CORE_UTIL_CHECKED_MATH_H_
#define TENSORMORPH_CORE_UTIL_CHECKED_MATH_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"

namespace tensormorph {

// Each returns std::nullopt when the exact result does not fit in T.
template <typename T>
std::optional<T> CheckedAdd(T a, T b) {
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

template <typename T>
std::optional<T> CheckedMul(T a, T b) {
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Product of non-negative dimensions; nullopt on overflow of int64 or a
// negative entry. The product of an empty list is 1 (a rank-0 scalar).
inline std::optional<int64_t> CheckedProduct(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    auto next = CheckedMul<int64_t>(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

// Rounds `v` up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<uint64_t> CheckedAlignUp(uint64_t v, uint64_t align) {
  auto sum = CheckedAdd<uint64_t>(v, align - 1);
  if (!sum) return std::nullopt;
  return *sum & ~(align - 1);
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_CHECKED_MATH_H_
