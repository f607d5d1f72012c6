// HQQ's column decode (HqqDecodeColumns, axis 0) when the arithmetic, the
// scales and the zeros are float16, in the CPU's own float16 arithmetic
// (AVX512-FP16): vsubph and vmulph round each result once to float16, to
// nearest even, subnormals and overflow included, which is HqqValue's
// R(R(c - z) * s) for every input (c <= 255 is exact in float16), so no
// group needs the float32 path's exactness check. Thirty-two elements a
// step: their codes, scales and zeros read where they are stored.
#ifndef TENSORMORPH_CORE_QUANT_HQQ_FP16_KERNELS_H_
#define TENSORMORPH_CORE_QUANT_HQQ_FP16_KERNELS_H_

#include <cstdint>

#include "core/quant/hqq_kernels.h"

namespace tensormorph {

// out[i] = HqqValue(code i, s[i], z[i], kF16) for i in [0, n), s and z the
// float16 values at `s` and `z`. Returns false, having written nothing,
// when ActiveDecodeSimd() is below kAvx512, the CPU lacks AVX512-FP16, or
// the codes are not one byte a word.
// REQUIRES: codes.data holds n words; s and z n float16 values each.
bool HqqDecodeColumnsFp16(const HqqCodes& codes, int64_t n, const uint8_t* s,
                          const uint8_t* z, float* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_HQQ_FP16_KERNELS_H_
