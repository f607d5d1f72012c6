// An encoding decodes a logical tensor's elements, however they are stored.
#ifndef TENSORMORPH_CORE_QUANT_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_ENCODING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/quant/scalar_info.h"

namespace tensormorph {

struct StoredTensor;

// How a logical tensor's values are represented.
struct EncodingInfo {
  std::string scheme;       // "Q4_K", "BF16", "F8_E4M3", ...
  std::string convention;   // "ggml", "safetensors"
  int32_t bits = 0;         // bits per raw code
  bool quantized = false;   // codes need parameters beyond themselves
  std::string granularity;  // "per-block 256 (sub-blocks of 32)", "none"
  int64_t block_elems = 1;  // elements sharing the outermost parameters
  bool symmetric = true;    // no zero-point (or a fixed one)
  int64_t group_size = 0;   // per-group schemes: elements per group
  bool act_order = false;   // groups are looked up through g_idx
  std::vector<int64_t> block_shape;  // per-block schemes: [rows, cols]
  std::string axis;                  // "in" / "out" where it applies
};

// Thread safety: implementations are immutable and safe to call from many
// threads at once.
class Encoding {
 public:
  virtual ~Encoding() = default;

  virtual const EncodingInfo& info() const = 0;
  // The stored tensors the logical tensor is built from.
  virtual std::vector<const StoredTensor*> parts() const = 0;

  // Decodes elements [first, first + count) in row-major order.
  // REQUIRES: 0 <= first, first + count <= the tensor's element count.
  // Errors: UNIMPLEMENTED when the encoding cannot be decoded.
  virtual absl::Status Decode(int64_t first, int64_t count,
                              float* out) const = 0;

  // Inspects element `index` (row-major).
  // REQUIRES: 0 <= index < the tensor's element count.
  // Errors: UNIMPLEMENTED when the encoding cannot be decoded.
  virtual absl::Status Inspect(int64_t index, ScalarInfo* out) const = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_ENCODING_H_
