// Which widely used inference backends ship kernels for an encoding. One
// documented table, each row with its source; "not known" where it has no
// row.
#ifndef TENSORMORPH_CORE_COMPAT_H_
#define TENSORMORPH_CORE_COMPAT_H_

#include <string>
#include <vector>

#include "core/quant/encoding.h"

namespace tensormorph {

struct BackendSupport {
  std::string backend;  // "llama.cpp CPU", "vLLM", "TensorRT-LLM"
  std::string status;   // "supported", "not supported", "not known"
  std::string notes;    // constraints (group size, hardware, symmetry)
  std::string source;   // where the row comes from
};

// The table's rows for an encoding, in a fixed backend order; backends the
// table says nothing about appear as "not known". Unquantized encodings
// return an empty list (every backend reads plain floats).
std::vector<BackendSupport> BackendSupportFor(const EncodingInfo& info);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPAT_H_
