// Bit-exact comparison of decoded values, the one rule every test uses: the
// decoders promise the same bits as their references, signed zeros
// included. Two NaNs match whatever their sign and payload (no format
// promises a NaN's payload, and references differ in it).
#ifndef TENSORMORPH_TESTS_SUPPORT_SAME_BITS_H_
#define TENSORMORPH_TESTS_SUPPORT_SAME_BITS_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace tensormorph::testing {

namespace same_bits_internal {
template <typename T, typename Bits>
::testing::AssertionResult Compare(T got, T want) {
  Bits a, b;
  std::memcpy(&a, &got, sizeof a);
  std::memcpy(&b, &want, sizeof b);
  if (a == b || (std::isnan(got) && std::isnan(want)))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << got << " (0x" << std::hex << a << ") want " << want
         << " (0x" << b << ")";
}
}  // namespace same_bits_internal

inline ::testing::AssertionResult SameBits(float got, float want) {
  return same_bits_internal::Compare<float, uint32_t>(got, want);
}
inline ::testing::AssertionResult SameBits(double got, double want) {
  return same_bits_internal::Compare<double, uint64_t>(got, want);
}

// Element by element; the failure names the first element that differs.
inline ::testing::AssertionResult SameBits(absl::Span<const float> got,
                                           absl::Span<const float> want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    ::testing::AssertionResult r = SameBits(got[i], want[i]);
    if (!r)
      return ::testing::AssertionFailure()
             << "element " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult SameBits(const std::vector<float>& got,
                                           const std::vector<float>& want) {
  return SameBits(absl::Span<const float>(got), absl::Span<const float>(want));
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_SAME_BITS_H_
