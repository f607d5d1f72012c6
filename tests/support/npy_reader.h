// Reads .npy files in tests, independently of the CLI's writer.
#ifndef TENSORMORPH_TESTS_SUPPORT_NPY_READER_H_
#define TENSORMORPH_TESTS_SUPPORT_NPY_READER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensormorph::testing {

struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::string data;
  std::vector<float> floats() const;
};

// Parses a version 1.0 .npy file; returns an empty descr on malformed input.
NpyArray ReadNpy(const std::string& path);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_NPY_READER_H_
