// libFuzzer target: the quantization config layer, structure-aware. Input as
// for fuzz_conventions (a config JSON, a NUL, then a safetensors file), but
// the mutator edits the JSON as JSON: it picks one value of a real config and
// turns it into a number, string, array, object or null, huge or negative,
// or removes a key or adds a known one. Byte-level mutation almost never
// gets a JSON document past the parser with a changed type, which is why the
// byte-level fuzzers never met `"block_structure": ["a", "b"]`.
//
// Properties checked on every input: nothing throws, nothing reads out of
// bounds (ASan), and a refused config is refused with a status a user can
// act on (DATA_LOSS, UNIMPLEMENTED, INVALID_ARGUMENT), never INTERNAL, which
// only the layer's last-resort exception catch produces.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/format/json_header.h"
#include "core/format/safetensors_reader.h"
#include "core/quant/convention_resolver.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/resolve_and_decode.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using nlohmann::json;

// Strings and keys the config formats give meaning to: a mutation that
// lands on one of them reaches the code behind it.
const char* const kWords[] = {"",
                              "x",
                              "tensor",
                              "channel",
                              "group",
                              "block",
                              "tensor_group",
                              "token",
                              "int",
                              "float",
                              "int-quantized",
                              "naive-quantized",
                              "pack-quantized",
                              "float-quantized",
                              "nvfp4-pack-quantized",
                              "mxfp4-pack-quantized",
                              "gptq",
                              "gptq_v2",
                              "awq",
                              "fp8",
                              "mxfp4",
                              "bitsandbytes",
                              "compressed-tensors",
                              "gemm",
                              "gemv",
                              "GEMM",
                              "nf4",
                              "fp4",
                              "e4m3",
                              "static",
                              "dynamic",
                              "compressed",
                              "frozen",
                              "re:.*",
                              "re:(",
                              "Linear",
                              "lm_head",
                              "\xE3\x81",
                              "-1",
                              "1e999"};
const char* const kKeys[] = {"quant_method",
                             "config_groups",
                             "weights",
                             "input_activations",
                             "targets",
                             "ignore",
                             "format",
                             "num_bits",
                             "bits",
                             "type",
                             "symmetric",
                             "sym",
                             "strategy",
                             "group_size",
                             "block_structure",
                             "actorder",
                             "desc_act",
                             "checkpoint_format",
                             "zero_point",
                             "version",
                             "weight_block_size",
                             "activation_scheme",
                             "modules_to_not_convert",
                             "bnb_4bit_quant_type",
                             "bnb_4bit_use_double_quant",
                             "load_in_4bit",
                             "quantization_status",
                             "dynamic",
                             "w_bit",
                             "q_group_size"};

json RandomValue(std::minstd_rand& rng, int depth) {
  switch (rng() % 12) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2: {
      const int64_t small[] = {0,  1,  2,   3,   4,  5,    8, 16,
                               32, 64, 128, 256, -1, -128, 7, 33};
      return small[rng() % (sizeof(small) / sizeof(small[0]))];
    }
    case 3: {
      const int64_t huge[] = {INT64_MAX,
                              INT64_MIN,
                              int64_t{1} << 31,
                              (int64_t{1} << 32) + 1,
                              (int64_t{1} << 53) + 1,
                              -(int64_t{1} << 40)};
      return huge[rng() % (sizeof(huge) / sizeof(huge[0]))];
    }
    case 4:
      return UINT64_MAX - rng() % 3;
    case 5: {
      const double reals[] = {0.5, -0.0, 1e308, -1e308, 128.0, 4.000001};
      return reals[rng() % (sizeof(reals) / sizeof(reals[0]))];
    }
    case 6:
    case 7:
      return kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    case 8:
      return json::array();
    case 9: {
      json a = json::array();
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        a.push_back(depth < 3 ? RandomValue(rng, depth + 1) : json(128));
      }
      return a;
    }
    case 10:
      return json::object();
    default: {
      json o = json::object();
      if (depth < 3) {
        o[kKeys[rng() % (sizeof(kKeys) / sizeof(kKeys[0]))]] =
            RandomValue(rng, depth + 1);
      }
      return o;
    }
  }
}

void CollectNodes(json& j, std::vector<json*>* out) {
  out->push_back(&j);
  if (j.is_object() || j.is_array()) {
    for (auto& child : j) CollectNodes(child, out);
  }
}

// One structural edit of `doc`: replace a value, drop a key, add a key.
void MutateDocument(json& doc, std::minstd_rand& rng) {
  std::vector<json*> nodes;
  CollectNodes(doc, &nodes);
  json* node = nodes[rng() % nodes.size()];
  const unsigned op = rng() % 8;
  if (op == 0 && node->is_object() && !node->empty()) {
    auto it = node->begin();
    std::advance(it, rng() % node->size());
    node->erase(it.key());
  } else if (op == 1 && node->is_object()) {
    (*node)[kKeys[rng() % (sizeof(kKeys) / sizeof(kKeys[0]))]] =
        RandomValue(rng, 1);
  } else if (node != &doc) {
    *node = RandomValue(rng, 1);
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                          size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  // Now and then, and whenever the input is not a config pair, a byte-level
  // mutation keeps the rest of the input space reachable.
  if (nul == nullptr || rng() % 10 == 0) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  const size_t json_len = nul - data;
  json doc = json::parse(reinterpret_cast<const char*>(data),
                         reinterpret_cast<const char*>(data) + json_len,
                         /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < edits; ++i) MutateDocument(doc, rng);
  const std::string text =
      doc.dump(-1, ' ', false, json::error_handler_t::replace);
  const size_t tail = size - json_len;  // the NUL and the safetensors file
  if (text.size() + tail > max_size) return size;
  std::memmove(data + text.size(), nul, tail);
  std::memcpy(data, text.data(), text.size());
  return text.size() + tail;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  if (nul == nullptr) return 0;
  const size_t json_len = nul - data;
  auto doc = tensormorph::ParseStrictJson(
      absl::string_view(reinterpret_cast<const char*>(data), json_len),
      "config.json");
  if (!doc.ok()) return 0;
  auto h = tensormorph::ParseSafetensors({nul + 1, size - json_len - 1},
                                         "fuzz.safetensors");
  if (!h.ok()) return 0;
  // The same document in each of the three places a config is read from.
  for (int slot = 0; slot < 3; ++slot) {
    tensormorph::QuantConfigs configs;
    (slot == 0   ? configs.config
     : slot == 1 ? configs.quantize_config
                 : configs.quant_config) = *doc;
    const absl::Status s =
        tensormorph::fuzzing::ResolveAndDecode(h->tensors, configs);
    if (s.code() == absl::StatusCode::kInternal ||
        s.code() == absl::StatusCode::kUnknown) {
      std::fprintf(stderr, "config refused with %s\n", s.ToString().c_str());
      std::abort();
    }
  }
  return 0;
}
