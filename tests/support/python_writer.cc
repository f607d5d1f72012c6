#include "tests/support/python_writer.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "tests/support/process.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {

const std::string& WriterOutput(const std::string& script) {
  static std::mutex mu;
  static std::map<std::string, std::string>* done =
      new std::map<std::string, std::string>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = done->find(script);
  if (it != done->end()) return it->second;
  const std::string dir = MakeTempDir();
  const CommandResult r = RunCommand(
      {"/usr/bin/python3", "-B",
       std::string(TENSORMORPH_SOURCE_DIR) + "/tests/python/writers/" + script,
       dir});
  if (r.exit_code != 0) {
    std::fprintf(stderr, "%s failed (%d): %s\n", script.c_str(), r.exit_code,
                 r.err.c_str());
    std::abort();
  }
  return (*done)[script] = dir;
}

std::string CopyDir(const std::string& from) {
  const std::string to = MakeTempDir();
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  return to;
}

}  // namespace tensormorph::testing
