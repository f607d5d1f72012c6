// A tensor's size as a quantization stores it: the bytes of every stored
// part of the logical tensor (codes, scales, zero-points, group indices: the
// companions count, as they do on disk), and bits per weight, those bytes x
// 8 / elements, the unit quantizations are compared and budgeted in.
//
// Thread safety: pure functions.
#ifndef TENSORMORPH_CORE_COMPARE_BITS_PER_WEIGHT_H_
#define TENSORMORPH_CORE_COMPARE_BITS_PER_WEIGHT_H_

#include <cstdint>

#include "core/tensor.h"

namespace tensormorph {

// The bytes of all of `t`'s stored parts.
int64_t StoredBytes(const LogicalTensor& t);

// bytes x 8 / elements; 0 for no elements.
double BitsPerWeight(int64_t bytes, int64_t elements);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPARE_BITS_PER_WEIGHT_H_
