#include "client/render/npy.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

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

absl::StatusOr<std::unique_ptr<NpyFileWriter>> NpyFileWriter::Create(
    const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    const int error = errno;
    return absl::Status(
        absl::ErrnoToStatusCode(error),
        absl::StrCat("cannot write '", path, "': ", std::strerror(error)));
  }
  return std::unique_ptr<NpyFileWriter>(new NpyFileWriter(path, f));
}

NpyFileWriter::~NpyFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  struct stat st;
  if (!finished_ && ::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    std::remove(path_.c_str());  // no half array left to be taken for one
  }
}

absl::Status NpyFileWriter::Error(int error) const {
  return absl::Status(
      absl::ErrnoToStatusCode(error),
      absl::StrCat("cannot write '", path_, "': ", std::strerror(error)));
}

absl::Status NpyFileWriter::Begin(absl::string_view dtype,
                                  const std::vector<int64_t>& shape,
                                  int64_t total_bytes) {
  if (begun_) return absl::FailedPreconditionError("a second .npy header");
  begun_ = true;
  layout_ = NpyLayoutFor(dtype, shape, total_bytes);
  left_ = total_bytes;
  const std::string header = NpyHeader(layout_.descr, layout_.shape);
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size()) {
    return Error(errno);
  }
  return absl::OkStatus();
}

absl::Status NpyFileWriter::Append(absl::string_view data) {
  if (!begun_) {
    return absl::FailedPreconditionError(".npy data before its header");
  }
  if (static_cast<int64_t>(data.size()) > left_) {
    return absl::OutOfRangeError(
        absl::StrCat("the slice sent ", data.size(), " bytes where ", left_,
                     " were left of what its header promised"));
  }
  if (!data.empty() &&
      std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    return Error(errno);
  }
  left_ -= static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status NpyFileWriter::Finish() {
  if (!begun_ || left_ != 0) {
    return absl::DataLossError(absl::StrCat(
        "the slice ended ", left_, " bytes short of what its header promised"));
  }
  FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) return Error(errno);
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace tensormorph
