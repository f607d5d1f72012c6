#include "client/render/npy.h"

#include <cerrno>
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

absl::Status WriteNpy(const std::string& path, absl::string_view descr,
                      const std::vector<int64_t>& shape,
                      absl::string_view data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::string header = NpyHeader(descr, shape);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) {
    return absl::InternalError(
        absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
