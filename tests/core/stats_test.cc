// ComputeStats of one group, and the levels it lists: every decoded value of
// the group lands on one of them, across the fixture formats.
#include "core/stats.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::StatusIs;

struct Case {
  const char* fixture;
  const char* tensor;
};

// Decoded values (what ReadSlice returns) and group ids of every element.
void DecodeAll(const LogicalTensor& t, std::vector<float>* values,
               std::vector<int64_t>* groups) {
  values->assign(static_cast<size_t>(t.num_elements), 0);
  ASSERT_TRUE(t.encoding->Decode(0, t.num_elements, values->data()).ok());
  groups->assign(values->size(), -1);
  for (int64_t i = 0; i < t.num_elements; ++i) {
    ScalarInfo s;
    ASSERT_TRUE(t.encoding->Inspect(i, &s).ok());
    (*groups)[i] = s.group;
  }
}

TEST(StatsGroupTest, EveryDecodedValueOfTheGroupIsOneOfItsLevels) {
  const Case cases[] = {
      {"gguf/Q4_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q4_1.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q5_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q5_1.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q8_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q2_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q3_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q4_K.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q5_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q6_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/IQ4_NL.gguf", "blk.0.attn_q.weight"},
      {"gguf/IQ4_XS.gguf", "blk.0.attn_q.weight"},
      {"gguf/MXFP4.gguf", "blk.0.attn_q.weight"},
      {"gguf/NVFP4.gguf", "blk.0.attn_q.weight"},
      {"gguf/TQ1_0.gguf", "blk.0.attn_q.weight"},
      {"safetensors/gptq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/gptq_4bit_g32_actorder",
       "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/awq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/ct_w4a16_group", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/fp8_block_sharded", "model.layers.0.mlp.down_proj.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.fixture) + " " + c.tensor);
    auto ckpt = Checkpoint::Open(Fixture(c.fixture));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr);
    std::vector<float> values;
    std::vector<int64_t> groups;
    DecodeAll(*t, &values, &groups);
    const int64_t last = *std::max_element(groups.begin(), groups.end());
    ASSERT_GE(last, 1);
    for (int64_t g : {int64_t{0}, last / 2, last}) {
      StatsOptions o;
      o.group = g;
      auto st = ComputeStats(*t, nullptr, o);
      ASSERT_TRUE(st.ok()) << st.status();
      ASSERT_FALSE(st->levels.empty()) << "group " << g;
      EXPECT_TRUE(std::is_sorted(st->levels.begin(), st->levels.end()));
      EXPECT_EQ(std::adjacent_find(st->levels.begin(), st->levels.end()),
                st->levels.end())
          << "levels are distinct";
      EXPECT_LE(st->levels.size(), size_t{1} << t->encoding->info().bits);
      int64_t members = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        if (groups[i] != g) continue;
        ++members;
        EXPECT_TRUE(std::binary_search(st->levels.begin(), st->levels.end(),
                                       static_cast<double>(values[i])))
            << "group " << g << " element " << i << " = " << values[i];
      }
      EXPECT_EQ(st->count, members) << "group " << g;
      EXPECT_EQ(st->groups, 1);
      int64_t in_hist = 0;
      for (int64_t h : st->histogram) in_hist += h;
      EXPECT_EQ(in_hist, members - st->nan_count - st->inf_count);
    }
  }
}

TEST(StatsGroupTest, APerTensorScaleListsItsLevelsWithoutAGroup) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/ct_int8_tensor_asym"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  auto st = ComputeStats(*t, nullptr, StatsOptions());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->levels.size(), 256u);
  std::vector<float> values(static_cast<size_t>(t->num_elements));
  ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, values.data()).ok());
  for (float v : values) {
    EXPECT_TRUE(std::binary_search(st->levels.begin(), st->levels.end(),
                                   static_cast<double>(v)))
        << v;
  }
  // Many groups and no group asked: no one set of levels.
  auto q = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(q.ok());
  auto all = ComputeStats(*(*q)->FindTensor("blk.0.attn_q.weight"), nullptr,
                          StatsOptions());
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->levels.empty());
  EXPECT_EQ(all->count, 1024);
}

TEST(StatsGroupTest, RefusesAGroupPastTheLastNegativeOrOfAPlainTensor) {
  auto q = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(q.ok());
  const LogicalTensor* t = (*q)->FindTensor("blk.0.attn_q.weight");
  StatsOptions o;
  o.group = 32;  // 1024 elements in blocks of 32: groups 0..31
  EXPECT_THAT(ComputeStats(*t, nullptr, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "group 32 is past the last group of tensor "
                       "'blk.0.attn_q.weight', which has groups 0..31"));
  // Act-order: the range is found by the pass over the values.
  auto act = Checkpoint::Open(Fixture("safetensors/gptq_4bit_g32_actorder"));
  ASSERT_TRUE(act.ok());
  o.group = 1000;
  EXPECT_THAT(ComputeStats(
                  *(*act)->FindTensor("model.layers.0.self_attn.q_proj.weight"),
                  nullptr, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "group 1000 is past the last group"));
  o.group = -1;
  EXPECT_THAT(ComputeStats(*t, nullptr, o),
              StatusIs(absl::StatusCode::kInvalidArgument, "group -1"));
  auto f = Checkpoint::Open(Fixture("gguf/F32.gguf"));
  ASSERT_TRUE(f.ok());
  o.group = 0;
  EXPECT_THAT(
      ComputeStats(*(*f)->FindTensor("blk.0.attn_q.weight"), nullptr, o),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "has no quantization groups, so it has no group 0"));
  LogicalTensor empty = *t;
  empty.shape = {0, 32};
  empty.num_elements = 0;
  EXPECT_THAT(ComputeStats(empty, nullptr, o),
              StatusIs(absl::StatusCode::kInvalidArgument, "empty"));
}

}  // namespace
}  // namespace tensormorph
