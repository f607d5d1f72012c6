// Writes safetensors files for tests and demos, valid or deliberately broken.
#ifndef TENSORMORPH_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
#define TENSORMORPH_TESTS_SUPPORT_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tensormorph::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // safetensors dtype string
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes
};

// Builds a valid file: tensors laid out in the given order, a header padded
// with spaces to a multiple of 8 as the reference writer does.
std::string BuildSafetensors(
    const std::vector<StTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Builds a file from a literal header and data section (for broken files).
std::string BuildSafetensorsRaw(const std::string& header_json,
                                const std::string& data);

// Raw bytes of a vector of trivially copyable values.
template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// Writes a file with the literal header and a data section `data_bytes` long
// that is a hole (no blocks on disk): big tensors for benchmarks and fault
// tests. Returns the header's size (where the data starts). Aborts on failure.
int64_t WriteSparseSafetensors(const std::string& path,
                               const std::string& header_json,
                               int64_t data_bytes);

// Writes `bytes` to `path`; aborts the test program on failure.
void WriteFile(const std::string& path, const std::string& bytes);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
