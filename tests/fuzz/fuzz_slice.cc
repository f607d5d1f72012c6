// libFuzzer target: the slice parser and numpy resolution. Input: up to four
// dimension sizes (a byte each), then the slice text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/slice.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t rank = data[0] % 5;
  if (size < 1 + rank) return 0;
  std::vector<int64_t> shape;
  for (size_t i = 0; i < rank; ++i) shape.push_back(data[1 + i]);
  const std::string text(reinterpret_cast<const char*>(data + 1 + rank),
                         size - 1 - rank);
  auto items = tensormorph::ParseSlice(text);
  if (!items.ok()) return 0;
  auto r = tensormorph::ResolveSlice(*items, shape);
  if (!r.ok()) return 0;
  // The resolution's invariants: every picked index inside its dimension.
  for (size_t d = 0; d < r->dims.size(); ++d) {
    const auto& dim = r->dims[d];
    for (int64_t k : {int64_t{0}, dim.count - 1}) {
      if (dim.count == 0) break;
      const int64_t i = dim.start + k * dim.step;
      if (i < 0 || i >= shape[d]) __builtin_trap();
    }
  }
  return 0;
}
