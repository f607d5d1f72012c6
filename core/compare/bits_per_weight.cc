#include "core/compare/bits_per_weight.h"

#include "core/format/stored_tensor.h"

namespace tensormorph {

int64_t StoredBytes(const LogicalTensor& t) {
  int64_t n = 0;
  for (const StoredTensor* part : t.encoding->parts()) {
    n += static_cast<int64_t>(part->nbytes);
  }
  return n;
}

double BitsPerWeight(int64_t bytes, int64_t elements) {
  if (elements <= 0) return 0;
  return static_cast<double>(bytes) * 8.0 / static_cast<double>(elements);
}

}  // namespace tensormorph
