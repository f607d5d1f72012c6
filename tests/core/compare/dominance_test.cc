// Dominance marks the quantizations no one should pick; the llama.cpp mix
// helpers give patterns that match one tensor only and the file size
// llama.cpp writes.
#include "core/compare/dominance.h"

#include <cmath>
#include <regex>
#include <vector>

#include "core/compare/bits_per_weight.h"
#include "core/compare/llama_mix.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(DominanceTest, MarksWhatAnotherBeatsInOneAndMatchesInTheOther) {
  const std::vector<SizeError> points = {
      {100, 5.0},  // 0: the frontier's small end
      {200, 1.0},  // 1: the frontier's good end
      {200, 2.0},  // 2: as large as 1, worse: dominated by 1
      {150, 5.0},  // 3: larger than 0, as bad: dominated by 0
      {300, 9.0},  // 4: beaten by all
      {100, 5.0},  // 5: equal to 0: neither dominates the other
  };
  const auto by = DominatedBy(points);
  EXPECT_THAT(by[0], IsEmpty());
  EXPECT_THAT(by[1], IsEmpty());
  EXPECT_THAT(by[2], ElementsAre(1));
  EXPECT_THAT(by[3], ElementsAre(0, 5));
  EXPECT_THAT(by[4], ElementsAre(0, 1, 2, 3, 5));
  EXPECT_THAT(by[5], IsEmpty());
}

TEST(DominanceTest, UnknownErrorsAreNeverCompared) {
  const auto by = DominatedBy({{100, NAN}, {50, 1.0}, {60, 2.0}});
  EXPECT_THAT(by[0], IsEmpty());
  EXPECT_THAT(by[1], IsEmpty());
  EXPECT_THAT(by[2], ElementsAre(1));
}

TEST(DominanceTest, LayersOfLlamaAndHuggingFaceNames) {
  EXPECT_EQ(LayerOf("blk.0.attn_q.weight"), "blk.0");
  EXPECT_EQ(LayerOf("blk.17.ffn_down.weight"), "blk.17");
  EXPECT_EQ(LayerOf("model.layers.3.mlp.up_proj.weight"), "layers.3");
  EXPECT_EQ(LayerOf("token_embd.weight"), "");
  EXPECT_EQ(LayerOf("output_norm.weight"), "");
  EXPECT_EQ(LayerOf("myblk.3.weight"), "");
  EXPECT_EQ(LayerOf("blk.x.weight"), "");
}

TEST(LlamaMixTest, PatternsMatchTheirTensorOnly) {
  const std::regex one(LlamaTensorPattern("blk.1.attn_q.weight"));
  EXPECT_TRUE(std::regex_search("blk.1.attn_q.weight", one));
  EXPECT_FALSE(std::regex_search("blk.11.attn_q.weight", one));
  EXPECT_FALSE(std::regex_search("blk.1.attn_q.weight.bias", one));
  EXPECT_FALSE(std::regex_search("blkx1.attn_q.weight", one));
  const std::string odd = "a+b(c)[d]{e}|f?*^$\\g";
  EXPECT_TRUE(std::regex_search(odd, std::regex(LlamaTensorPattern(odd))));
  EXPECT_EQ(LlamaTensorTypeOverride("blk.0.ffn_up.weight", "Q6_K"),
            "^blk\\.0\\.ffn_up\\.weight$=Q6_K");
}

TEST(LlamaMixTest, FileSizeIsTheHeaderAndEachTensorPadded) {
  auto size = PredictGgufFileSize(4096, 32, {1, 32, 33, 0});
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, 4096 + 32 + 32 + 64 + 0);
  EXPECT_THAT(PredictGgufFileSize(4096, 24, {1}).status(),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(PredictGgufFileSize(INT64_MAX - 8, 32, {1}).status(),
              HasReason(ErrorReason::kOutOfRange));
}

TEST(BitsPerWeightTest, BytesTimesEightOverElements) {
  // Q4_K: 144 bytes per 256 weights.
  EXPECT_EQ(BitsPerWeight(144, 256), 4.5);
  EXPECT_EQ(BitsPerWeight(34, 32), 8.5);  // Q8_0
  EXPECT_EQ(BitsPerWeight(10, 0), 0);
}

}  // namespace
}  // namespace tensormorph
