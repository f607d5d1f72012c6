#include "tests/bench/bench_data.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::bench {

std::string WriteDiffPair(int tensors, int64_t rows) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  constexpr int64_t kCols = 4096;
  GgufSpec src, q8;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < tensors; ++t) {
    std::vector<float> v(static_cast<size_t>(rows * kCols));
    for (float& x : v) {  // xorshift: fast and deterministic
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      x = (static_cast<float>(state >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    const std::string name = "blk." + std::to_string(t) + ".ffn_down.weight";
    src.tensors.push_back({name, {kCols, rows}, 0, ToF32Bytes(v)});
    q8.tensors.push_back({name, {kCols, rows}, 8, QuantizeQ8_0(v)});
  }
  WriteFile(dir + "/source.gguf", BuildGguf(src));
  WriteFile(dir + "/q8_0.gguf", BuildGguf(q8));
  return dir;
}

namespace {

uint64_t Next(uint64_t* state) {  // xorshift64
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

std::string RandomBytes(int64_t n, uint64_t seed) {
  std::string b(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = Next(&seed);
    std::memcpy(b.data() + i, &v, 8);
  }
  return b;
}

// Positive scales of a quantizer's magnitude, as float16 or bfloat16 bytes.
std::string Scales(int64_t n, uint64_t seed, bool bf16) {
  std::vector<uint16_t> s(static_cast<size_t>(n));
  for (uint16_t& x : s) {
    const float v =
        0.001f + static_cast<float>(Next(&seed) >> 40) / 16777216.0f * 0.01f;
    x = bf16 ? testing::F32ToBF16Bits(v) : testing::F32ToF16Bits(v);
  }
  return testing::Bytes(s);
}

int MlxAffineBits(Convention c) {
  switch (c) {
    case Convention::kMlxInt2:
      return 2;
    case Convention::kMlxInt3:
      return 3;
    case Convention::kMlxInt4:
      return 4;
    case Convention::kMlxInt5:
      return 5;
    case Convention::kMlxInt6:
      return 6;
    default:
      return 8;
  }
}

}  // namespace

std::string WriteBigQ8_0(int64_t rows, int64_t cols) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  std::string data = RandomBytes(rows * (cols / 32) * 34, 0x5DEECE66Dull);
  for (size_t b = 0; b < data.size(); b += 34) {
    data[b] = 0x00;  // F16 0x2000 = 2^-7, little-endian
    data[b + 1] = 0x20;
  }
  GgufSpec spec;
  spec.tensors.push_back({"big", {cols, rows}, 8, std::move(data)});
  WriteFile(dir + "/big.gguf", BuildGguf(spec));
  return dir;
}

const char* ConventionName(Convention c) {
  switch (c) {
    case Convention::kGptqInt4:
      return "gptq_int4_g128";
    case Convention::kAwqInt4:
      return "awq_int4_g128";
    case Convention::kCtInt4Group:
      return "ct_int4_g128";
    case Convention::kCtInt8Channel:
      return "ct_int8_channel";
    case Convention::kFp8Block:
      return "fp8_block128";
    case Convention::kBnbNf4:
      return "bnb_nf4";
    case Convention::kGptOssMxfp4:
      return "gptoss_mxfp4";
    case Convention::kMlxInt4:
      return "mlx_int4_g64";
    case Convention::kMlxInt3:
      return "mlx_int3_g64";
    case Convention::kMlxInt8:
      return "mlx_int8_g64";
    case Convention::kMlxMxfp4:
      return "mlx_mxfp4";
    case Convention::kBnbInt8:
      return "bnb_int8";
    case Convention::kMlxMxfp8:
      return "mlx_mxfp8";
    case Convention::kMlxNvfp4:
      return "mlx_nvfp4";
    case Convention::kMlxInt2:
      return "mlx_int2_g64";
    case Convention::kMlxInt5:
      return "mlx_int5_g64";
    case Convention::kMlxInt6:
      return "mlx_int6_g64";
  }
  return "?";
}

std::string WriteConventionCheckpoint(Convention c, int64_t out, int64_t in) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  const std::string m = "model.layers.0.mlp.down_proj";
  constexpr int64_t kGroup = 128;
  std::vector<StTensor> t;
  std::string config;
  switch (c) {
    case Convention::kGptqInt4:
      t = {{m + ".qweight", "I32", {in / 8, out}, RandomBytes(in * out / 2, 1)},
           {m + ".qzeros",
            "I32",
            {in / kGroup, out / 8},
            RandomBytes(in / kGroup * out / 2, 2)},
           {m + ".scales",
            "F16",
            {in / kGroup, out},
            Scales(in / kGroup * out, 3, false)}};
      {
        std::vector<int32_t> g_idx(static_cast<size_t>(in));
        for (int64_t i = 0; i < in; ++i)
          g_idx[i] = static_cast<int32_t>(i / kGroup);
        t.push_back({m + ".g_idx", "I32", {in}, Bytes(g_idx)});
      }
      config = R"({"quantization_config": {"bits": 4, "group_size": 128,
        "desc_act": false, "sym": false, "quant_method": "gptq",
        "checkpoint_format": "gptq"}})";
      break;
    case Convention::kAwqInt4:
      t = {{m + ".qweight", "I32", {in, out / 8}, RandomBytes(in * out / 2, 1)},
           {m + ".qzeros",
            "I32",
            {in / kGroup, out / 8},
            RandomBytes(in / kGroup * out / 2, 2)},
           {m + ".scales",
            "F16",
            {in / kGroup, out},
            Scales(in / kGroup * out, 3, false)}};
      config = R"({"quantization_config": {"quant_method": "awq", "bits": 4,
        "group_size": 128, "zero_point": true, "version": "gemm"}})";
      break;
    case Convention::kCtInt4Group:
      t = {{m + ".weight_packed",
            "I32",
            {out, in / 8},
            RandomBytes(in * out / 2, 1)},
           {m + ".weight_scale",
            "BF16",
            {out, in / kGroup},
            Scales(out * in / kGroup, 3, true)},
           {m + ".weight_shape",
            "I32",
            {2},
            Bytes(std::vector<int32_t>{static_cast<int32_t>(out),
                                       static_cast<int32_t>(in)})}};
      config = R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "pack-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
        "group_size": 128}}}}})";
      break;
    case Convention::kCtInt8Channel:
      t = {{m + ".weight", "I8", {out, in}, RandomBytes(in * out, 1)},
           {m + ".weight_scale", "BF16", {out, 1}, Scales(out, 3, true)}};
      config = R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "int-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "int", "symmetric": true,
        "strategy": "channel"}}}}})";
      break;
    case Convention::kFp8Block: {
      // Codes of finite E4M3 values (0x7F/0xFF are NaN).
      std::string w = RandomBytes(in * out, 1);
      for (char& b : w) b = static_cast<char>(b & 0xF7);
      std::vector<float> s(static_cast<size_t>((out / 128) * (in / 128)),
                           1e-3f);
      t = {{m + ".weight", "F8_E4M3", {out, in}, w},
           {m + ".weight_scale_inv", "F32", {out / 128, in / 128}, Bytes(s)}};
      config = R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
        "activation_scheme": "dynamic", "weight_block_size": [128, 128]}})";
      break;
    }
    case Convention::kBnbNf4: {
      const std::vector<float> nf4 = {-1.0f,
                                      -0.6961928009986877f,
                                      -0.5250730514526367f,
                                      -0.39491748809814453f,
                                      -0.28444138169288635f,
                                      -0.18477343022823334f,
                                      -0.09105003625154495f,
                                      0.0f,
                                      0.07958029955625534f,
                                      0.16093020141124725f,
                                      0.24611230194568634f,
                                      0.33791524171829224f,
                                      0.44070982933044434f,
                                      0.5626170039176941f,
                                      0.7229568362236023f,
                                      1.0f};
      std::vector<float> absmax(static_cast<size_t>(out * in / 64), 0.05f);
      const std::string state =
          R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [)" +
          std::to_string(out) + ", " + std::to_string(in) + "]}";
      t = {{m + ".weight",
            "U8",
            {out * in / 2, 1},
            RandomBytes(out * in / 2, 1)},
           {m + ".weight.absmax", "F32", {out * in / 64}, Bytes(absmax)},
           {m + ".weight.quant_map", "F32", {16}, Bytes(nf4)},
           {m + ".weight.quant_state.bitsandbytes__nf4",
            "U8",
            {static_cast<int64_t>(state.size())},
            state}};
      config = R"({"quantization_config": {"quant_method": "bitsandbytes",
        "load_in_4bit": true, "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": false}})";
      break;
    }
    case Convention::kGptOssMxfp4: {
      const std::string e = "model.layers.0.mlp.experts.down_proj";
      std::string scales = RandomBytes(2 * out * (in / 32), 2);
      for (char& b : scales) b = static_cast<char>(120 + (b & 7));  // ~2^-7
      t = {{e + "_blocks",
            "U8",
            {2, out, in / 32, 16},
            RandomBytes(2 * out * in / 2, 1)},
           {e + "_scales", "U8", {2, out, in / 32}, scales}};
      config = R"({"quantization_config": {"quant_method": "mxfp4"}})";
      break;
    }
    case Convention::kMlxInt2:
    case Convention::kMlxInt3:
    case Convention::kMlxInt4:
    case Convention::kMlxInt5:
    case Convention::kMlxInt6:
    case Convention::kMlxInt8: {
      const int bits = MlxAffineBits(c);
      t = {{m + ".weight",
            "U32",
            {out, in * bits / 32},
            RandomBytes(out * in * bits / 8, 1)},
           {m + ".scales",
            "BF16",
            {out, in / 64},
            Scales(out * in / 64, 3, true)},
           {m + ".biases",
            "BF16",
            {out, in / 64},
            Scales(out * in / 64, 4, true)}};
      config = R"({"quantization": {"group_size": 64, "bits": )" +
               std::to_string(bits) + "}}";
      break;
    }
    case Convention::kMlxMxfp4: {
      std::string scales = RandomBytes(out * (in / 32), 2);
      for (char& b : scales) b = static_cast<char>(120 + (b & 7));  // ~2^-7
      t = {{m + ".weight", "U32", {out, in / 8}, RandomBytes(out * in / 2, 1)},
           {m + ".scales", "U8", {out, in / 32}, scales}};
      config = R"({"quantization": {"group_size": 32, "bits": 4,
        "mode": "mxfp4"}})";
      break;
    }
    case Convention::kMlxMxfp8: {
      // Finite E4M3 codes of every exponent (0x7F / 0xFF are NaN).
      std::string w = RandomBytes(out * in, 1);
      for (char& b : w) {
        if ((b & 0x7F) == 0x7F) b = static_cast<char>(b & 0xFE);
      }
      std::string scales = RandomBytes(out * (in / 32), 2);
      for (char& b : scales) b = static_cast<char>(120 + (b & 7));  // ~2^-7
      t = {{m + ".weight", "U32", {out, in / 4}, w},
           {m + ".scales", "U8", {out, in / 32}, scales}};
      config = R"({"quantization": {"group_size": 32, "bits": 8,
        "mode": "mxfp8"}})";
      break;
    }
    case Convention::kMlxNvfp4: {
      // E4M3 scales of the magnitudes a quantizer writes (exponents 4..12).
      std::string scales = RandomBytes(out * (in / 16), 2);
      for (char& b : scales) {
        const auto u = static_cast<uint8_t>(b);
        b = static_cast<char>(((4 + u % 9) << 3) | (u >> 5));
      }
      t = {{m + ".weight", "U32", {out, in / 8}, RandomBytes(out * in / 2, 1)},
           {m + ".scales", "U8", {out, in / 16}, scales}};
      config = R"({"quantization": {"group_size": 16, "bits": 4,
        "mode": "nvfp4"}})";
      break;
    }
    case Convention::kBnbInt8: {
      std::vector<float> scb(static_cast<size_t>(out), 0.05f);
      t = {{m + ".weight", "I8", {out, in}, RandomBytes(out * in, 1)},
           {m + ".SCB", "F32", {out}, Bytes(scb)},
           {m + ".weight_format", "U8", {}, std::string(1, '\0')}};
      config = R"({"quantization_config": {"quant_method": "bitsandbytes",
        "load_in_8bit": true}})";
      break;
    }
  }
  WriteFile(dir + "/model.safetensors", BuildSafetensors(t));
  WriteFile(dir + "/config.json", config);
  return dir;
}

}  // namespace tensormorph::bench
