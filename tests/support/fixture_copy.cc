#include "tests/support/fixture_copy.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fixture_copy: %s\n", what.c_str());
  std::abort();
}

int Width(const std::string& dtype) {
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  if (dtype == "I16" || dtype == "U16" || dtype == "F16" || dtype == "BF16")
    return 2;
  if (dtype == "I32" || dtype == "U32" || dtype == "F32") return 4;
  if (dtype == "I64" || dtype == "U64" || dtype == "F64") return 8;
  return 1;
}

}  // namespace

void CopyFixtureInto(const std::string& name, const std::string& dir) {
  const std::string src = Fixture("safetensors/" + name);
  for (const auto& e : fs::directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    WriteFile(dir + "/" + e.path().filename().string(),
              ReadFileBytes(e.path().string()));
  }
}

std::string CopyFixtureTensors(const std::string& name) {
  const std::string dir = MakeTempDir();
  const std::string src = Fixture("safetensors/" + name);
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file()) continue;
    if (f.ends_with(".safetensors") || f == "model.safetensors.index.json") {
      WriteFile(dir + "/" + f, ReadFileBytes(e.path().string()));
    }
  }
  return dir;
}

nlohmann::json ReadJson(const std::string& path) {
  try {
    return nlohmann::json::parse(ReadFileBytes(path));
  } catch (const std::exception& e) {
    Die(path + ": " + e.what());
  }
}

void WriteJson(const std::string& path, const nlohmann::json& j) {
  WriteFile(path, j.dump());
}

void EditSafetensors(const std::string& path,
                     const std::function<void(std::vector<StTensor>&)>& edit) {
  const std::string bytes = ReadFileBytes(path);
  if (bytes.size() < 8) Die(path + ": too short");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) Die(path + ": bad header length");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, n));
  } catch (const std::exception& e) {
    Die(path + ": " + e.what());
  }
  std::vector<std::pair<uint64_t, StTensor>> by_offset;
  std::map<std::string, std::string> metadata;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, m] : v.items()) metadata[k] = m.get<std::string>();
      continue;
    }
    const uint64_t begin = v["data_offsets"][0].get<uint64_t>();
    const uint64_t end = v["data_offsets"][1].get<uint64_t>();
    by_offset.push_back(
        {begin, StTensor{name, v["dtype"].get<std::string>(),
                         v["shape"].get<std::vector<int64_t>>(),
                         bytes.substr(8 + n + begin, end - begin)}});
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<StTensor> tensors;
  for (auto& [offset, t] : by_offset) tensors.push_back(std::move(t));
  edit(tensors);
  WriteFile(path, BuildSafetensors(tensors, metadata));
}

std::string IntBytes(const std::vector<int64_t>& values,
                     const std::string& dtype) {
  const int w = Width(dtype);
  std::string out;
  for (int64_t v : values) {
    char b[8];
    std::memcpy(b, &v, 8);  // little-endian host, as the files are
    out.append(b, w);
  }
  return out;
}

std::vector<int64_t> IntValues(const StTensor& t) {
  const int w = Width(t.dtype);
  const bool is_signed = t.dtype[0] == 'I';
  std::vector<int64_t> out;
  for (size_t i = 0; i + w <= t.data.size(); i += w) {
    uint64_t u = 0;
    std::memcpy(&u, t.data.data() + i, w);
    if (is_signed && w < 8) {
      const int shift = 64 - 8 * w;
      out.push_back(static_cast<int64_t>(u << shift) >> shift);
    } else {
      out.push_back(static_cast<int64_t>(u));
    }
  }
  return out;
}

}  // namespace tensormorph::testing
