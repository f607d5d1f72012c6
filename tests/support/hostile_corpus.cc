#include "tests/support/hostile_corpus.h"

#include <cstdint>
#include <limits>

#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"

namespace tensormorph::testing {
namespace {

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

// An F32 [2, 8] tensor and a Q8_0 [2, 32] tensor.
GgufSpec ValidGguf() {
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"a", {8, 2}, kF32, std::string(64, '\0')});
  s.tensors.push_back({"b", {32, 2}, kQ8_0, std::string(68, '\0')});
  return s;
}

std::string Le64(uint64_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 8);
}

// A safetensors file whose header is `json` and data `data`.
HostileFile St(const std::string& name, const std::string& json,
               const std::string& data, const std::string& rule) {
  return {name + ".safetensors", BuildSafetensorsRaw(json, data), rule};
}

}  // namespace

std::string ValidGgufBytes(uint64_t* header_end) {
  GgufLayout layout;
  std::string bytes = BuildGguf(ValidGguf(), &layout);
  *header_end = layout.data_offset;
  return bytes;
}

std::string ValidSafetensorsBytes(uint64_t* header_end) {
  std::string bytes =
      BuildSafetensors({{"w", "F32", {2, 2}, std::string(16, '\x01')}});
  *header_end = bytes.size() - 16;
  return bytes;
}

std::vector<HostileFile> HostileCorpus() {
  std::vector<HostileFile> c;
  auto gguf = [&](const std::string& name, const GgufSpec& spec,
                  const std::string& rule) {
    c.push_back({name + ".gguf", BuildGguf(spec), rule});
  };
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

  // GGUF: counts and lengths.
  GgufSpec s = ValidGguf();
  s.tensor_count = kMax;
  gguf("tensor_count_2p64", s, "tensor-count");
  s = ValidGguf();
  s.kv_count = kMax - 1;
  gguf("kv_count_2p64", s, "kv-count");
  for (uint64_t n : {kMax - 7, uint64_t{1} << 40}) {
    s = ValidGguf();
    GgufValueBytes v = GgufString("x");
    v.payload.replace(0, 8, Le64(n));
    s.kv.push_back({"evil", v});
    gguf("string_length_" + std::to_string(n), s, "string-length");
  }
  for (uint64_t n : {kMax, uint64_t{1000000}}) {
    s = ValidGguf();
    GgufValueBytes v = GgufArray(4, {GgufU32(1)});
    v.payload.replace(4, 8, Le64(n));
    s.kv.push_back({"evil", v});
    gguf("array_length_" + std::to_string(n), s, "array-length");
  }
  // Dimensions.
  for (uint32_t n : {5u, 0xFFFFFFFFu}) {
    s = ValidGguf();
    s.tensors[0].n_dims = n;
    gguf("n_dims_" + std::to_string(n), s, "rank");
  }
  const std::vector<std::vector<int64_t>> overflowing = {
      {int64_t{1} << 62, 4}, {std::numeric_limits<int64_t>::max(), 2}};
  for (size_t i = 0; i < overflowing.size(); ++i) {
    s = ValidGguf();
    s.tensors[0].ne = overflowing[i];
    gguf("dims_overflow_" + std::to_string(i), s, "size-overflow");
  }
  // (A zero dimension is an empty tensor, valid as in ggml.)
  s = ValidGguf();
  s.tensors[0].ne = {8, -1};
  gguf("dim_negative", s, "shape");
  // (A removed or unknown type id is no longer a hostile file: that tensor
  // alone is undecodable, gguf_reader_test.cc.)
  // Alignment.
  for (uint32_t a : {0u, 3u}) {
    s = ValidGguf();
    s.kv.push_back({"general.alignment", GgufU32(a)});
    gguf("alignment_" + std::to_string(a), s, "alignment");
  }
  s = ValidGguf();
  s.tensors.resize(1);
  s.kv.push_back({"general.alignment", GgufU32(1u << 31)});
  gguf("alignment_2p31", s, "data-range");
  // Offsets: misaligned, overlapping, backwards (past the next), out of file.
  s = ValidGguf();
  s.tensors[0].offset = 1;
  gguf("offset_misaligned", s, "offset");
  s = ValidGguf();
  s.tensors[1].offset = 0;
  gguf("offset_overlapping", s, "offset");
  s = ValidGguf();
  s.tensors[1].offset = 128;
  gguf("offset_beyond", s, "offset");
  {
    std::string bytes = BuildGguf(ValidGguf());
    bytes.resize(bytes.size() - 40);
    c.push_back({"data_past_end.gguf", bytes, "data-range"});
  }
  s = ValidGguf();
  s.kv.push_back({"general.name", GgufString("x")});
  s.kv.push_back({"general.name", GgufString("y")});
  gguf("duplicate_key", s, "duplicate-key");

  // safetensors: the header length.
  c.push_back(St("header_len_0", "", "", "header-object"));
  c.push_back(St("header_len_7", "{\"a\":[1", "", "header-json"));
  {
    std::string bytes = BuildSafetensorsRaw("{}", "");
    bytes.replace(0, 8, Le64(100000001));
    c.push_back({"header_len_100M.safetensors", bytes, "header-limit"});
    bytes.replace(0, 8, Le64(1000));
    c.push_back({"header_len_past_end.safetensors", bytes, "header-length"});
    c.push_back({"shorter_than_length.safetensors", std::string("\x02\0\0", 3),
                 "header-length"});
  }
  // The JSON.
  c.push_back(St("invalid_utf8",
                 "{\"a\xff\":{\"dtype\":\"I8\",\"shape\":[1],"
                 "\"data_offsets\":[0,1]}}",
                 "x", "header-utf8"));
  {
    std::string bomb = "{\"__metadata__\":";
    bomb += std::string(100000, '[') + std::string(100000, ']') + "}";
    c.push_back(St("nesting_bomb", bomb, "", "header-depth"));
  }
  c.push_back(St("duplicate_keys",
                 R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                 R"("w":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}})",
                 "xy", "duplicate-key"));
  // Shapes.
  c.push_back(St("shape_negative",
                 R"({"w":{"dtype":"I8","shape":[-1],"data_offsets":[0,0]}})",
                 "", "shape"));
  c.push_back(St("shape_float",
                 R"({"w":{"dtype":"I8","shape":[1.5],"data_offsets":[0,1]}})",
                 "x", "shape"));
  c.push_back(St(
      "shape_huge",
      R"({"w":{"dtype":"I8","shape":[281474976710657],"data_offsets":[0,1]}})",
      "x", "shape"));
  c.push_back(St(
      "size_overflow",
      R"({"w":{"dtype":"F64","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})",
      std::string(8, '\0'), "size-overflow"));
  // Offsets.
  c.push_back(St("overlapping",
                 R"({"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]}})",
                 "wxyz", "offset"));
  c.push_back(St("gap",
                 R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                 R"("b":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}})",
                 "xyz", "offset"));
  c.push_back(St("backwards",
                 R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                 R"("v":{"dtype":"I8","shape":[0],"data_offsets":[1,0]}})",
                 "x", "offset-order"));
  c.push_back({"trailing_bytes.safetensors",
               BuildSafetensors({{"w", "I8", {2}, "xy"}}) + "junk",
               "data-end"});
  c.push_back(St("sub_byte_size",
                 R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})",
                 "xy", "block-size"));
  return c;
}

}  // namespace tensormorph::testing
