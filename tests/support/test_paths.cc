#include "tests/support/test_paths.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

namespace tensormorph::testing {
namespace {

std::vector<std::string>* TempDirs() {
  static auto* dirs = new std::vector<std::string>();
  return dirs;
}

void RemoveTempDirs() {
  for (const std::string& d : *TempDirs()) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
  }
}

}  // namespace

std::string FixturesDir() {
  if (const char* env = std::getenv("TENSORMORPH_FIXTURES")) return env;
  return TENSORMORPH_DEFAULT_FIXTURES_DIR;
}

std::string Fixture(const std::string& relative) {
  return FixturesDir() + "/" + relative;
}

std::string MakeTempDir() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(RemoveTempDirs); });
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      std::string(base ? base : "/tmp") + "/tensormorph.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  TempDirs()->push_back(buf.data());
  return buf.data();
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::abort();
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<float> ReadF32File(const std::string& path) {
  const std::string bytes = ReadFileBytes(path);
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace tensormorph::testing
