// Encoding::AffineCodeRuns: the codes, runs and per-run scale and bias of
// conventions' integer codes give Decode's values bit for bit and
// DecodeRuns' runs exactly, on every fixture whose values are of that form;
// the others (codebooks, FP8, act-order groups) answer UNIMPLEMENTED.
#include <cstring>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

void ExpectSameAsDecodeRuns(const LogicalTensor& t, int64_t first,
                            int64_t count) {
  SCOPED_TRACE(t.name + " from " + std::to_string(first));
  Encoding::AffineCodes codes;
  ASSERT_TRUE(t.encoding->AffineCodeRuns(first, count, &codes).ok());
  std::vector<float> values(static_cast<size_t>(count));
  std::vector<QuantRun> runs;
  ASSERT_TRUE(t.encoding->DecodeRuns(first, count, values.data(), &runs).ok());
  ASSERT_EQ(codes.codes.size(), static_cast<size_t>(count));
  ASSERT_EQ(codes.runs.size(), runs.size());
  ASSERT_EQ(codes.scale.size(), runs.size());
  ASSERT_EQ(codes.bias.size(), runs.size());
  int64_t at = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const QuantRun& a = codes.runs[k];
    const QuantRun& b = runs[k];
    EXPECT_EQ(a.count, b.count) << k;
    EXPECT_EQ(a.group, b.group) << k;
    EXPECT_EQ(a.step_below, b.step_below) << k;
    EXPECT_EQ(a.step_above, b.step_above) << k;
    EXPECT_EQ(a.range_min, b.range_min) << k;
    EXPECT_EQ(a.range_max, b.range_max) << k;
    for (int64_t i = at; i < at + a.count; ++i) {
      const float v =
          codes.scale[k] *
          static_cast<float>(static_cast<int32_t>(codes.codes[i] ^ codes.flip) -
                             codes.bias[k]);
      ASSERT_EQ(std::memcmp(&v, &values[i], 4), 0)
          << "element " << i << ": " << v << " vs " << values[i];
    }
    at += a.count;
  }
  EXPECT_EQ(at, count);
}

TEST(AffineCodeRunsTest, GivesDecodeRunsAndDecodeExactlyOnIntegerConventions) {
  for (const char* name : {"gptq_4bit_g32", "awq_4bit_g32", "ct_int8_channel",
                           "ct_int8_tensor_asym", "ct_w4a16_group"}) {
    SCOPED_TRACE(name);
    auto ckpt =
        Checkpoint::Open(testing::Fixture(std::string("safetensors/") + name));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    int checked = 0;
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      if (!t.encoding->info().quantized) continue;
      const int64_t n = t.num_elements;
      const int64_t cols = t.shape.back();
      ExpectSameAsDecodeRuns(t, 0, n);
      // Partial rows at both ends.
      if (n > 2 * cols) ExpectSameAsDecodeRuns(t, cols / 2 + 1, n - cols - 3);
      ++checked;
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(AffineCodeRunsTest, OtherEncodingsAnswerUnimplemented) {
  for (const char* name : {"gptq_4bit_g32_actorder", "bnb_nf4",
                           "fp8_block_sharded", "mxfp4_gptoss"}) {
    SCOPED_TRACE(name);
    auto ckpt =
        Checkpoint::Open(testing::Fixture(std::string("safetensors/") + name));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      if (!t.encoding->info().quantized) continue;
      Encoding::AffineCodes codes;
      EXPECT_EQ(t.encoding->AffineCodeRuns(0, t.num_elements, &codes).code(),
                absl::StatusCode::kUnimplemented)
          << t.name;
    }
  }
  auto gguf = Checkpoint::Open(testing::Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(gguf.ok());
  for (const LogicalTensor& t : (*gguf)->tensors()) {
    Encoding::AffineCodes codes;
    EXPECT_EQ(t.encoding->AffineCodeRuns(0, t.num_elements, &codes).code(),
              absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace tensormorph
