// Where tests find the shared golden fixtures and put their own files.
#ifndef TENSORMORPH_TESTS_SUPPORT_TEST_PATHS_H_
#define TENSORMORPH_TESTS_SUPPORT_TEST_PATHS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensormorph::testing {

// ../shared/fixtures beside the repository (or $TENSORMORPH_FIXTURES).
std::string FixturesDir();
std::string Fixture(const std::string& relative);

// A fresh directory under $TEST_TMPDIR or /tmp, removed at exit.
std::string MakeTempDir();

// Whole file contents; aborts on failure.
std::string ReadFileBytes(const std::string& path);
// A raw little-endian float32 file.
std::vector<float> ReadF32File(const std::string& path);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_TEST_PATHS_H_
