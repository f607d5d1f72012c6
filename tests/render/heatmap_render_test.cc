// The group palette's assignment rule, on hand-made replies and on real
// fixtures served over loopback: neighbouring groups never share a colour.
// Values that are not finite: a colour of their own or an end of the ramp,
// and a legend that counts them.
#include "render/heatmap_render.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/loopback_server.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::testing::HasSubstr;
using ::testing::Not;

v1::GetHeatmapResponse Grid(int width, int height,
                            const std::vector<int64_t>& groups) {
  v1::GetHeatmapResponse h;
  h.set_width(width);
  h.set_height(height);
  for (int64_t g : groups) {
    h.add_groups(g);
    h.add_values(static_cast<double>(g));
  }
  return h;
}

TEST(GroupColourIndicesTest, FollowsTheRuleTheWebPageFollows) {
  // Row 0: groups 0, 1 take their own index (id mod 10). Row 1: group 10
  // starts at 0, which its upper neighbour (group 0) has: it takes 1; group
  // 11 starts at 1, taken by its left (10) and upper (1) neighbours: 2.
  EXPECT_EQ(GroupColourIndices(Grid(2, 2, {0, 1, 10, 11})),
            (std::vector<int>{0, 1, 1, 2}));
  // A group keeps its colour; neighbours of the same group do not count;
  // -1 is grey (-1), and ids past 9 wrap.
  EXPECT_EQ(GroupColourIndices(Grid(3, 2, {5, 5, -1, 5, 15, 29})),
            (std::vector<int>{5, 5, -1, 5, 6, 9}));
  EXPECT_EQ(GroupColourIndices(Grid(0, 0, {})), std::vector<int>());
  EXPECT_EQ(kGroupPalette[0], (Rgb{0x4e, 0x79, 0xa7}));
  EXPECT_EQ(kGroupPalette[9], (Rgb{0xba, 0xb0, 0xac}));
}

void ExpectNeighboursApart(const v1::GetHeatmapResponse& h) {
  const std::vector<int> c = GroupColourIndices(h);
  ASSERT_EQ(c.size(), static_cast<size_t>(h.groups_size()));
  const int w = h.width();
  for (int i = 0; i < h.height(); ++i) {
    for (int j = 0; j < w; ++j) {
      const int k = i * w + j;
      ASSERT_GE(c[k], h.groups(k) < 0 ? -1 : 0);
      ASSERT_LT(c[k], 10);
      if (j + 1 < w && h.groups(k + 1) != h.groups(k)) {
        EXPECT_NE(c[k], c[k + 1]) << "cells " << i << "," << j << " right";
      }
      if (i + 1 < h.height() && h.groups(k + w) != h.groups(k)) {
        EXPECT_NE(c[k], c[k + w]) << "cells " << i << "," << j << " below";
      }
    }
  }
}

TEST(GroupColourIndicesTest, NeighbouringGroupsDifferOnRealFixtures) {
  auto loopback = testing::StartLoopbackServer({FixturesDir()});
  struct Case {
    std::string checkpoint, tensor;
  };
  const Case cases[] = {
      {"safetensors/ct_w4a16_group", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/gptq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/awq_4bit_g32", "model.layers.0.mlp.down_proj.weight"},
      {"safetensors/fp8_block_sharded", "model.layers.0.mlp.down_proj.weight"},
      {"gguf/Q4_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q6_K.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q4_0.gguf", "blk.0.attn_q.weight"},
  };
  for (const Case& c : cases) {
    for (auto [w, h] :
         {std::pair{512, 512}, std::pair{64, 16}, std::pair{37, 3}}) {
      SCOPED_TRACE(c.checkpoint + " " + std::to_string(w) + "x" +
                   std::to_string(h));
      v1::GetHeatmapRequest req;
      req.set_checkpoint(Fixture(c.checkpoint));
      req.set_tensor(c.tensor);
      req.set_mode(v1::HEATMAP_MODE_GROUP);
      req.set_width(w);
      req.set_height(h);
      auto reply = loopback.client->GetHeatmap(req);
      ASSERT_TRUE(reply.ok()) << reply.status();
      ExpectNeighboursApart(*reply);
    }
  }
  // A plain tensor: every cell grey.
  v1::GetHeatmapRequest plain;
  plain.set_checkpoint(Fixture("gguf/F32.gguf"));
  plain.set_tensor("blk.0.attn_q.weight");
  plain.set_mode(v1::HEATMAP_MODE_GROUP);
  auto reply = loopback.client->GetHeatmap(plain);
  ASSERT_TRUE(reply.ok()) << reply.status();
  for (int c : GroupColourIndices(*reply)) EXPECT_EQ(c, -1);
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A row of cells with these values (no groups), min and max as given.
v1::GetHeatmapResponse Row(const std::vector<double>& values, double min,
                           double max) {
  v1::GetHeatmapResponse h;
  h.set_width(static_cast<int>(values.size()));
  h.set_height(1);
  for (double v : values) {
    h.add_values(v);
    h.add_groups(-1);
  }
  h.set_min(min);
  h.set_max(max);
  return h;
}

TEST(HeatmapValueColourTest, FiniteOnTheRampInfAtItsEndsNaNMagenta) {
  const v1::GetHeatmapResponse h =
      Row({-1, 0, 3, kInf, -kInf, kNaN}, /*min=*/-1, /*max=*/3);
  EXPECT_EQ(ValueColour(h, 0), Viridis(0));
  EXPECT_EQ(ValueColour(h, 1), Viridis(0.25));
  EXPECT_EQ(ValueColour(h, 2), Viridis(1));
  EXPECT_EQ(ValueColour(h, 3), Viridis(1));
  EXPECT_EQ(ValueColour(h, 4), Viridis(0));
  EXPECT_EQ(ValueColour(h, 5), (Rgb{0xff, 0x00, 0xff}));
  EXPECT_EQ(kNaNColour, (Rgb{0xff, 0x00, 0xff}));
  // One finite value: mid-ramp, the infinities still at the ends.
  const v1::GetHeatmapResponse flat = Row({2, kInf, -kInf}, 2, 2);
  EXPECT_EQ(ValueColour(flat, 0), Viridis(0.5));
  EXPECT_EQ(ValueColour(flat, 1), Viridis(1));
  EXPECT_EQ(ValueColour(flat, 2), Viridis(0));
}

TEST(HeatmapValueColourTest, TheLegendCountsCellsThatAreNotFinite) {
  EXPECT_EQ(NonFiniteLegend(Row({1, kNaN, kInf, kInf, -kInf}, 1, 1),
                            HeatmapStyle::kValues),
            "4 cells not finite: 1 NaN (magenta), 2 +inf (top colour), "
            "1 -inf (bottom colour)");
  EXPECT_EQ(NonFiniteLegend(Row({1, -kInf}, 1, 1), HeatmapStyle::kValues),
            "1 cell not finite: 1 -inf (bottom colour)");
  EXPECT_EQ(NonFiniteLegend(Row({1, 2}, 1, 2), HeatmapStyle::kValues), "");
  EXPECT_EQ(NonFiniteLegend(Row({kNaN}, 0, 0), HeatmapStyle::kGroups), "");

  const std::string term = RenderHeatmapTerminal(Row({1, kNaN, 2}, 1, 2), "t",
                                                 HeatmapStyle::kValues);
  EXPECT_THAT(term, HasSubstr("min 1  max 2\n1 cell not finite: 1 NaN"));
  EXPECT_THAT(term, HasSubstr("\x1b[38;2;255;0;255m"));  // the NaN cell
  EXPECT_THAT(
      RenderHeatmapTerminal(Row({1, 2}, 1, 2), "t", HeatmapStyle::kValues),
      Not(HasSubstr("not finite")));
}

// f16_special ([0, -0, 1, -2.5, 65504, two subnormals, +inf, -inf, NaN])
// served over loopback, one cell per element: each cell in its own colour
// (they were all one colour when min and max were -inf and NaN), and the
// legend under the cells, after a NaN swatch.
TEST(HeatmapValueColourTest, APngOfSpecialsShowsEachKindAndSaysHowMany) {
  auto loopback = testing::StartLoopbackServer({FixturesDir()});
  for (v1::HeatmapMode mode :
       {v1::HEATMAP_MODE_MEAN, v1::HEATMAP_MODE_ABSMAX}) {
    SCOPED_TRACE(v1::HeatmapMode_Name(mode));
    v1::GetHeatmapRequest req;
    req.set_checkpoint(Fixture("safetensors/plain"));
    req.set_tensor("f16_special");
    req.set_mode(mode);
    auto h = loopback.client->GetHeatmap(req);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(h->width(), 10);
    EXPECT_TRUE(std::isfinite(h->min()) && std::isfinite(h->max()));
    EXPECT_EQ(h->max(), 65504);
    const Image img = RenderHeatmap(*h, "t", StyleFor(mode));
    const HeatmapLayout l = LayoutFor(*h);
    auto cell = [&](int j) { return img.Get(l.x0 + j * l.cell + 1, l.y0 + 1); };
    const bool mean = mode == v1::HEATMAP_MODE_MEAN;
    EXPECT_EQ(cell(3), Viridis(0)) << "-2.5 or 2.5";
    EXPECT_EQ(cell(4), Viridis(1)) << "65504";
    EXPECT_EQ(cell(7), Viridis(1)) << "+inf";
    EXPECT_EQ(cell(8), mean ? Viridis(0) : Viridis(1)) << "-inf";
    EXPECT_EQ(cell(9), kNaNColour) << "NaN";
    std::set<Rgb> colours;
    for (int j = 0; j < 10; ++j) colours.insert(cell(j));
    EXPECT_GE(colours.size(), 3u);
    // The legend's row: the swatch, under the colour bar (64 pixels tall).
    const int legend_y = l.y0 + std::max(l.cell, 64) + 4;
    EXPECT_EQ(img.height(), legend_y + 12);
    EXPECT_EQ(img.Get(l.x0 + 3, legend_y + 3), kNaNColour);
    EXPECT_GE(
        img.width(),
        l.x0 + 10 + Image::TextWidth(NonFiniteLegend(*h, StyleFor(mode))));
  }
}

}  // namespace
}  // namespace tensormorph
