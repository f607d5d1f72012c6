// libFuzzer target: the safetensors header reader, then decoding of what it
// accepted. Any crash, sanitizer report or hang is a finding.
#include <cstddef>
#include <cstdint>

#include "core/format/safetensors_reader.h"
#include "core/quant/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = tensormorph::ParseSafetensors({data, size}, "fuzz.safetensors");
  if (!h.ok()) return 0;
  float out[64];
  for (const auto& t : h->tensors) {
    const int64_t n = std::min<int64_t>(t.num_elements, 64);
    (void)tensormorph::DecodeElements(t.dtype, t.data, 0, n, out);
    if (t.num_elements > 0) {
      tensormorph::ScalarInfo s;
      (void)tensormorph::InspectElement(t.dtype, t.data, t.num_elements - 1,
                                        &s);
    }
  }
  return 0;
}
