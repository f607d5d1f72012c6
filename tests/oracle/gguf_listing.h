// The tensors of a GGUF file as the file itself lists them, read by a few
// lines written from the GGUF specification alone: the independent side that
// Tensormorph's reader is compared with in the llama.cpp oracle tests.
#ifndef TENSORMORPH_TESTS_ORACLE_GGUF_LISTING_H_
#define TENSORMORPH_TESTS_ORACLE_GGUF_LISTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tensormorph::testing {

struct GgufListedTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] fastest
  uint32_t type = 0;        // ggml type id
  uint64_t offset = 0;      // absolute, in the file
  uint64_t nbytes = 0;      // up to the next tensor (or the file's end)
};

struct GgufListing {
  std::string bytes;  // the whole file
  std::vector<GgufListedTensor> tensors;
  absl::Span<const uint8_t> Data(const GgufListedTensor& t) const {
    return {reinterpret_cast<const uint8_t*>(bytes.data()) + t.offset,
            t.nbytes};
  }
};

// Reads `path`; `block_bytes(type, ne0)` gives a row's bytes so that a
// tensor's size need not be taken from its neighbour's offset.
// Errors: DATA_LOSS for a file that is not a GGUF this reader follows.
absl::StatusOr<GgufListing> ListGguf(const std::string& path,
                                     int64_t (*row_bytes)(uint32_t type,
                                                          int64_t ne0));

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_ORACLE_GGUF_LISTING_H_
