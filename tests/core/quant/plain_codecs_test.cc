// Plain safetensors dtypes decode as torch's float32 casts do, and the small
// float formats match their definitions value by value.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "core/quant/float_formats.h"
#include "core/slice.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::SameBits;

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadF32File;

TEST(PlainCodecsTest, SafetensorsPlainFixtureDecodesBitExactly) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/plain/model.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::vector<std::string> names = {
      "bf16", "bf16_3d", "bool", "empty", "f16", "f16_special", "f32",
      "f64",  "i16",     "i32",  "i64",   "i8",  "scalar",      "u8"};
  EXPECT_EQ((*ckpt)->tensors().size(), names.size());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    const auto want =
        ReadF32File(Fixture("safetensors/plain/expected/" + name + ".f32"));
    auto all = ResolveSlice({}, t->shape);
    ASSERT_TRUE(all.ok());
    auto got = ReadSlice(*t, *all);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(SameBits((*got)[i], want[i]))
          << "element " << i << ": " << (*got)[i] << " vs " << want[i];
    }
  }
}

TEST(PlainCodecsTest, RankZeroAndEmptyTensorsHaveTheirShapes) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/plain/model.safetensors"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* scalar = (*ckpt)->FindTensor("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->num_elements, 1);
  const LogicalTensor* empty = (*ckpt)->FindTensor("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(empty->num_elements, 0);
}

// Reference values from the format definitions, written out independently.
TEST(PlainCodecsTest, Fp8E4M3FnMatchesDefinition) {
  EXPECT_EQ(F8E4M3ToF32(0x7E), 448.0f);  // max normal
  EXPECT_EQ(F8E4M3ToF32(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0xFF)));
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x80), -0.0f);
  EXPECT_TRUE(std::signbit(F8E4M3ToF32(0x80)));
}

TEST(PlainCodecsTest, Fp8E5M2MatchesDefinition) {
  EXPECT_EQ(F8E5M2ToF32(0x7B), 57344.0f);
  EXPECT_TRUE(std::isinf(F8E5M2ToF32(0x7C)));
  EXPECT_TRUE(std::isnan(F8E5M2ToF32(0x7D)));
  EXPECT_EQ(F8E5M2ToF32(0x3C), 1.0f);
  EXPECT_EQ(F8E5M2ToF32(0x01), std::ldexp(1.0f, -16));
}

TEST(PlainCodecsTest, Fp8FnuzVariantsHaveBiasOneHigherAndOneNaN) {
  EXPECT_EQ(F8E4M3FnuzToF32(0x40), 1.0f);    // exponent 8 - bias 8
  EXPECT_EQ(F8E4M3FnuzToF32(0x7F), 240.0f);  // max
  EXPECT_TRUE(std::isnan(F8E4M3FnuzToF32(0x80)));
  EXPECT_EQ(F8E4M3FnuzToF32(0x01), std::ldexp(1.0f, -10));
  EXPECT_EQ(F8E5M2FnuzToF32(0x40), 1.0f);  // exponent 16 - bias 16
  EXPECT_EQ(F8E5M2FnuzToF32(0x7F), 57344.0f);
  EXPECT_TRUE(std::isnan(F8E5M2FnuzToF32(0x80)));
  EXPECT_EQ(F8E5M2FnuzToF32(0xC0), -1.0f);
}

TEST(PlainCodecsTest, E8M0IsAPowerOfTwoWithNaNAtFF) {
  EXPECT_EQ(E8M0ToF32(127), 1.0f);
  EXPECT_EQ(E8M0ToF32(128), 2.0f);
  EXPECT_EQ(E8M0ToF32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E8M0ToF32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
  for (int e = 0; e < 255; ++e) {
    EXPECT_EQ(E8M0ToF32Half(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128))
        << e;
  }
}

TEST(PlainCodecsTest, Fp6FormatsMatchTheirDefinitions) {
  EXPECT_EQ(F6E2M3ToF32(0x1F), 7.5f);    // max: 2^2 * 1.875
  EXPECT_EQ(F6E2M3ToF32(0x01), 0.125f);  // subnormal: 1/8
  EXPECT_EQ(F6E2M3ToF32(0x08), 1.0f);
  EXPECT_EQ(F6E2M3ToF32(0x28), -1.0f);
  EXPECT_EQ(F6E3M2ToF32(0x1F), 28.0f);  // max: 2^4 * 1.75
  EXPECT_EQ(F6E3M2ToF32(0x01), 0.0625f);
  EXPECT_EQ(F6E3M2ToF32(0x0C), 1.0f);
}

TEST(PlainCodecsTest, F4AndF6PackingOrder) {
  // F4: first element in the low nibble.
  const uint8_t f4[] = {0x72, 0xA1};  // codes 2,7 then 1,10
  std::vector<float> out(4);
  ASSERT_TRUE(DecodeElements(DType::kF4, f4, 0, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 6.0f, 0.5f, -1.0f}));
  // F6: four codes in a little-endian 24-bit word, element k at bits 6k.
  const uint32_t word = 0x08 | (0x10 << 6) | (0x28 << 12) | (0x1F << 18);
  const uint8_t f6[] = {static_cast<uint8_t>(word),
                        static_cast<uint8_t>(word >> 8),
                        static_cast<uint8_t>(word >> 16)};
  ASSERT_TRUE(DecodeElements(DType::kF6E2M3, f6, 0, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f, -1.0f, 7.5f}));
}

TEST(PlainCodecsTest, F16DecodesEveryCodeLikeTheHardwareConversion) {
  for (uint32_t c = 0; c < 65536; ++c) {
    _Float16 h;
    const uint16_t bits = static_cast<uint16_t>(c);
    std::memcpy(&h, &bits, 2);
    ASSERT_TRUE(SameBits(F16ToF32(bits), static_cast<float>(h))) << c;
  }
}

TEST(PlainCodecsTest, TestWritersRoundToFloat16LikeTheHardware) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f =
        i < 100000 ? u(rng) : u(rng) * 1e-9f;  // normals and subnormals
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(::tensormorph::testing::F32ToF16Bits(f), bits) << f;
  }
}

TEST(PlainCodecsTest, FloatStepIsTheGapToTheNeighbours) {
  const uint16_t one_bf16 = 0x3F80;
  ScalarInfo s;
  ASSERT_TRUE(InspectElement(DType::kBF16,
                             {reinterpret_cast<const uint8_t*>(&one_bf16), 2},
                             0, &s)
                  .ok());
  EXPECT_EQ(s.value, 1.0f);
  EXPECT_EQ(s.code_bits_value, 0x3F80u);
  EXPECT_EQ(s.step_above, std::ldexp(1.0, -7));  // 8 significand bits
  EXPECT_EQ(s.step_below, std::ldexp(1.0, -8));  // binade below is finer
  EXPECT_EQ(s.range_max, 0x1.FEp127);
}

// Only a ggml type id Tensormorph does not know has no decoder (the
// stored encoding names the id itself; see gguf_reader_test).
TEST(PlainCodecsTest, TheUnknownGgmlTypeAnswersUnimplementedByName) {
  const uint8_t block[66] = {};
  float out[16];
  absl::Status s = DecodeElements(DType::kGgmlUnknown, block, 0, 16, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("GGML_UNKNOWN"), std::string::npos) << s;
  ScalarInfo si;
  EXPECT_EQ(InspectElement(DType::kGgmlUnknown, block, 0, &si).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tensormorph
