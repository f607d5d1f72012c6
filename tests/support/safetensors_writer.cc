#include "tests/support/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "nlohmann/json.hpp"

namespace tensormorph::testing {

std::string BuildSafetensors(
    const std::vector<StTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const StTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype},
        {"shape", t.shape},
        {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  return BuildSafetensorsRaw(text, data);
}

std::string BuildSafetensorsRaw(const std::string& header_json,
                                const std::string& data) {
  const uint64_t n = header_json.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out += header_json;
  out += data;
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

int64_t WriteSparseSafetensors(const std::string& path,
                               const std::string& header_json,
                               int64_t data_bytes) {
  const std::string head = BuildSafetensorsRaw(header_json, "");
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0 ||
      ::write(fd, head.data(), head.size()) !=
          static_cast<ssize_t>(head.size()) ||
      ::ftruncate(fd, static_cast<off_t>(head.size()) + data_bytes) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  ::close(fd);
  return static_cast<int64_t>(head.size());
}

}  // namespace tensormorph::testing
