// tensormorphd --partial-shards: a server holding some of a checkpoint's
// shards serves those and says which it lacks.
#include <string>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::CopyShards;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::ShardedCheckpoint;
using ::tensormorph::testing::StatusIs;
using ::tensormorph::testing::WriteShardedGptq;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A root whose checkpoint "m" holds shards 1 and 3 of the three.
std::string PartialRoot(const ShardedCheckpoint& c) {
  const std::string root = MakeTempDir();
  CopyShards(c, {c.shards[0], c.shards[2]}, root + "/m");
  return root;
}

TEST(PartialShardsTest, GetCheckpointListsTheAbsentShardFiles) {
  const ShardedCheckpoint c = WriteShardedGptq();
  ServerProcess server({PartialRoot(c)}, {"--partial-shards"});
  auto client = Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto info = (*client)->GetCheckpoint("m");
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->files_size(), 2);
  EXPECT_EQ(info->files(0).path(), c.shards[0]);
  EXPECT_EQ(info->files(1).path(), c.shards[2]);
  EXPECT_THAT(info->absent_files(), ElementsAre(c.shards[1]));
  EXPECT_EQ(info->tensor_count(), 4);
}

TEST(PartialShardsTest, ATensorInAnAbsentShardIsNotFoundNamingTheShard) {
  const ShardedCheckpoint c = WriteShardedGptq();
  ServerProcess server({PartialRoot(c)}, {"--partial-shards"});
  auto client = Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_THAT(
      (*client)->GetTensor("m", "model.layers.0.input_layernorm.weight"),
      StatusIs(absl::StatusCode::kNotFound,
               "is in shard '" + c.shards[1] +
                   "', which this server does not hold (partial"));
  // A logical tensor whose stored tensors are there.
  v1::ReadSliceRequest req;
  req.set_checkpoint("m");
  req.set_tensor("model.layers.0.self_attn.q_proj.weight");
  EXPECT_THAT((*client)->ReadSliceAll(req),
              StatusIs(absl::StatusCode::kNotFound, c.shards[1]));
  req.set_tensor("model.layers.0.mlp.down_proj.weight");
  EXPECT_TRUE((*client)->ReadSliceAll(req).ok());
}

// A check of the shards one server holds would call "clean" tensors it
// never saw: it is refused, naming what is missing.
TEST(PartialShardsTest, ACheckNeedsEveryShard) {
  const ShardedCheckpoint c = WriteShardedGptq();
  ServerProcess server({PartialRoot(c)}, {"--partial-shards"});
  auto client = Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  v1::CheckCheckpointRequest req;
  req.set_checkpoint("m");
  int events = 0;
  EXPECT_THAT((*client)->CheckCheckpoint(req,
                                         [&](const v1::CheckEvent&) {
                                           ++events;
                                           return true;
                                         }),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "needs every shard, and this server (--partial-shards) "
                       "lacks 1: '" +
                           c.shards[1] + "'"));
  EXPECT_EQ(events, 0);
}

TEST(PartialShardsTest, InfoShowsTheAbsentFiles) {
  const ShardedCheckpoint c = WriteShardedGptq();
  ServerProcess server({PartialRoot(c)}, {"--partial-shards"});
  const CommandResult r =
      RunCommand({CliPath(), "--server", server.address(), "info", "m"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("absent files (not on this server)\n  " +
                               c.shards[1] + "\n"));
}

TEST(PartialShardsTest, WithoutTheFlagAnAbsentShardIsDataLoss) {
  const ShardedCheckpoint c = WriteShardedGptq();
  ServerProcess server({PartialRoot(c)});
  auto client = Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_THAT((*client)->GetCheckpoint("m"),
              StatusIs(absl::StatusCode::kDataLoss, "does not exist"));
}

}  // namespace
}  // namespace tensormorph
