#include "tests/support/npy_reader.h"

#include <cstring>
#include <regex>

#include "tests/support/test_paths.h"

namespace tensormorph::testing {

std::vector<float> NpyArray::floats() const {
  std::vector<float> out(data.size() / 4);
  std::memcpy(out.data(), data.data(), out.size() * 4);
  return out;
}

NpyArray ReadNpy(const std::string& path) {
  const std::string bytes = ReadFileBytes(path);
  NpyArray a;
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return a;
  const size_t len =
      static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  const std::string header = bytes.substr(10, len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr': '([^']+)')")))
    return a;
  const std::string descr = m[1];
  if (!std::regex_search(header, m, std::regex(R"('shape': \(([^)]*)\))")))
    return a;
  const std::string dims = m[1];
  static const std::regex kNumber(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), kNumber), end;
       it != end; ++it) {
    a.shape.push_back(std::stoll(it->str()));
  }
  a.descr = descr;
  a.data = bytes.substr(10 + len);
  return a;
}

}  // namespace tensormorph::testing
