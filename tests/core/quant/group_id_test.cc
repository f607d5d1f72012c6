// One group id for every view: the index of the element's group (the
// elements sharing one scale and offset or zero-point) in row-major order
// of the group grid, dense 0..groups-1. Checked element by element against
// an independent formula per ggml type and convention, through both the
// inspector (ScalarInfo::group) and the bulk path the views use
// (DecodeDetailed, whose ids stats, heatmaps and diffs take).
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph::group_id_test {
namespace {

using ::tensormorph::testing::Fixture;

struct Case {
  std::string label;
  std::string path;
  std::string tensor;
  int64_t groups;
  // The group id of element (r, c) of the [rows, cols] view.
  std::function<int64_t(const Checkpoint&, int64_t r, int64_t c, int64_t cols)>
      id;
};

// ggml [4, 256] fixtures: a group is `elems` consecutive elements.
Case Ggml(const std::string& type, int64_t elems) {
  return {type, "gguf/" + type + ".gguf", "blk.0.attn_q.weight", 1024 / elems,
          [elems](const Checkpoint&, int64_t r, int64_t c, int64_t cols) {
            return (r * cols + c) / elems;
          }};
}

std::vector<Case> Cases() {
  std::vector<Case> v = {
      Ggml("Q4_0", 32),
      Ggml("Q4_1", 32),
      Ggml("Q5_0", 32),
      Ggml("Q5_1", 32),
      Ggml("Q8_0", 32),
      Ggml("IQ4_NL", 32),
      Ggml("MXFP4", 32),
      // Sub-blocks: 8 of 32 per 256-element block...
      Ggml("Q4_K", 32),
      Ggml("Q5_K", 32),
      Ggml("IQ4_XS", 32),
      // ...16 of 16, and NVFP4's 4 of 16 per 64.
      Ggml("Q2_K", 16),
      Ggml("Q3_K", 16),
      Ggml("Q6_K", 16),
      Ggml("NVFP4", 16),
      // One scale per 256.
      Ggml("TQ1_0", 256),
      Ggml("TQ2_0", 256),
  };
  // GPTQ / AWQ / compressed-tensors groups of 32 along in: 2 per row of 64.
  auto group32 = [](const Checkpoint&, int64_t r, int64_t c, int64_t cols) {
    return r * ((cols + 31) / 32) + c / 32;
  };
  const std::string down = "model.layers.0.mlp.down_proj.weight";
  v.push_back({"gptq", "safetensors/gptq_4bit_g32", down, 96 * 2, group32});
  v.push_back({"awq", "safetensors/awq_4bit_g32", down, 96 * 2, group32});
  v.push_back(
      {"ct_group", "safetensors/ct_w4a16_group", down, 48 * 3, group32});
  // Act-order: the group of a column is g_idx[column].
  v.push_back({"gptq_actorder", "safetensors/gptq_4bit_g32_actorder", down,
               96 * 2,
               [](const Checkpoint& ckpt, int64_t r, int64_t c, int64_t cols) {
                 const StoredTensor* g =
                     ckpt.FindStored("model.layers.0.mlp.down_proj.g_idx");
                 int32_t gi;
                 std::memcpy(&gi, g->data.data() + 4 * c, 4);
                 return r * ((cols + 31) / 32) + gi;
               }});
  // Per-channel: the row. Per-tensor: one group.
  v.push_back(
      {"ct_channel", "safetensors/ct_int8_channel", down, 48,
       [](const Checkpoint&, int64_t r, int64_t, int64_t) { return r; }});
  v.push_back({"ct_tensor", "safetensors/ct_int8_tensor_asym", down, 1,
               [](const Checkpoint&, int64_t, int64_t, int64_t) {
                 return int64_t{0};
               }});
  // 128x128 blocks over [200, 300]: a 2x3 grid.
  v.push_back({"fp8_block", "safetensors/fp8_block_sharded", down, 6,
               [](const Checkpoint&, int64_t r, int64_t c, int64_t) {
                 return r / 128 * 3 + c / 128;
               }});
  // Groups of 32 along the last dimension; bitsandbytes' flat blocks of 64.
  v.push_back({"mxfp4", "safetensors/mxfp4_gptoss",
               "model.layers.0.mlp.experts.down_proj", -1,
               [](const Checkpoint&, int64_t r, int64_t c, int64_t cols) {
                 return (r * cols + c) / 32;
               }});
  v.push_back({"bnb_nf4", "safetensors/bnb_nf4",
               "model.layers.0.self_attn.q_proj.weight", 4096 * 2 / 64,
               [](const Checkpoint&, int64_t r, int64_t c, int64_t cols) {
                 return (r * cols + c) / 64;
               }});
  return v;
}

class GroupIdTest : public ::testing::TestWithParam<Case> {};

TEST_P(GroupIdTest, InspectorAndBulkPathNumberGroupsDenselyInRowMajorOrder) {
  const Case& c = GetParam();
  auto ckpt = Checkpoint::Open(Fixture(c.path));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
  ASSERT_NE(t, nullptr) << c.tensor;
  const int64_t n = t->num_elements;
  const int64_t cols = t->shape.back();
  std::vector<ElementQuant> bulk(static_cast<size_t>(n));
  ASSERT_TRUE(t->encoding->DecodeDetailed(0, n, bulk.data()).ok());
  std::set<int64_t> seen;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want = c.id(**ckpt, i / cols, i % cols, cols);
    ScalarInfo s;
    ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
    ASSERT_EQ(s.group, want) << "element " << i;
    ASSERT_EQ(bulk[i].group, want) << "element " << i;
    seen.insert(want);
  }
  const int64_t groups = c.groups > 0 ? c.groups : n / 32;
  EXPECT_EQ(static_cast<int64_t>(seen.size()), groups);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), groups - 1);
}

// GroupIds, the batch the heatmap takes its cells' groups from, is
// Inspect's group of every index, in any order (backwards here, so that an
// implementation cannot lean on consecutive indices).
TEST_P(GroupIdTest, GroupIdsAreInspectsGroupOfEveryIndexInAnyOrder) {
  const Case& c = GetParam();
  auto ckpt = Checkpoint::Open(Fixture(c.path));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
  ASSERT_NE(t, nullptr) << c.tensor;
  const int64_t n = t->num_elements;
  std::vector<int64_t> indices(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) indices[i] = n - 1 - i;
  std::vector<int64_t> ids(indices.size(), -2);
  ASSERT_TRUE(t->encoding->GroupIds(indices, ids.data()).ok());
  for (size_t k = 0; k < indices.size(); ++k) {
    ScalarInfo s;
    ASSERT_TRUE(t->encoding->Inspect(indices[k], &s).ok());
    ASSERT_EQ(ids[k], s.group) << "element " << indices[k];
  }
}

INSTANTIATE_TEST_SUITE_P(GgmlTypesAndConventions, GroupIdTest,
                         ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.label; });

TEST(GroupIdTest, PlainTensorsHaveNoGroups) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/F32.gguf"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ScalarInfo s;
  ASSERT_TRUE((*ckpt)
                  ->FindTensor("blk.0.attn_q.weight")
                  ->encoding->Inspect(5, &s)
                  .ok());
  EXPECT_EQ(s.group, -1);
}

TEST(GroupIdTest, SubBlocksPerBlockMatchTheGranularityTheTypesState) {
  EXPECT_EQ(SubBlocksPerBlock(DType::kQ4_K), 8);
  EXPECT_EQ(SubBlocksPerBlock(DType::kQ5_K), 8);
  EXPECT_EQ(SubBlocksPerBlock(DType::kIQ4_XS), 8);
  EXPECT_EQ(SubBlocksPerBlock(DType::kQ2_K), 16);
  EXPECT_EQ(SubBlocksPerBlock(DType::kQ3_K), 16);
  EXPECT_EQ(SubBlocksPerBlock(DType::kQ6_K), 16);
  EXPECT_EQ(SubBlocksPerBlock(DType::kNVFP4), 4);
  EXPECT_EQ(SubBlocksPerBlock(DType::kQ4_0), 1);
}

// Every ggml fixture type, plain ones included (-1 throughout): GroupIds
// against Inspect on both weight tensors.
TEST(GroupIdTest, GroupIdsMatchInspectOnEveryGgmlFixtureType) {
  for (const char* type :
       {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
        "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4", "NVFP4",
        "TQ1_0", "TQ2_0"}) {
    auto ckpt =
        Checkpoint::Open(Fixture(std::string("gguf/") + type + ".gguf"));
    ASSERT_TRUE(ckpt.ok()) << type << ": " << ckpt.status();
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_down.weight"}) {
      const LogicalTensor* t = (*ckpt)->FindTensor(name);
      ASSERT_NE(t, nullptr) << type << " " << name;
      std::vector<int64_t> indices(static_cast<size_t>(t->num_elements));
      for (size_t i = 0; i < indices.size(); ++i) indices[i] = i;
      std::vector<int64_t> ids(indices.size(), -2);
      ASSERT_TRUE(t->encoding->GroupIds(indices, ids.data()).ok());
      for (size_t i = 0; i < indices.size(); ++i) {
        ScalarInfo s;
        ASSERT_TRUE(t->encoding->Inspect(indices[i], &s).ok());
        ASSERT_EQ(ids[i], s.group) << type << " " << name << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tensormorph::group_id_test
