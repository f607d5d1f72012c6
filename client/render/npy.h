// Writes numpy .npy files (format 1.0) that numpy.load reads.
#ifndef TENSORMORPH_CLIENT_RENDER_NPY_H_
#define TENSORMORPH_CLIENT_RENDER_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// The numpy dtype descriptor of a Tensormorph dtype ("<f4" for F32), or
// empty when numpy has no equivalent (BF16 maps to its bits, "<u2").
std::string NpyDescr(absl::string_view dtype);

// How a slice is laid out in a .npy: its numpy dtype and shape.
struct NpyLayout {
  std::string descr;
  std::vector<int64_t> shape;
};
// A slice of `dtype` and `shape` holding `bytes`: dtypes numpy has keep
// their descr and shape; any other (block-quantized codes) is stored as its
// bytes, "|u1", one row of stored bytes per row of the tensor ([rows, bytes
// per row] for a matrix) when rows divide the bytes evenly, so the structure
// survives, else flat ([bytes]).
NpyLayout NpyLayoutFor(absl::string_view dtype,
                       const std::vector<int64_t>& shape, int64_t bytes);

// The header (magic, version, dict, padding) of an array.
std::string NpyHeader(absl::string_view descr,
                      const std::vector<int64_t>& shape);

// Writes header + data to `path`.
// Errors: INTERNAL naming the path when it cannot be written.
absl::Status WriteNpy(const std::string& path, absl::string_view descr,
                      const std::vector<int64_t>& shape,
                      absl::string_view data);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_RENDER_NPY_H_
