// Writes numpy .npy files (format 1.0) that numpy.load reads.
#ifndef TENSORMORPH_RENDER_NPY_H_
#define TENSORMORPH_RENDER_NPY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

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

// Writes a .npy file as its data arrives: the header once the slice's
// dtype, shape and size are known, then the data in order, so memory is one
// chunk whatever the array's size. It only writes: opening the file, and
// keeping an unfinished one from being taken for an array, are its owner's
// (the CLI's OutputFile renames it into place only once Finish() passed).
class NpyFileWriter {
 public:
  // Writes to `fd`, which stays open and the caller's; `name` is how errors
  // name the file.
  NpyFileWriter(int fd, std::string name) : name_(std::move(name)), fd_(fd) {}

  // The header of a slice of `dtype` and `shape` holding `total_bytes`
  // (laid out by NpyLayoutFor); once, first.
  absl::Status Begin(absl::string_view dtype, const std::vector<int64_t>& shape,
                     int64_t total_bytes);
  // The next bytes. Errors: FAILED_PRECONDITION before Begin; OUT_OF_RANGE
  // past total_bytes; the errno's code when the file cannot take them.
  absl::Status Append(absl::string_view data);
  // The next bytes as pieces in order, written with as few writev(2) calls
  // as they allow (a received chunk's pieces: one call). Errors: as Append.
  absl::Status Append(absl::Span<const absl::string_view> pieces);
  // Checks that every byte Begin promised came. Errors: DATA_LOSS when
  // they did not.
  absl::Status Finish() const;

  NpyLayout layout() const { return layout_; }

 private:
  absl::Status Error(int error) const;
  // Writes every byte of `pieces`, resuming after short writes.
  absl::Status WriteAll(absl::Span<const absl::string_view> pieces);

  std::string name_;
  int fd_;
  NpyLayout layout_;
  bool begun_ = false;
  int64_t left_ = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_RENDER_NPY_H_
