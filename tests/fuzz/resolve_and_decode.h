// What the conventions fuzzers do with a resolved checkpoint: decode every
// logical tensor at both ends and inspect its last element, so a layout that
// resolution accepted is also read.
#ifndef TENSORMORPH_TESTS_FUZZ_RESOLVE_AND_DECODE_H_
#define TENSORMORPH_TESTS_FUZZ_RESOLVE_AND_DECODE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/format/stored_tensor.h"
#include "core/quant/convention_resolver.h"

namespace tensormorph::fuzzing {

// Resolves and reads; returns the resolver's status (decode errors of an
// accepted tensor are not findings: a file may still be refused per read).
inline absl::Status ResolveAndDecode(const std::vector<StoredTensor>& stored,
                                     const QuantConfigs& configs) {
  auto resolved = ResolveConventions(stored, configs);
  if (!resolved.ok()) return resolved.status();
  float out[256];
  for (const auto& t : resolved->tensors) {
    if (t.num_elements == 0) continue;
    const int64_t n = std::min<int64_t>(t.num_elements, 256);
    (void)t.encoding->Decode(0, n, out);
    (void)t.encoding->Decode(t.num_elements - n, n, out);
    ScalarInfo s;
    (void)t.encoding->Inspect(t.num_elements - 1, &s);
  }
  return absl::OkStatus();
}

}  // namespace tensormorph::fuzzing

#endif  // TENSORMORPH_TESTS_FUZZ_RESOLVE_AND_DECODE_H_
