// Statistics, heatmaps and the architecture overlay against independent
// computations over the fixtures and the demo model.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/architecture.h"
#include "core/compat.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "core/quant/float_formats.h"
#include "core/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadF32File;

TEST(StatsTest, Q4_0LevelUsageAndEndLevelsMatchACountOverTheRawCodes) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const StoredTensor* st = (*ckpt)->FindStored("blk.0.attn_q.weight");
  // Independent: walk the 18-byte blocks by hand.
  std::vector<int64_t> codes(16, 0);
  int64_t low = 0, high = 0, groups_at_end_level = 0;
  for (int64_t b = 0; b < 32; ++b) {
    const uint8_t* p = st->data.data() + b * 18;
    uint16_t dh;
    std::memcpy(&dh, p, 2);
    const float d = F16ToF32(dh);
    bool saturated = false;
    for (int i = 0; i < 32; ++i) {
      const int c = i < 16 ? (p[2 + i] & 0xF) : (p[2 + i - 16] >> 4);
      ++codes[c];
      // The lowest level is code 0 (-8d) when d > 0, code 15 (7d) when d < 0.
      const bool at_low = d > 0 ? c == 0 : (d < 0 ? c == 15 : true);
      const bool at_high = d > 0 ? c == 15 : (d < 0 ? c == 0 : true);
      low += at_low;
      high += at_high && !at_low;
      saturated |= at_low || at_high;
    }
    groups_at_end_level += saturated;
  }
  auto stats = ComputeStats(*(*ckpt)->FindTensor("blk.0.attn_q.weight"),
                            nullptr, StatsOptions());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->has_levels);
  EXPECT_EQ(stats->code_histogram, codes);
  EXPECT_EQ(stats->levels_used, 16);
  EXPECT_EQ(stats->at_lowest_level, low);
  EXPECT_EQ(stats->at_highest_level, high);
  EXPECT_EQ(stats->groups, 32);
  EXPECT_EQ(stats->groups_at_end_level, groups_at_end_level);
  int64_t sum = 0;
  for (int64_t c : stats->histogram) sum += c;
  EXPECT_EQ(sum, 1024);
}

TEST(StatsTest, MomentsAndZerosWithAReference) {
  auto q = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  auto ref = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(q.ok() && ref.ok());
  const auto deq =
      ReadF32File(Fixture("gguf/Q4_K.blk.0.ffn_down.weight.deq.f32"));
  const auto src = ReadF32File(Fixture("gguf/src_b.f32"));
  double sum = 0, lo = 1e9, hi = -1e9;
  int64_t zeros = 0, pruned = 0, induced = 0;
  for (size_t i = 0; i < deq.size(); ++i) {
    sum += deq[i];
    lo = std::min<double>(lo, deq[i]);
    hi = std::max<double>(hi, deq[i]);
    if (deq[i] == 0) {
      ++zeros;
      (src[i] == 0 ? pruned : induced)++;
    }
  }
  StatsOptions o;
  o.bins = 10;
  auto s = ComputeStats(*(*q)->FindTensor("blk.0.ffn_down.weight"),
                        (*ref)->FindTensor("blk.0.ffn_down.weight"), o);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->mean, sum / deq.size(), 1e-12);
  EXPECT_EQ(s->min, lo);
  EXPECT_EQ(s->max, hi);
  EXPECT_EQ(s->zeros, zeros);
  EXPECT_EQ(s->pruned_zeros, pruned);
  EXPECT_EQ(s->induced_zeros, induced);
  EXPECT_EQ(s->histogram.size(), 10u);
}

TEST(HeatmapTest, CellValuesAreADirectReductionOfTheDecodedTensor) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  const auto want =
      ReadF32File(Fixture("gguf/Q4_K.blk.0.attn_q.weight.deq.f32"));
  for (HeatmapMode mode : {HeatmapMode::kMean, HeatmapMode::kAbsmax}) {
    HeatmapOptions o;
    o.width = 16;
    o.height = 2;
    o.mode = mode;
    auto h = ComputeHeatmap(*t, nullptr, o);
    ASSERT_TRUE(h.ok());
    ASSERT_EQ(h->values.size(), 32u);
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 16; ++j) {
        double acc = mode == HeatmapMode::kMean ? 0 : -1;
        for (int r = 2 * i; r < 2 * i + 2; ++r) {
          for (int c = 16 * j; c < 16 * j + 16; ++c) {
            const double v = want[r * 256 + c];
            acc = mode == HeatmapMode::kMean ? acc + v
                                             : std::max(acc, std::fabs(v));
          }
        }
        if (mode == HeatmapMode::kMean) acc /= 32;
        EXPECT_NEAR(h->values[i * 16 + j], acc, 1e-12) << i << "," << j;
      }
    }
  }
}

TEST(HeatmapTest, GroupBoundariesFallExactlyOnGroupEdges) {
  // compressed-tensors int4, group 32 along in: every row its own groups.
  auto ct = Checkpoint::Open(Fixture("safetensors/ct_w4a16_group"));
  ASSERT_TRUE(ct.ok());
  HeatmapOptions o;
  o.width = 128;
  o.height = 64;
  o.mode = HeatmapMode::kGroup;
  auto h = ComputeHeatmap(
      *(*ct)->FindTensor("model.layers.0.self_attn.q_proj.weight"), nullptr, o);
  ASSERT_TRUE(h.ok());
  const auto b = GroupBoundaries(*h);
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 128; ++j) {
      const bool right = (b[i * 128 + j] & 1) != 0,
                 below = (b[i * 128 + j] & 2) != 0;
      EXPECT_EQ(right, j % 32 == 31 && j != 127) << i << "," << j;
      EXPECT_EQ(below, i != 63) << i << "," << j;
    }
  }
  // Q4_K at full resolution: a line every 32 columns (sub-blocks), none
  // between rows inside... every row is its own block of 256.
  auto q = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  o.width = 256;
  o.height = 4;
  auto k = ComputeHeatmap(*(*q)->FindTensor("blk.0.attn_q.weight"), nullptr, o);
  ASSERT_TRUE(k.ok());
  const auto kb = GroupBoundaries(*k);
  for (int j = 0; j < 255; ++j) EXPECT_EQ((kb[j] & 1) != 0, j % 32 == 31) << j;
}

TEST(ArchitectureTest, Q4KMMixMarksExactlyTheExpectedBoundaries) {
  const std::string dir = MakeTempDir();
  ASSERT_TRUE(::tensormorph::testing::WriteDemoCheckpoints(dir));
  auto ckpt = Checkpoint::Open(dir + "/model-q4_k_m.gguf");
  ASSERT_TRUE(ckpt.ok());
  const ArchNode root = BuildArchitecture(**ckpt);
  EXPECT_EQ(root.scheme, "Q4_K");
  std::vector<std::string> marked;
  std::function<void(const ArchNode&)> walk = [&](const ArchNode& n) {
    if (n.boundary) marked.push_back(n.path);
    for (const ArchNode& c : n.children) walk(c);
  };
  walk(root);
  std::sort(marked.begin(), marked.end());
  EXPECT_EQ(marked,
            (std::vector<std::string>{
                "blk.0.attn_norm", "blk.0.attn_v", "blk.0.ffn_down",
                "blk.0.ffn_norm", "blk.1.attn_norm", "blk.1.attn_v",
                "blk.1.ffn_down", "blk.1.ffn_norm", "output", "output_norm"}));
}

TEST(ArchitectureTest, CompressedTensorsMarksTheNormAndTheIgnoredLmHead) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/ct_int8_channel"));
  ASSERT_TRUE(ckpt.ok());
  const ArchNode root = BuildArchitecture(**ckpt);
  std::vector<std::string> marked;
  std::function<void(const ArchNode&)> walk = [&](const ArchNode& n) {
    if (n.boundary) marked.push_back(n.path);
    for (const ArchNode& c : n.children) walk(c);
  };
  walk(root);
  std::sort(marked.begin(), marked.end());
  EXPECT_EQ(marked, (std::vector<std::string>{
                        "lm_head", "model.layers.0.input_layernorm"}));
}

TEST(CompatTest, EveryQuantizedEncodingGetsEveryBackendWithASourceOrNotKnown) {
  EncodingInfo gptq;
  gptq.convention = "gptq";
  gptq.quantized = true;
  const auto rows = BackendSupportFor(gptq);
  ASSERT_EQ(rows.size(), 9u);
  for (const auto& r : rows) {
    if (r.status == "not known") {
      EXPECT_TRUE(r.source.empty());
    } else {
      EXPECT_FALSE(r.source.empty()) << r.backend;
    }
  }
  EncodingInfo plain;
  EXPECT_TRUE(BackendSupportFor(plain).empty());
}

TEST(CompatTest, HqqLoadsInVllmOnlyAsFourBitGroupsOf64) {
  EncodingInfo hqq;
  hqq.convention = "hqq";
  hqq.quantized = true;
  for (const BackendSupport& r : BackendSupportFor(hqq)) {
    if (r.backend != "vLLM") {
      EXPECT_EQ(r.status, "not known") << r.backend;
      continue;
    }
    EXPECT_EQ(r.status, "supported");
    EXPECT_THAT(r.notes, ::testing::HasSubstr("4-bit, groups of 64"));
    EXPECT_THAT(r.source, ::testing::HasSubstr("hqq_marlin.py"));
  }
}

}  // namespace
}  // namespace tensormorph
