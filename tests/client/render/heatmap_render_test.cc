// The group palette's assignment rule, on hand-made replies and on real
// fixtures served over loopback: neighbouring groups never share a colour.
#include "client/render/heatmap_render.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/loopback_server.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;

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

}  // namespace
}  // namespace tensormorph
