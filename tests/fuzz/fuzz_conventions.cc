// libFuzzer target: the convention resolver. Input: a config JSON, a NUL,
// then a safetensors file; every logical tensor it builds is decoded at its
// ends and inspected.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/format/json_header.h"
#include "core/format/safetensors_reader.h"
#include "core/quant/convention_resolver.h"
#include "tests/fuzz/resolve_and_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  if (nul == nullptr) return 0;
  const size_t json_len = nul - data;
  auto config = tensormorph::ParseStrictJson(
      absl::string_view(reinterpret_cast<const char*>(data), json_len),
      "config");
  if (!config.ok()) return 0;
  auto h = tensormorph::ParseSafetensors({nul + 1, size - json_len - 1},
                                         "fuzz.safetensors");
  if (!h.ok()) return 0;
  tensormorph::QuantConfigs configs;
  configs.config = *config;
  (void)tensormorph::fuzzing::ResolveAndDecode(h->tensors, configs);
  return 0;
}
