// Convention variants the fixtures do not cover, written by the tests' own
// packers and checked against an independent formula per element; and one
// broken variant per convention, refused with DATA_LOSS naming what
// disagrees.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/quant/float_formats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::F32ToF16Bits;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

// An LSB-first bit stream of `bits`-bit values in 32-bit words.
std::vector<int32_t> Stream(const std::vector<uint32_t>& v, int bits) {
  std::vector<int32_t> words((v.size() * bits + 31) / 32, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t bit = i * bits;
    const uint64_t value = static_cast<uint64_t>(v[i]) << (bit % 32);
    words[bit / 32] |= static_cast<int32_t>(static_cast<uint32_t>(value));
    if (bit % 32 + bits > 32)
      words[bit / 32 + 1] |= static_cast<int32_t>(value >> 32);
  }
  return words;
}

std::string F16Bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h;
  for (float x : v) h.push_back(F32ToF16Bits(x));
  return Bytes(h);
}
float RoundF16(float x) { return F16ToF32(F32ToF16Bits(x)); }

std::mt19937 Rng(int seed) { return std::mt19937(seed); }

// Opens `dir` and checks every element of `name` against `want(r, c)`.
void ExpectDecodes(const std::string& dir, const std::string& name,
                   const std::vector<int64_t>& shape,
                   const std::function<float(int64_t, int64_t)>& want) {
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor(name);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape, shape);
  const int64_t cols = shape.back();
  std::vector<float> got(t->num_elements);
  ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, got.data()).ok());
  for (int64_t i = 0; i < t->num_elements; ++i) {
    const float w = want(i / cols, i % cols);
    ASSERT_EQ(got[i], w) << "element " << i;
    ScalarInfo s;
    ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
    ASSERT_EQ(s.value, w) << "inspect " << i;
  }
}

std::string WriteCheckpoint(const std::vector<StTensor>& tensors,
                            const std::string& config) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/model.safetensors", BuildSafetensors(tensors));
  WriteFile(dir + "/config.json", config);
  return dir;
}

// ---- GPTQ -------------------------------------------------------------------

struct GptqModel {
  int64_t out = 64, in = 128, g = 32;
  int bits = 4;
  bool v1 = true, act_order = false;
  std::vector<uint32_t> q;      // [in][out]
  std::vector<uint32_t> zeros;  // [groups][out]
  std::vector<float> scales;    // [groups][out], f16-exact
  std::vector<int32_t> gidx;    // [in]

  void Fill(int seed) {
    auto rng = Rng(seed);
    const int64_t groups = in / g;
    const uint32_t levels = 1u << bits;
    for (int64_t i = 0; i < in * out; ++i) q.push_back(rng() % levels);
    for (int64_t i = 0; i < groups * out; ++i) zeros.push_back(rng() % levels);
    std::uniform_real_distribution<float> u(0.001f, 0.05f);
    for (int64_t i = 0; i < groups * out; ++i)
      scales.push_back(RoundF16(u(rng)));
    for (int64_t k = 0; k < in; ++k)
      gidx.push_back(static_cast<int32_t>(k / g));
    if (act_order) std::shuffle(gidx.begin(), gidx.end(), rng);
  }
  std::vector<StTensor> Tensors(const std::string& p) const {
    const int64_t groups = in / g;
    std::vector<uint32_t> packed_q, packed_z;
    std::vector<int32_t> qweight(in * bits / 32 * out),
        qzeros(groups * out * bits / 32);
    for (int64_t n = 0; n < out; ++n) {  // each column streams along k
      std::vector<uint32_t> col;
      for (int64_t k = 0; k < in; ++k) col.push_back(q[k * out + n]);
      const auto words = Stream(col, bits);
      for (size_t w = 0; w < words.size(); ++w) qweight[w * out + n] = words[w];
    }
    for (int64_t gi = 0; gi < groups; ++gi) {  // each group streams along n
      std::vector<uint32_t> row;
      for (int64_t n = 0; n < out; ++n) {
        const uint32_t z = zeros[gi * out + n];
        row.push_back(v1 ? ((z - 1) & ((1u << bits) - 1)) : z);
      }
      const auto words = Stream(row, bits);
      std::copy(words.begin(), words.end(),
                qzeros.begin() + gi * out * bits / 32);
    }
    return {{p + "qweight", "I32", {in * bits / 32, out}, Bytes(qweight)},
            {p + "qzeros", "I32", {groups, out * bits / 32}, Bytes(qzeros)},
            {p + "scales", "F16", {groups, out}, F16Bytes(scales)},
            {p + "g_idx", "I32", {in}, Bytes(gidx)}};
  }
  float Want(int64_t n, int64_t k) const {
    const int32_t gi = gidx[k];
    return scales[gi * out + n] *
           static_cast<float>(static_cast<int64_t>(q[k * out + n]) -
                              zeros[gi * out + n]);
  }
  std::string Config() const {
    return std::string(
               R"({"quantization_config": {"quant_method": "gptq", "bits": )") +
           std::to_string(bits) + R"(, "group_size": )" + std::to_string(g) +
           R"(, "desc_act": )" + (act_order ? "true" : "false") +
           R"(, "sym": false, "checkpoint_format": ")" +
           (v1 ? "gptq" : "gptq_v2") + "\"}}";
  }
};

class GptqVariantTest
    : public ::testing::TestWithParam<std::tuple<int, bool, bool>> {};

TEST_P(GptqVariantTest, DecodesEveryElementByTheFormula) {
  GptqModel m;
  std::tie(m.bits, m.v1, m.act_order) = GetParam();
  if (m.bits == 3) m.out = 96;  // 3-bit zeros need out * 3 a multiple of 32
  m.Fill(m.bits * 10 + m.v1);
  const std::string dir = WriteCheckpoint(m.Tensors("l."), m.Config());
  ExpectDecodes(dir, "l.weight", {m.out, m.in},
                [&](int64_t n, int64_t k) { return m.Want(n, k); });
}

INSTANTIATE_TEST_SUITE_P(BitsFormatsOrders, GptqVariantTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Bool(),
                                            ::testing::Bool()));

TEST(ConventionErrorTest, GptqScaleShapeDisagreeingWithGroupSizeIsDataLoss) {
  GptqModel m;
  m.Fill(1);
  auto tensors = m.Tensors("l.");
  const std::string config =
      std::string(R"({"quantization_config": {"quant_method": "gptq",)") +
      R"("bits": 4, "group_size": 64}})";
  auto s = Checkpoint::Open(WriteCheckpoint(tensors, config)).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'l.scales' is F16[4,64]"),
                       MessageNames("group size 64"), MessageNames("[2,64]")));
}

TEST(ConventionErrorTest, GptqMissingQzerosIsDataLoss) {
  GptqModel m;
  m.Fill(2);
  auto tensors = m.Tensors("l.");
  tensors.erase(tensors.begin() + 1);
  auto s = Checkpoint::Open(WriteCheckpoint(tensors, m.Config())).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'l.weight'"), MessageNames("'l.qzeros'")));
}

TEST(ConventionErrorTest, GptqGIdxOutOfRangeIsDataLoss) {
  GptqModel m;
  m.Fill(3);
  m.gidx[7] = 9;
  auto s =
      Checkpoint::Open(WriteCheckpoint(m.Tensors("l."), m.Config())).status();
  EXPECT_THAT(
      s, AllOf(HasReason(ErrorReason::kConventionMismatch),
               MessageNames("'l.g_idx'[7] = 9"), MessageNames("4 groups")));
}

TEST(ConventionErrorTest, UnsupportedMethodsAndBitsAreUnimplementedByName) {
  auto eetq = Checkpoint::Open(
      WriteCheckpoint({{"w", "I8", {1}, "x"}},
                      R"({"quantization_config": {"quant_method": "eetq"}})"));
  EXPECT_THAT(eetq, AllOf(HasReason(ErrorReason::kUnimplemented),
                          MessageNames("'eetq'")));
  auto bits5 = Checkpoint::Open(WriteCheckpoint(
      {{"w", "I8", {1}, "x"}},
      R"({"quantization_config": {"quant_method": "gptq", "bits": 5}})"));
  EXPECT_THAT(bits5, AllOf(HasReason(ErrorReason::kUnimplemented),
                           MessageNames("5 bits")));
}

// ---- AWQ GEMV
// -----------------------------------------------------------------

TEST(AwqVariantTest, GemvPacksSequentiallyAlongIn) {
  const int64_t out = 16, in = 64, g = 32, groups = 2;
  auto rng = Rng(7);
  std::vector<uint32_t> q(out * in), z(out * groups);
  std::vector<float> s(out * 4);  // padded to 4 groups, as AutoAWQ does
  for (auto& v : q) v = rng() % 16;
  for (auto& v : z) v = rng() % 16;
  for (auto& v : s) v = RoundF16(0.01f * (1 + rng() % 50));
  std::vector<int32_t> qweight, qzeros(out * 1, 0);
  for (int64_t n = 0; n < out; ++n) {
    const auto words =
        Stream({q.begin() + n * in, q.begin() + (n + 1) * in}, 4);
    qweight.insert(qweight.end(), words.begin(), words.end());
    const auto zw =
        Stream({z.begin() + n * groups, z.begin() + (n + 1) * groups}, 4);
    qzeros[n] = zw[0];
  }
  const std::string dir = WriteCheckpoint(
      {{"l.qweight", "I32", {out, in / 8}, Bytes(qweight)},
       {"l.qzeros", "I32", {out, 1}, Bytes(qzeros)},
       {"l.scales", "F16", {out, 4}, F16Bytes(s)}},
      R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32,
          "version": "gemv", "zero_point": true}})");
  ExpectDecodes(dir, "l.weight", {out, in}, [&](int64_t n, int64_t k) {
    return s[n * 4 + k / g] *
           static_cast<float>(static_cast<int>(q[n * in + k]) -
                              static_cast<int>(z[n * groups + k / g]));
  });
}

TEST(ConventionErrorTest, AwqScalesOfTheWrongShapeAreDataLoss) {
  const std::string dir = WriteCheckpoint(
      {{"l.qweight", "I32", {64, 2}, std::string(512, '\0')},
       {"l.qzeros", "I32", {2, 2}, std::string(16, '\0')},
       {"l.scales", "F16", {3, 16}, std::string(96, '\0')}},
      R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32}})");
  auto s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'l.scales' is F16[3,16]")));
}

// ---- compressed-tensors
// ----------------------------------------------------------

std::string CtConfig(const std::string& format, const std::string& weights) {
  return R"({"quantization_config": {"quant_method": "compressed-tensors", "format": ")" +
         format +
         R"(", "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" +
         weights + "}}}}";
}

TEST(CompressedTensorsVariantTest,
     AsymmetricPackQuantizedWithPackedZeroPoints) {
  const int64_t out = 16, in = 64, g = 32, groups = 2;
  auto rng = Rng(11);
  std::vector<uint32_t> q(out * in),
      z(out * groups);  // unsigned codes, offset 8
  std::vector<float> s(out * groups);
  for (auto& v : q) v = rng() % 16;
  for (auto& v : z) v = rng() % 16;
  for (auto& v : s) v = 0.01f * (1 + rng() % 50);
  std::vector<int32_t> packed;
  for (int64_t r = 0; r < out; ++r) {
    const auto w = Stream({q.begin() + r * in, q.begin() + (r + 1) * in}, 4);
    packed.insert(packed.end(), w.begin(), w.end());
  }
  // Zero points pack along dim 0: column g streams over the rows.
  std::vector<int32_t> zp(2 * groups, 0);
  for (int64_t gi = 0; gi < groups; ++gi) {
    std::vector<uint32_t> col;
    for (int64_t r = 0; r < out; ++r) col.push_back(z[r * groups + gi]);
    const auto w = Stream(col, 4);
    for (size_t k = 0; k < w.size(); ++k) zp[k * groups + gi] = w[k];
  }
  const std::vector<int32_t> shape = {static_cast<int32_t>(out),
                                      static_cast<int32_t>(in)};
  const std::string dir = WriteCheckpoint(
      {{"l.weight_packed", "I32", {out, in / 8}, Bytes(packed)},
       {"l.weight_shape", "I32", {2}, Bytes(shape)},
       {"l.weight_scale", "F32", {out, groups}, Bytes(s)},
       {"l.weight_zero_point", "I32", {2, groups}, Bytes(zp)}},
      CtConfig("pack-quantized",
               R"({"num_bits": 4, "type": "int", "symmetric": false,
                                   "strategy": "group", "group_size": 32})"));
  ExpectDecodes(dir, "l.weight", {out, in}, [&](int64_t r, int64_t c) {
    const int qs = static_cast<int>(q[r * in + c]) - 8;
    const int zs = static_cast<int>(z[r * groups + c / g]) - 8;
    return s[r * groups + c / g] * static_cast<float>(qs - zs);
  });
}

TEST(CompressedTensorsVariantTest, BlockStrategyWithFp8Codes) {
  const int64_t out = 10, in = 12;
  auto rng = Rng(12);
  std::string codes(out * in, '\0');
  for (char& c : codes) {
    c = static_cast<char>(rng() % 256);
    if ((static_cast<uint8_t>(c) & 0x7F) == 0x7F) c = 0x10;  // no NaN codes
  }
  const std::string dir = WriteCheckpoint(
      {{"l.weight", "F8_E4M3", {out, in}, codes},
       {"l.weight_scale",
        "F32",
        {3, 3},
        Bytes(std::vector<float>{0.5f, 2.0f, 0.25f, 1.5f, 3.0f, 0.125f, 1.0f,
                                 4.0f, 0.75f})}},
      CtConfig("float-quantized",
               R"({"num_bits": 8, "type": "float", "strategy": "block",
                                    "block_structure": [4, 5]})"));
  const std::vector<float> sc = {0.5f,   2.0f, 0.25f, 1.5f, 3.0f,
                                 0.125f, 1.0f, 4.0f,  0.75f};
  ExpectDecodes(dir, "l.weight", {out, in}, [&](int64_t r, int64_t c) {
    return F8E4M3ToF32(static_cast<uint8_t>(codes[r * in + c])) *
           sc[(r / 4) * 3 + c / 5];
  });
}

TEST(ConventionErrorTest, PackedWidthDisagreeingWithWeightShapeIsDataLoss) {
  const std::vector<int32_t> shape = {16, 96};  // needs 12 words per row, has 8
  const std::string dir = WriteCheckpoint(
      {{"l.weight_packed", "I32", {16, 8}, std::string(512, '\0')},
       {"l.weight_shape", "I32", {2}, Bytes(shape)},
       {"l.weight_scale", "F32", {16, 3}, std::string(192, '\0')}},
      CtConfig("pack-quantized",
               R"({"num_bits": 4, "type": "int", "symmetric": true,
                                   "strategy": "group", "group_size": 32})"));
  auto s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'l.weight_packed' is I32[16,8]"),
                       MessageNames("[16,96]"), MessageNames("[16,12]")));
}

// ---- FP8
// --------------------------------------------------------------------------

TEST(Fp8VariantTest, PerTensorE4M3FnuzScale) {
  const int64_t out = 8, in = 16;
  std::string codes(out * in, '\0');
  for (int i = 0; i < out * in; ++i)
    codes[i] = static_cast<char>(i == 3 ? 0x7F : (i * 7) % 256);
  codes[5] = 0x01;  // smallest subnormal
  const std::string dir = WriteCheckpoint(
      {{"l.weight", "F8_E4M3FNUZ", {out, in}, codes},
       {"l.weight_scale", "F32", {1}, Bytes(std::vector<float>{0.375f})}},
      R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}})");
  ExpectDecodes(dir, "l.weight", {out, in}, [&](int64_t r, int64_t c) {
    const uint8_t b = static_cast<uint8_t>(codes[r * in + c]);
    return F8E4M3FnuzToF32(b) * 0.375f;
  });
}

TEST(ConventionErrorTest, Fp8BlockScaleOfTheWrongShapeIsDataLoss) {
  const std::string dir = WriteCheckpoint(
      {{"l.weight", "F8_E4M3", {200, 300}, std::string(60000, '\0')},
       {"l.weight_scale_inv", "F32", {2, 2}, std::string(16, '\0')}},
      R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  auto s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'l.weight_scale_inv' is F32[2,2]"),
                       MessageNames("128x128"), MessageNames("[200,300]"),
                       MessageNames("[2,3]")));
}

// ---- MXFP4 (gpt-oss)
// ------------------------------------------------------------

TEST(ConventionErrorTest, Mxfp4ScalesOfTheWrongShapeAreDataLoss) {
  const std::string dir =
      WriteCheckpoint({{"e_blocks", "U8", {2, 4, 16}, std::string(128, '\0')},
                       {"e_scales", "U8", {2, 3}, std::string(6, '\0')}},
                      R"({"quantization_config": {"quant_method": "mxfp4"}})");
  auto s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'e_scales' is U8[2,3]")));
}

// ---- bitsandbytes
// -----------------------------------------------------------------

std::string QuantState(const std::string& type, bool nested) {
  std::string s = R"({"quant_type": ")" + type +
                  R"(", "blocksize": 64, "dtype": "bfloat16", )" +
                  R"("shape": [16, 32])";
  if (nested)
    s +=
        R"(, "nested_blocksize": 4, "nested_offset": 0.03125, "nested_dtype": "float32")";
  return s + "}";
}

TEST(BitsandbytesVariantTest, NestedNf4AndFp4) {
  for (const std::string type : {"nf4", "fp4"}) {
    SCOPED_TRACE(type);
    const int64_t n = 16 * 32, blocks = n / 64;
    auto rng = Rng(21);
    std::string packed(n / 2, '\0');
    for (char& c : packed) c = static_cast<char>(rng() % 256);
    std::vector<float> qmap(16), table2(256), nested_absmax = {0.5f, 0.25f};
    for (int i = 0; i < 16; ++i) qmap[i] = -1.0f + i * (2.0f / 15.0f);
    for (int i = 0; i < 256; ++i) table2[i] = i / 255.0f;
    std::string absmax_codes(blocks, '\0');
    for (char& c : absmax_codes) c = static_cast<char>(rng() % 256);
    const std::string state = QuantState(type, true);
    const std::string p = "m.weight";
    const std::string dir = WriteCheckpoint(
        {{p, "U8", {n / 2, 1}, packed},
         {p + ".absmax", "U8", {blocks}, absmax_codes},
         {p + ".nested_absmax", "F32", {2}, Bytes(nested_absmax)},
         {p + ".nested_quant_map", "F32", {256}, Bytes(table2)},
         {p + ".quant_map", "F32", {16}, Bytes(qmap)},
         {p + ".quant_state.bitsandbytes__" + type,
          "U8",
          {static_cast<int64_t>(state.size())},
          state}},
        R"({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}})");
    ExpectDecodes(dir, p, {16, 32}, [&](int64_t r, int64_t c) {
      const int64_t i = r * 32 + c;
      const uint8_t byte = static_cast<uint8_t>(packed[i / 2]);
      const int nib = i % 2 == 0 ? byte >> 4 : byte & 15;
      const int64_t b = i / 64;
      const float absmax =
          table2[static_cast<uint8_t>(absmax_codes[b])] * nested_absmax[b / 4] +
          0.03125f;
      return qmap[nib] * absmax;
    });
  }
}

TEST(ConventionErrorTest,
     BitsandbytesAbsmaxCountDisagreeingWithBlocksIsDataLoss) {
  const std::string state = QuantState("nf4", false);
  const std::string p = "m.weight";
  const std::string dir = WriteCheckpoint(
      {{p, "U8", {256, 1}, std::string(256, '\0')},
       {p + ".absmax", "F32", {3}, std::string(12, '\0')},
       {p + ".quant_map", "F32", {16}, std::string(64, '\0')},
       {p + ".quant_state.bitsandbytes__nf4",
        "U8",
        {static_cast<int64_t>(state.size())},
        state}},
      R"({"quantization_config": {"quant_method": "bitsandbytes"}})");
  auto s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'m.weight.absmax' is F32[3]"),
                       MessageNames("512 elements"),
                       MessageNames("blocks of 64"), MessageNames("[8]")));
}

}  // namespace
}  // namespace tensormorph
