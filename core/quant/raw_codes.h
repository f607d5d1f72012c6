// Raw codes of a stored tensor's elements in bulk: what a view that counts
// level usage (stats' code histogram) needs of each element, without the
// rest of an inspection.
#ifndef TENSORMORPH_CORE_QUANT_RAW_CODES_H_
#define TENSORMORPH_CORE_QUANT_RAW_CODES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace tensormorph {

// The low 8 bits of InspectElement's ScalarInfo::code_bits_value for each of
// elements [first, first + count) of a tensor whose storage is `data`, into
// out[0, count). Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K are unpacked a block
// at a time; every other dtype is inspected element by element (the same
// answer, slower).
// REQUIRES: as DecodeElements.
// Errors: UNIMPLEMENTED when the dtype has no decoder.
absl::Status CodesOfElements(DType dtype, absl::Span<const uint8_t> data,
                             int64_t first, int64_t count, uint8_t* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_RAW_CODES_H_
