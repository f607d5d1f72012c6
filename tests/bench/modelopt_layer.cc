#include "tests/bench/modelopt_layer.h"

#include <random>
#include <vector>

#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::bench {
namespace {

// Bytes of random FP8 E4M3 codes that are finite (0x7F / 0xFF are NaN) and
// within [lo_exp, hi_exp] of exponent, as block scales are.
std::string Fp8Codes(int64_t n, uint32_t seed, int lo_exp, int hi_exp,
                     bool sign) {
  std::mt19937 rng(seed);
  std::string b(static_cast<size_t>(n), '\0');
  for (char& c : b) {
    const uint32_t r = rng();
    const int e = lo_exp + static_cast<int>(r % (hi_exp - lo_exp + 1));
    const uint32_t s = sign ? (r >> 8) & 0x80 : 0;
    c = static_cast<char>(s | (e << 3) | ((r >> 4) & 7));
  }
  return b;
}

std::string RandomBytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string b(static_cast<size_t>(n), '\0');
  for (char& c : b) c = static_cast<char>(rng());
  return b;
}

}  // namespace

const char* ModelOptLayerName(ModelOptLayer l) {
  switch (l) {
    case ModelOptLayer::kNvfp4:
      return "modelopt_nvfp4";
    case ModelOptLayer::kFp8:
      return "modelopt_fp8";
    case ModelOptLayer::kMxfp8:
      return "modelopt_mxfp8";
    case ModelOptLayer::kW4a8Awq:
      return "modelopt_w4a8_awq";
    case ModelOptLayer::kNvfp4Awq:
      return "modelopt_nvfp4_awq";
  }
  return "?";
}

std::string WriteModelOptLayer(ModelOptLayer l, int64_t out, int64_t in) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  const std::string m = "model.layers.0.mlp.down_proj";
  std::vector<StTensor> t;
  std::string algo;
  // AWQ's per-input-column scales: BF16 in [0.5, 2).
  std::string pqs;
  for (int64_t i = 0; i < in; ++i) {
    const uint16_t b = static_cast<uint16_t>(0x3F00 + (i * 37) % 256);
    pqs += std::string{static_cast<char>(b & 0xFF), static_cast<char>(b >> 8)};
  }
  switch (l) {
    case ModelOptLayer::kNvfp4Awq:
    case ModelOptLayer::kNvfp4:
      t = {{m + ".weight", "U8", {out, in / 2}, RandomBytes(out * in / 2, 1)},
           {m + ".weight_scale",
            "F8_E4M3",
            {out, in / 16},
            Fp8Codes(out * in / 16, 2, 4, 12, false)},
           {m + ".weight_scale_2", "F32", {}, Bytes(std::vector<float>{2e-4f})},
           {m + ".input_scale", "F32", {}, Bytes(std::vector<float>{0.01f})}};
      algo = "NVFP4";
      if (l == ModelOptLayer::kNvfp4Awq) {
        t.push_back({m + ".pre_quant_scale", "BF16", {in}, pqs});
        algo = "NVFP4_AWQ";
      }
      break;
    case ModelOptLayer::kW4a8Awq: {
      std::vector<float> scales(static_cast<size_t>(out * in / 128));
      for (size_t i = 0; i < scales.size(); ++i) {
        scales[i] = 1e-3f * static_cast<float>(1 + i % 13);
      }
      t = {{m + ".weight", "U8", {out / 2, in}, RandomBytes(out / 2 * in, 1)},
           {m + ".weight_scale", "F32", {out, in / 128}, Bytes(scales)},
           {m + ".weight_scale_2", "F32", {}, Bytes(std::vector<float>{2e-4f})},
           {m + ".input_scale", "F32", {}, Bytes(std::vector<float>{0.01f})},
           {m + ".pre_quant_scale", "BF16", {in}, pqs}};
      algo = "W4A8_AWQ";
      break;
    }
    case ModelOptLayer::kFp8:
      t = {{m + ".weight",
            "F8_E4M3",
            {out, in},
            Fp8Codes(out * in, 1, 0, 14, true)},
           {m + ".weight_scale", "F32", {}, Bytes(std::vector<float>{1e-3f})}};
      algo = "FP8";
      break;
    case ModelOptLayer::kMxfp8: {
      std::string e(static_cast<size_t>(out * in / 32), '\0');
      for (size_t i = 0; i < e.size(); ++i) {
        e[i] = static_cast<char>(115 + i % 8);
      }
      t = {{m + ".weight",
            "F8_E4M3",
            {out, in},
            Fp8Codes(out * in, 1, 0, 14, true)},
           {m + ".weight_scale", "U8", {out, in / 32}, e}};
      algo = "MXFP8";
      break;
    }
  }
  WriteFile(dir + "/model.safetensors", BuildSafetensors(t));
  WriteFile(dir + "/hf_quant_config.json",
            "{\"producer\": {\"name\": \"modelopt\"}, \"quantization\": "
            "{\"quant_algo\": \"" +
                algo + "\", \"exclude_modules\": [\"lm_head\"]}}");
  return dir;
}

}  // namespace tensormorph::bench
