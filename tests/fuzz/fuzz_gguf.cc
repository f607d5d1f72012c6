// libFuzzer target: the GGUF reader (every published attack class is a
// mutation away from the seeds), then decoding and metadata rendering.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/format/gguf_reader.h"
#include "core/quant/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = tensormorph::ParseGguf({data, size}, "fuzz.gguf");
  if (!g.ok()) return 0;
  for (const auto& kv : g->metadata)
    (void)tensormorph::GgufValueToString(kv, 4);
  float out[512];
  for (const auto& t : g->tensors) {
    // An empty tensor (a zero dimension, valid as in ggml) has no element
    // to decode or inspect; the service answers OUT_OF_RANGE before here.
    if (t.num_elements == 0) continue;
    const auto& info = tensormorph::GetDTypeInfo(t.dtype);
    const int64_t n = std::min<int64_t>(t.num_elements, 2 * info.block_elems);
    (void)tensormorph::DecodeElements(t.dtype, t.data, 0,
                                      std::min<int64_t>(n, 512), out);
    tensormorph::ScalarInfo s;
    (void)tensormorph::InspectElement(t.dtype, t.data, t.num_elements - 1, &s);
  }
  return 0;
}
