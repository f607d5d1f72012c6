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
  gguf("tensor_count_2p64", s, "tensor count 18446744073709551615");
  s = ValidGguf();
  s.kv_count = kMax - 1;
  gguf("kv_count_2p64", s, "metadata key count 18446744073709551614");
  for (uint64_t n : {kMax - 7, uint64_t{1} << 40}) {
    s = ValidGguf();
    GgufValueBytes v = GgufString("x");
    v.payload.replace(0, 8, Le64(n));
    s.kv.push_back({"evil", v});
    gguf("string_length_" + std::to_string(n), s,
         "string length " + std::to_string(n));
  }
  for (uint64_t n : {kMax, uint64_t{1000000}}) {
    s = ValidGguf();
    GgufValueBytes v = GgufArray(4, {GgufU32(1)});
    v.payload.replace(4, 8, Le64(n));
    s.kv.push_back({"evil", v});
    gguf("array_length_" + std::to_string(n), s,
         "array of " + std::to_string(n) + " uint32");
  }
  // Dimensions.
  for (uint32_t n : {5u, 0xFFFFFFFFu}) {
    s = ValidGguf();
    s.tensors[0].n_dims = n;
    gguf("n_dims_" + std::to_string(n), s,
         "n_dims " + std::to_string(n) + " exceeds");
  }
  const std::vector<std::vector<int64_t>> overflowing = {
      {int64_t{1} << 62, 4}, {std::numeric_limits<int64_t>::max(), 2}};
  for (size_t i = 0; i < overflowing.size(); ++i) {
    s = ValidGguf();
    s.tensors[0].ne = overflowing[i];
    gguf("dims_overflow_" + std::to_string(i), s,
         "more elements than int64 can count");
  }
  // (A zero dimension is an empty tensor, valid as in ggml.)
  s = ValidGguf();
  s.tensors[0].ne = {8, -1};
  gguf("dim_negative", s, "ne[1] = -1");
  // (A removed or unknown type id is no longer a hostile file: that tensor
  // alone is undecodable, gguf_reader_test.cc.)
  // Alignment.
  for (uint32_t a : {0u, 3u}) {
    s = ValidGguf();
    s.kv.push_back({"general.alignment", GgufU32(a)});
    gguf("alignment_" + std::to_string(a), s,
         "'general.alignment' = " + std::to_string(a));
  }
  s = ValidGguf();
  s.tensors.resize(1);
  s.kv.push_back({"general.alignment", GgufU32(1u << 31)});
  gguf("alignment_2p31", s, "but the file is");
  // Offsets: misaligned, overlapping, backwards (past the next), out of file.
  s = ValidGguf();
  s.tensors[0].offset = 1;
  gguf("offset_misaligned", s, "offset 1 but expected 0");
  s = ValidGguf();
  s.tensors[1].offset = 0;
  gguf("offset_overlapping", s, "offset 0 but expected 64");
  s = ValidGguf();
  s.tensors[1].offset = 128;
  gguf("offset_beyond", s, "offset 128 but expected 64");
  {
    std::string bytes = BuildGguf(ValidGguf());
    bytes.resize(bytes.size() - 40);
    c.push_back({"data_past_end.gguf", bytes, "but the file is"});
  }
  s = ValidGguf();
  s.kv.push_back({"general.name", GgufString("x")});
  s.kv.push_back({"general.name", GgufString("y")});
  gguf("duplicate_key", s, "duplicate key 'general.name'");

  // safetensors: the header length.
  c.push_back(St("header_len_0", "", "", "JSON object starting with '{'"));
  c.push_back(St("header_len_7", "{\"a\":[1", "", "invalid JSON"));
  {
    std::string bytes = BuildSafetensorsRaw("{}", "");
    bytes.replace(0, 8, Le64(100000001));
    c.push_back(
        {"header_len_100M.safetensors", bytes, "header length 100000001"});
    bytes.replace(0, 8, Le64(1000));
    c.push_back(
        {"header_len_past_end.safetensors", bytes, "header length 1000"});
    c.push_back({"shorter_than_length.safetensors", std::string("\x02\0\0", 3),
                 "shorter than the 8-byte"});
  }
  // The JSON.
  c.push_back(St("invalid_utf8",
                 "{\"a\xff\":{\"dtype\":\"I8\",\"shape\":[1],"
                 "\"data_offsets\":[0,1]}}",
                 "x", "UTF-8"));
  {
    std::string bomb = "{\"__metadata__\":";
    bomb += std::string(100000, '[') + std::string(100000, ']') + "}";
    c.push_back(St("nesting_bomb", bomb, "", "nesting deeper than 64"));
  }
  c.push_back(St("duplicate_keys",
                 R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                 R"("w":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}})",
                 "xy", "duplicate key 'w'"));
  // Shapes.
  c.push_back(St("shape_negative",
                 R"({"w":{"dtype":"I8","shape":[-1],"data_offsets":[0,0]}})",
                 "", "shape[0] = -1"));
  c.push_back(St("shape_float",
                 R"({"w":{"dtype":"I8","shape":[1.5],"data_offsets":[0,1]}})",
                 "x", "not an integer"));
  c.push_back(St(
      "shape_huge",
      R"({"w":{"dtype":"I8","shape":[281474976710657],"data_offsets":[0,1]}})",
      "x", "2^48"));
  c.push_back(St(
      "size_overflow",
      R"({"w":{"dtype":"F64","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})",
      std::string(8, '\0'), "overflows"));
  // Offsets.
  c.push_back(St("overlapping",
                 R"({"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]}})",
                 "wxyz", "overlaps"));
  c.push_back(St("gap",
                 R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                 R"("b":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}})",
                 "xyz", "gaps"));
  c.push_back(St("backwards",
                 R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                 R"("v":{"dtype":"I8","shape":[0],"data_offsets":[1,0]}})",
                 "x", "end before they begin"));
  c.push_back({"trailing_bytes.safetensors",
               BuildSafetensors({{"w", "I8", {2}, "xy"}}) + "junk",
               "holds 6 data bytes"});
  c.push_back(St("sub_byte_size",
                 R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})",
                 "xy", "does not end on a byte"));
  return c;
}

}  // namespace tensormorph::testing
