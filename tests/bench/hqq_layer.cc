#include "tests/bench/hqq_layer.h"

#include <random>
#include <string>
#include <vector>

#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::bench {

std::string WriteHqqLayer(int64_t out, int64_t in, int axis) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  const std::string m = "model.layers.0.mlp.down_proj.";
  const int64_t groups = out * in / 64;
  std::mt19937 rng(7);
  std::string codes(static_cast<size_t>(groups / 2 * 64), '\0');
  for (char& c : codes) c = static_cast<char>(rng());
  std::vector<uint16_t> scale(groups), zero(groups);
  for (int64_t g = 0; g < groups; ++g) {
    scale[g] = F32ToF16Bits(0.002f + static_cast<float>(rng() % 1000) * 1e-5f);
    zero[g] = F32ToF16Bits(static_cast<float>(rng() % 1500) * 0.01f);
  }
  // Axis 1: W_q [groups / 2, 64], a scale per row; axis 0: W_q [32,
  // groups], a scale per column.
  const std::vector<int64_t> w_shape =
      axis == 1 ? std::vector<int64_t>{groups / 2, 64}
                : std::vector<int64_t>{32, groups};
  const std::vector<int64_t> p_shape = axis == 1
                                           ? std::vector<int64_t>{groups, 1}
                                           : std::vector<int64_t>{1, groups};
  std::vector<StTensor> t = {
      {m + "W_q", "U8", w_shape, codes},
      {m + "scale", "F16", p_shape, Bytes(scale)},
      {m + "zero", "F16", p_shape, Bytes(zero)},
      {m + "shape", "I64", {2}, Bytes(std::vector<int64_t>{out, in})},
      {m + "nbits", "U8", {}, std::string(1, '\x04')},
      {m + "group_size", "U8", {}, std::string(1, '\x40')},
      {m + "axis", "U8", {}, std::string(1, static_cast<char>(axis))},
      {m + "packing", "U8", {7}, "4bit_u8"},
      {m + "compute_dtype", "U8", {13}, "torch.float16"}};
  WriteFile(dir + "/model.safetensors", BuildSafetensors(t));
  WriteFile(dir + "/config.json",
            R"({"quantization_config": {"quant_method": "hqq",
              "quant_config": {"weight_quant_params": {"nbits": 4,
              "group_size": 64, "axis": )" +
                std::to_string(axis) + R"(}}, "skip_modules": ["lm_head"]}})");
  return dir;
}

}  // namespace tensormorph::bench
