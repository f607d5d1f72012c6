// Tensormorph's ggml decoders against ggml's own to_float (the pinned
// llama.cpp library, ggml_oracle.h), on blocks ggml's quantizers write from
// Gaussian rows with outliers: every type both know decodes bit for bit the
// same, and every ggml type is known to the reader by its id.
#include "tests/oracle/ggml_oracle.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "core/dtype.h"
#include "core/quant/codec.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::GgmlOracle;

// Rows of a weight matrix as real ones look: Gaussian, a few large
// outliers, one zero block.
std::vector<float> Weights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 0.02f);
  std::vector<float> w(rows * cols);
  for (float& x : w) x = g(rng);
  for (int64_t i = 0; i < rows * cols; i += 997) w[i] *= 40;
  std::fill(w.begin(), w.begin() + 256, 0.0f);
  return w;
}

// The ids a ggml type's name maps to in Tensormorph's table.
TEST(GgmlOracleTest, EveryGgmlTypeIdNamesTheSameTypeInTensormorph) {
  for (int id = 0; id < GgmlOracle::kTypeCount; ++id) {
    const auto info = GgmlOracle::Shared().Type(id);
    const std::optional<DType> ours = DTypeFromGgmlTypeId(id);
    if (!info) {
      EXPECT_FALSE(ours.has_value()) << "removed ggml id " << id;
      continue;
    }
    SCOPED_TRACE(info->name);
    ASSERT_TRUE(ours.has_value()) << "ggml type " << id << " (" << info->name
                                  << ") is unknown to Tensormorph";
    const DTypeInfo& d = GetDTypeInfo(*ours);
    EXPECT_EQ(absl::AsciiStrToLower(d.name), absl::AsciiStrToLower(info->name));
    EXPECT_EQ(d.block_elems, info->block_elems);
    EXPECT_EQ(d.block_bytes, info->block_bytes);
  }
}

TEST(GgmlOracleTest, EveryDecodableTypeDecodesAsGgmlToFloat) {
  const int64_t rows = 8, cols = 1024;
  const std::vector<float> w = Weights(rows, cols, 29);
  std::vector<float> imatrix(cols);
  for (int64_t c = 0; c < cols; ++c) imatrix[c] = 1.0f + (c % 7);
  int compared = 0;
  for (int id = 0; id < GgmlOracle::kTypeCount; ++id) {
    const auto info = GgmlOracle::Shared().Type(id);
    const std::optional<DType> ours = DTypeFromGgmlTypeId(id);
    if (!info || !info->quantized || !info->has_to_float || !ours ||
        !GetDTypeInfo(*ours).decodable) {
      continue;
    }
    SCOPED_TRACE(info->name);
    auto q = GgmlOracle::Shared().Quantize(id, w, cols, imatrix);
    ASSERT_TRUE(q.ok()) << q.status();
    auto want = GgmlOracle::Shared().ToFloat(id, *q);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<float> got(want->size());
    ASSERT_TRUE(DecodeElements(*ours, *q, 0, got.size(), got.data()).ok());
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      differ += std::memcmp(&got[i], &(*want)[i], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "elements not bit-exact to ggml's to_float";
    ++compared;
  }
  EXPECT_GE(compared, 24);  // the 9 of issue 29 among them
}

// Where a type keeps its fp16 super-block scale, so that random blocks get
// a sane one (random bits there would be NaN or 1e4-sized half the time).
struct NewType {
  int id;
  int d_offset;  // byte offset of the fp16 d, or -1 (IQ1_M spreads it)
};
constexpr NewType kNewTypes[] = {
    {41, 0},   // Q1_0
    {42, 0},   // Q2_0
    {16, 0},   // IQ2_XXS
    {17, 0},   // IQ2_XS
    {22, 0},   // IQ2_S
    {18, 0},   // IQ3_XXS
    {21, 0},   // IQ3_S
    {19, 0},   // IQ1_S
    {29, -1},  // IQ1_M
};

// IQ1_M keeps its fp16 scale in the top nibbles of its four 16-bit scale
// words (bytes 48..55).
void PutIq1MScale(uint8_t* block, uint16_t h) {
  for (int k = 0; k < 4; ++k) {
    uint8_t& hi = block[48 + 2 * k + 1];
    hi = static_cast<uint8_t>((hi & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
  }
}

// Random bytes, with a scale drawn from fp16 values of magnitude 2^-14 ..
// 2^4 of either sign, decode bit for bit as ggml's to_float does.
TEST(GgmlOracleTest, RandomBlocksOfTheNewTypesDecodeAsGgmlToFloat) {
  std::mt19937 rng(2929);
  std::uniform_int_distribution<int> byte(0, 255);
  // Exponent field 1..19 (2^-14 .. 2^4), any mantissa and sign.
  std::uniform_int_distribution<int> exponent(1, 19), mantissa(0, 1023);
  for (const NewType& t : kNewTypes) {
    const auto info = GgmlOracle::Shared().Type(t.id);
    ASSERT_TRUE(info.has_value());
    SCOPED_TRACE(info->name);
    const std::optional<DType> ours = DTypeFromGgmlTypeId(t.id);
    ASSERT_TRUE(ours.has_value());
    const int64_t nb = 512;
    std::vector<uint8_t> bytes(nb * info->block_bytes);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
    for (int64_t i = 0; i < nb; ++i) {
      const uint16_t h = static_cast<uint16_t>(
          (byte(rng) & 0x80) << 8 | exponent(rng) << 10 | mantissa(rng));
      uint8_t* block = bytes.data() + i * info->block_bytes;
      if (t.d_offset >= 0) {
        std::memcpy(block + t.d_offset, &h, 2);
      } else {
        PutIq1MScale(block, h);
      }
    }
    auto want = GgmlOracle::Shared().ToFloat(t.id, bytes);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<float> got(want->size());
    ASSERT_TRUE(DecodeElements(*ours, bytes, 0, got.size(), got.data()).ok());
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      differ += std::memcmp(&got[i], &(*want)[i], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "elements not bit-exact to ggml's to_float";
  }
}

}  // namespace
}  // namespace tensormorph
