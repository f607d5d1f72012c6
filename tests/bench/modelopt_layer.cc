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
  }
  return "?";
}

std::string WriteModelOptLayer(ModelOptLayer l, int64_t out, int64_t in) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  const std::string m = "model.layers.0.mlp.down_proj";
  std::vector<StTensor> t;
  std::string algo;
  switch (l) {
    case ModelOptLayer::kNvfp4:
      t = {{m + ".weight", "U8", {out, in / 2}, RandomBytes(out * in / 2, 1)},
           {m + ".weight_scale",
            "F8_E4M3",
            {out, in / 16},
            Fp8Codes(out * in / 16, 2, 4, 12, false)},
           {m + ".weight_scale_2", "F32", {}, Bytes(std::vector<float>{2e-4f})},
           {m + ".input_scale", "F32", {}, Bytes(std::vector<float>{0.01f})}};
      algo = "NVFP4";
      break;
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
