// Writes GGUF files for tests and demos, valid or deliberately broken: every
// field the reader validates can be overridden.
#ifndef TENSORMORPH_TESTS_SUPPORT_GGUF_WRITER_H_
#define TENSORMORPH_TESTS_SUPPORT_GGUF_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tensormorph::testing {

// A metadata value already encoded: its GGUF type id and payload bytes.
struct GgufValueBytes {
  uint32_t type;
  std::string payload;
};
GgufValueBytes GgufU32(uint32_t v);
GgufValueBytes GgufU64(uint64_t v);
GgufValueBytes GgufI32(int32_t v);
GgufValueBytes GgufU16(uint16_t v);
GgufValueBytes GgufF32(float v);
GgufValueBytes GgufBool(bool v);
GgufValueBytes GgufString(const std::string& s);
// An array of values that share `elem_type` (payloads concatenated).
GgufValueBytes GgufArray(uint32_t elem_type,
                         const std::vector<GgufValueBytes>& items);

struct GgufTensorSpec {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] fastest
  uint32_t type_id = 0;
  std::string data;                // raw block bytes
  std::optional<uint64_t> offset;  // override the computed relative offset
  std::optional<uint32_t> n_dims;  // override ne.size()
};

// Byte offsets of the sections of a built file, for truncation tests.
struct GgufLayout {
  uint64_t after_magic = 0, after_version = 0, after_counts = 0;
  std::vector<uint64_t> after_kv;      // end of each key/value
  std::vector<uint64_t> after_tensor;  // end of each tensor info
  uint64_t data_offset = 0;
  uint64_t file_size = 0;
};

struct GgufSpec {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::vector<std::pair<std::string, GgufValueBytes>> kv;
  std::vector<GgufTensorSpec> tensors;
  uint32_t alignment =
      32;  // used for padding (set general.alignment to change the file's)
  std::optional<uint64_t> tensor_count;  // override
  std::optional<uint64_t> kv_count;      // override
};

std::string BuildGguf(const GgufSpec& spec, GgufLayout* layout = nullptr);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_GGUF_WRITER_H_
