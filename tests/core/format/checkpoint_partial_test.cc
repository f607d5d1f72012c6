// Opening a sharded checkpoint with some of its shards absent
// (OpenOptions::allow_absent_shards): what one of several servers, each
// holding some shards, serves.
#include <filesystem>
#include <string>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CopyShards;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ShardedCheckpoint;
using ::tensormorph::testing::WriteShardedGptq;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

const OpenOptions kPartial{.allow_absent_shards = true};

const ShardedCheckpoint& Sharded() {
  static const ShardedCheckpoint* c = new ShardedCheckpoint(WriteShardedGptq());
  return *c;
}

std::vector<std::string> TensorNames(const Checkpoint& c) {
  std::vector<std::string> names;
  for (const LogicalTensor& t : c.tensors()) names.push_back(t.name);
  return names;
}

TEST(CheckpointPartialTest, AbsentShardIsListedWithItsTensorCount) {
  const std::string dir = MakeTempDir() + "/m";
  CopyShards(Sharded(), {Sharded().shards[0], Sharded().shards[2]}, dir);
  auto ckpt = Checkpoint::Open(dir, kPartial);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ((*ckpt)->files().size(), 2u);
  EXPECT_EQ((*ckpt)->files()[0].path, dir + "/" + Sharded().shards[0]);
  ASSERT_EQ((*ckpt)->absent_files().size(), 1u);
  // Spelled as files() would spell it; q_proj's 4 parts and the norm.
  EXPECT_EQ((*ckpt)->absent_files()[0].path, dir + "/" + Sharded().shards[1]);
  EXPECT_EQ((*ckpt)->absent_files()[0].tensor_count, 5);
  // The tensors of the shards present, GPTQ's down_proj resolved whole.
  EXPECT_THAT(
      TensorNames(**ckpt),
      ElementsAre("lm_head.weight", "model.embed_tokens.weight",
                  "model.layers.0.mlp.down_proj.weight", "model.norm.weight"));
  EXPECT_EQ((*ckpt)->conventions(), std::vector<std::string>{"gptq"});
}

TEST(CheckpointPartialTest, TensorInAnAbsentShardIsNotServedAndNamesIt) {
  const std::string dir = MakeTempDir() + "/m";
  CopyShards(Sharded(), {Sharded().shards[0]}, dir);
  auto ckpt = Checkpoint::Open(dir, kPartial);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->Lookup("lm_head.weight", false), nullptr);
  const Checkpoint::AbsentFile* f = (*ckpt)->AbsentFileFor("lm_head.weight");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->path, dir + "/" + Sharded().shards[2]);
  // A logical tensor built from absent stored tensors: named by its module.
  f = (*ckpt)->AbsentFileFor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->path, dir + "/" + Sharded().shards[1]);
  // Served tensors and unknown names concern no absent shard.
  EXPECT_EQ((*ckpt)->AbsentFileFor("model.embed_tokens.weight"), nullptr);
  EXPECT_EQ((*ckpt)->AbsentFileFor("no.such.tensor"), nullptr);
}

// fp8_block_sharded stores down_proj.weight in shard 1 and its
// weight_scale_inv in shard 2: without shard 2 the FP8 tensor must not be
// served as if it had no scale. Its codes stay readable as a stored part.
TEST(CheckpointPartialTest, TensorWithACompanionInAnAbsentShardIsNotServed) {
  const std::string dir = MakeTempDir();
  for (const char* name : {"config.json", "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors"}) {
    fs::copy_file(Fixture(std::string("safetensors/fp8_block_sharded/") + name),
                  dir + "/" + name);
  }
  auto ckpt = Checkpoint::Open(dir, kPartial);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string w = "model.layers.0.mlp.down_proj.weight";
  EXPECT_EQ((*ckpt)->FindTensor(w), nullptr);
  EXPECT_TRUE((*ckpt)->tensors().empty());
  const Checkpoint::AbsentFile* f = (*ckpt)->AbsentFileFor(w);
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->path, HasSubstr("model-00002-of-00002.safetensors"));
  const LogicalTensor* part = (*ckpt)->FindPart(w);
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(part->encoding->info().scheme, "F8_E4M3");
  // Read as a tensor, the withheld weight is absent: its stored part of the
  // same name holds FP8 codes without their scale (values ~300x too large
  // when it once fell back to them). Only the part lookup finds it.
  EXPECT_EQ((*ckpt)->Lookup(w, /*part=*/false), nullptr);
  EXPECT_EQ((*ckpt)->Lookup(w, /*part=*/true), part);
}

TEST(CheckpointPartialTest, EveryShardAbsentIsNotFoundNamingTheIndex) {
  const std::string dir = MakeTempDir() + "/m";
  CopyShards(Sharded(), {}, dir);
  const absl::Status s = Checkpoint::Open(dir, kPartial).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kNotFound),
                       MessageNames(dir + "/model.safetensors.index.json"),
                       MessageNames("3 shard files")));
}

TEST(CheckpointPartialTest, WithoutTheOptionAnAbsentShardIsStillDataLoss) {
  const std::string dir = MakeTempDir() + "/m";
  CopyShards(Sharded(), {Sharded().shards[0], Sharded().shards[2]}, dir);
  const absl::Status s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s,
              AllOf(HasReason(ErrorReason::kIndexInvalid),
                    HasMetadata("file", dir + "/model.safetensors.index.json"),
                    HasMetadata("rule", "shard-missing"),
                    MessageNames(Sharded().shards[1])));
}

TEST(CheckpointPartialTest, APresentShardThatDisagreesWithTheIndexIsDataLoss) {
  const std::string dir = MakeTempDir() + "/m";
  CopyShards(Sharded(), {Sharded().shards[0], Sharded().shards[2]}, dir);
  // Shard 3 in shard 1's place: its tensors are not where the index says.
  fs::copy_file(dir + "/" + Sharded().shards[2],
                dir + "/" + Sharded().shards[0],
                fs::copy_options::overwrite_existing);
  const absl::Status s = Checkpoint::Open(dir, kPartial).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kIndexInvalid),
                       HasMetadata("rule", "shard-tensor-unindexed"),
                       MessageNames(Sharded().shards[0])));
}

TEST(CheckpointPartialTest, WholeCheckpointOpensAsWithoutTheOption) {
  auto partial = Checkpoint::Open(Sharded().dir, kPartial);
  auto full = Checkpoint::Open(Sharded().dir);
  ASSERT_TRUE(partial.ok()) << partial.status();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE((*partial)->absent_files().empty());
  EXPECT_EQ(TensorNames(**partial), TensorNames(**full));
  EXPECT_EQ((*partial)->parts().size(), (*full)->parts().size());
}

}  // namespace
}  // namespace tensormorph
