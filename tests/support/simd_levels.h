// The SIMD levels this CPU runs, scalar reference first: what the tests
// that hold every fast path to its reference iterate over.
#ifndef TENSORMORPH_TESTS_SUPPORT_SIMD_LEVELS_H_
#define TENSORMORPH_TESTS_SUPPORT_SIMD_LEVELS_H_

#include <vector>

#include "core/quant/decode_simd.h"

namespace tensormorph::testing {

inline std::vector<DecodeSimd> SupportedSimdLevels() {
  std::vector<DecodeSimd> out;
  for (int l = 0; l <= static_cast<int>(SupportedDecodeSimd()); ++l) {
    out.push_back(static_cast<DecodeSimd>(l));
  }
  return out;
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_SIMD_LEVELS_H_
