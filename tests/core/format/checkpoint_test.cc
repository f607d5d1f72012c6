// Opening checkpoints: single files by magic, sharded safetensors through
// their index, directories, and split GGUF.
#include "core/format/checkpoint.h"

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::GgufU16;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

namespace fs = std::filesystem;

TEST(CheckpointTest, ShardedDirectoryOpensAsOneCheckpoint) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/fp8_block_sharded"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->files().size(), 2u);
  EXPECT_EQ((*ckpt)->stored_tensors().size(), 5u);
  const StoredTensor* w =
      (*ckpt)->FindStored("model.layers.0.mlp.down_proj.weight");
  const StoredTensor* s =
      (*ckpt)->FindStored("model.layers.0.mlp.down_proj.weight_scale_inv");
  ASSERT_NE(w, nullptr);
  ASSERT_NE(s, nullptr);
  EXPECT_NE(w->file_index, s->file_index);
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{200, 300}));
}

TEST(CheckpointTest, IndexFileOpensTheSameCheckpoint) {
  auto ckpt = Checkpoint::Open(
      Fixture("safetensors/fp8_block_sharded/model.safetensors.index.json"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->stored_tensors().size(), 5u);
}

// A two-shard checkpoint in a fresh directory, with the given index text.
std::string WriteShards(const std::string& index_json) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/a.safetensors", BuildSafetensors({{"x", "I8", {2}, "ab"}}));
  WriteFile(dir + "/b.safetensors", BuildSafetensors({{"y", "I8", {1}, "c"}}));
  WriteFile(dir + "/model.safetensors.index.json", index_json);
  return dir;
}

TEST(CheckpointTest, WeightMapNamingAMissingShardIsDataLoss) {
  const std::string dir = WriteShards(
      R"({"weight_map": {"x": "a.safetensors", "y": "c.safetensors"}})");
  const absl::Status s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kIndexInvalid),
                       HasMetadata("rule", "shard-missing"),
                       MessageNames("'c.safetensors'")));
}

TEST(CheckpointTest, WeightMapNamingAMissingTensorIsDataLoss) {
  const std::string dir = WriteShards(
      R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors"}})");
  const absl::Status s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kIndexInvalid),
                       HasMetadata("rule", "index-tensor-missing"),
                       MessageNames("'z'"), MessageNames("'b.safetensors'")));
}

TEST(CheckpointTest, ShardTensorMissingFromWeightMapIsDataLoss) {
  const std::string dir =
      WriteShards(R"({"weight_map": {"y": "b.safetensors"}})");
  // Only b is named; a is simply not part of the checkpoint. Now name a but
  // place y there.
  const std::string dir2 = WriteShards(
      R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}})");
  const absl::Status s = Checkpoint::Open(dir2).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kIndexInvalid),
                       HasMetadata("rule", "index-tensor-missing")));
  EXPECT_TRUE(Checkpoint::Open(dir).ok());
}

TEST(CheckpointTest, WeightMapCannotEscapeItsDirectory) {
  const std::string dir =
      WriteShards(R"({"weight_map": {"x": "../a.safetensors"}})");
  const absl::Status s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kIndexInvalid),
                       HasMetadata("rule", "weight-map-file-name")));
}

TEST(CheckpointTest, DirectoryOfSafetensorsFilesWithoutIndex) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/one.safetensors",
            BuildSafetensors({{"x", "I8", {2}, "ab"}}));
  WriteFile(dir + "/two.safetensors",
            BuildSafetensors({{"y", "I8", {1}, "c"}}));
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->tensors().size(), 2u);
}

TEST(CheckpointTest, SameTensorInTwoFilesIsDataLoss) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/one.safetensors",
            BuildSafetensors({{"x", "I8", {2}, "ab"}}));
  WriteFile(dir + "/two.safetensors",
            BuildSafetensors({{"x", "I8", {1}, "c"}}));
  const absl::Status s = Checkpoint::Open(dir).status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kDataLoss), MessageNames("'x'"),
                       MessageNames("one.safetensors"),
                       MessageNames("two.safetensors")));
}

TEST(CheckpointTest, DetectsFormatByMagicNotByName) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/misnamed.safetensors";
  fs::copy_file(Fixture("gguf/Q4_K.gguf"), path);
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->format(), CheckpointFormat::kGguf);
}

GgufSpec Split(int no, int count, const std::string& tensor) {
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.kv.push_back({"split.no", GgufU16(static_cast<uint16_t>(no))});
  s.kv.push_back({"split.count", GgufU16(static_cast<uint16_t>(count))});
  s.tensors.push_back({tensor, {4}, 0, std::string(16, '\0')});
  return s;
}

TEST(CheckpointTest, SplitGgufOpensEverySplitFromAnyOfThem) {
  const std::string dir = MakeTempDir();
  for (int i = 0; i < 3; ++i) {
    WriteFile(absl::StrCat(dir, "/m-0000", i + 1, "-of-00003.gguf"),
              BuildGguf(Split(i, 3, absl::StrCat("t", i))));
  }
  for (const std::string& p : {dir + "/m-00002-of-00003.gguf", dir}) {
    auto ckpt = Checkpoint::Open(p);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->files().size(), 3u);
    EXPECT_EQ((*ckpt)->tensors().size(), 3u);
    EXPECT_NE((*ckpt)->FindTensor("t2"), nullptr);
  }
}

TEST(CheckpointTest, MissingSplitIsDataLoss) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/m-00001-of-00002.gguf", BuildGguf(Split(0, 2, "a")));
  const absl::Status s =
      Checkpoint::Open(dir + "/m-00001-of-00002.gguf").status();
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kIndexInvalid),
                       HasMetadata("rule", "split-missing"),
                       MessageNames("split 2 of 2"),
                       MessageNames("m-00002-of-00002.gguf")));
}

TEST(CheckpointTest, MissingPathIsNotFound) {
  EXPECT_THAT(Checkpoint::Open("/nonexistent/x.gguf"),
              HasReason(ErrorReason::kCheckpointNotFound));
  EXPECT_THAT(Checkpoint::Open(MakeTempDir()),
              HasReason(ErrorReason::kCheckpointNotFound));
}

TEST(CheckpointTest, FileThatIsNeitherFormatIsDataLoss) {
  const std::string path = MakeTempDir() + "/notes.txt";
  WriteFile(path, "hello, this is not a checkpoint");
  const absl::Status s = Checkpoint::Open(path).status();
  // Read as safetensors, its first 8 bytes are a header length far past
  // the format's limit.
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                       HasMetadata("rule", "header-limit")));
}

}  // namespace
}  // namespace tensormorph
