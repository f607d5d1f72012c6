// Seeded bytes and file helpers shared by the storage tests.
#ifndef TENSORMORPH_TESTS_CORE_IO_STORAGE_TEST_DATA_H_
#define TENSORMORPH_TESTS_CORE_IO_STORAGE_TEST_DATA_H_

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/io/http_client.h"

namespace tensormorph::testing {

inline std::string SeededBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Writes `bytes` to `path` by rename (as a publisher replaces an object),
// with its modification time `mtime_offset_s` seconds from now, so that a
// replacement within the same second still gets another ETag from nginx.
inline void WriteObject(const std::string& path, const std::string& bytes,
                        int mtime_offset_s = 0) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  const std::string temp = path + ".tmp";
  std::ofstream(temp, std::ios::binary) << bytes;
  const auto when = std::filesystem::file_time_type::clock::now() +
                    std::chrono::seconds(mtime_offset_s);
  std::filesystem::last_write_time(temp, when);
  std::filesystem::rename(temp, path);
}

// Fast retries: the tests count attempts, not wait for them.
inline HttpOptions TestHttpOptions() {
  HttpOptions o;
  o.max_attempts = 4;
  o.initial_backoff = std::chrono::milliseconds(1);
  o.max_backoff = std::chrono::milliseconds(10);
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.request_timeout = std::chrono::milliseconds(5000);
  return o;
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_CORE_IO_STORAGE_TEST_DATA_H_
