#include "render/npy.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {

std::string NpyDescr(absl::string_view dtype) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"F32", "<f4"}, {"F16", "<f2"}, {"F64", "<f8"}, {"BF16", "<u2"},
      {"I8", "|i1"},  {"U8", "|u1"},  {"I16", "<i2"}, {"U16", "<u2"},
      {"I32", "<i4"}, {"U32", "<u4"}, {"I64", "<i8"}, {"U64", "<u8"},
      {"BOOL", "|b1"}};
  for (const auto& [name, descr] : kMap) {
    if (dtype == name) return descr;
  }
  return "";
}

NpyLayout NpyLayoutFor(absl::string_view dtype,
                       const std::vector<int64_t>& shape, int64_t bytes) {
  NpyLayout layout{NpyDescr(dtype), shape};
  if (!layout.descr.empty()) return layout;
  layout.descr = "|u1";
  if (shape.empty()) {
    layout.shape = {bytes};
    return layout;
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  layout.shape.back() = rows > 0 ? bytes / rows : 0;
  if (layout.shape.back() * rows != bytes) layout.shape = {bytes};
  return layout;
}

std::string NpyHeader(absl::string_view descr,
                      const std::vector<int64_t>& shape) {
  std::string shape_text = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) shape_text += ",";
  std::string dict =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': False, 'shape': (", shape_text, "), }");
  // magic(6) + version(2) + length(2) + dict + padding + '\n' = k * 64
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  out.push_back(static_cast<char>(len & 0xFF));
  out.push_back(static_cast<char>(len >> 8));
  out += dict;
  return out;
}

absl::Status NpyFileWriter::Error(int error) const {
  return absl::Status(
      absl::ErrnoToStatusCode(error),
      absl::StrCat("cannot write '", name_, "': ", std::strerror(error)));
}

absl::Status NpyFileWriter::WriteAll(
    absl::Span<const absl::string_view> pieces) {
  iovec iov[64];
  size_t i = 0, done = 0;  // the next piece, and its bytes already written
  while (i < pieces.size()) {
    int n = 0;
    for (size_t j = i; j < pieces.size() && n < 64; ++j) {
      const size_t skip = j == i ? done : 0;
      if (pieces[j].size() == skip) continue;
      iov[n].iov_base = const_cast<char*>(pieces[j].data() + skip);
      iov[n].iov_len = pieces[j].size() - skip;
      ++n;
    }
    if (n == 0) break;
    const ssize_t w = ::writev(fd_, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Error(errno);
    }
    if (w == 0) return Error(EIO);  // would loop forever
    // Moves past what was written: whole pieces, then part of one.
    size_t left = static_cast<size_t>(w);
    while (i < pieces.size() && left >= pieces[i].size() - done) {
      left -= pieces[i].size() - done;
      ++i;
      done = 0;
    }
    done += left;
  }
  return absl::OkStatus();
}

absl::Status NpyFileWriter::Begin(absl::string_view dtype,
                                  const std::vector<int64_t>& shape,
                                  int64_t total_bytes) {
  if (begun_) return absl::FailedPreconditionError("a second .npy header");
  begun_ = true;
  layout_ = NpyLayoutFor(dtype, shape, total_bytes);
  left_ = total_bytes;
  const std::string header = NpyHeader(layout_.descr, layout_.shape);
  const absl::string_view piece = header;
  return WriteAll({&piece, 1});
}

absl::Status NpyFileWriter::Append(absl::string_view data) {
  return Append(absl::Span<const absl::string_view>(&data, 1));
}

absl::Status NpyFileWriter::Append(absl::Span<const absl::string_view> pieces) {
  if (!begun_) {
    return absl::FailedPreconditionError(".npy data before its header");
  }
  int64_t size = 0;
  for (absl::string_view p : pieces) size += static_cast<int64_t>(p.size());
  if (size > left_) {
    return absl::OutOfRangeError(
        absl::StrCat("the slice sent ", size, " bytes where ", left_,
                     " were left of what its header promised"));
  }
  if (absl::Status s = WriteAll(pieces); !s.ok()) return s;
  left_ -= size;
  return absl::OkStatus();
}

absl::Status NpyFileWriter::Finish() const {
  if (!begun_ || left_ != 0) {
    return absl::DataLossError(absl::StrCat(
        "the slice ended ", left_, " bytes short of what its header promised"));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
