// The registry opens a checkpoint once, shares it, reopens it when its
// files change, and closes the least recently used past its limit;
// AcquireIfOpen only ever hands out one already open and unchanged.
#include "server/checkpoint_registry.h"

#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;

namespace fs = std::filesystem;

class CheckpointRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::canonical(MakeTempDir()).string();
    WriteFile(root_ + "/a.safetensors",
              BuildSafetensors({{"x", "I8", {2}, "ab"}}));
    WriteFile(root_ + "/b.safetensors",
              BuildSafetensors({{"y", "I8", {1}, "c"}}));
  }
  CheckpointRegistry Make(size_t max_open) {
    return CheckpointRegistry(PathSandbox::Create({root_}).value(), max_open);
  }
  std::string root_;
};

TEST_F(CheckpointRegistryTest, SharesOneOpenCheckpoint) {
  auto reg = Make(4);
  auto a1 = reg.Acquire("a.safetensors");
  auto a2 = reg.Acquire(root_ + "/a.safetensors");
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ(a1->get(), a2->get());
  EXPECT_EQ(reg.opens(), 1);
}

TEST_F(CheckpointRegistryTest, AcquireIfOpenNeverOpens) {
  auto reg = Make(4);
  // Not opened yet, or not there at all: null, and nothing opened.
  EXPECT_EQ(reg.AcquireIfOpen("a.safetensors"), nullptr);
  EXPECT_EQ(reg.AcquireIfOpen("missing.safetensors"), nullptr);
  EXPECT_EQ(reg.opens(), 0);
  auto a = reg.Acquire("a.safetensors");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reg.AcquireIfOpen("a.safetensors"), *a);
  // Changed on disk: null again (Acquire reopens it), still no open.
  const std::string tmp = root_ + "/a.tmp";
  WriteFile(tmp, BuildSafetensors({{"x", "I8", {3}, "xyz"}}));
  fs::rename(tmp, root_ + "/a.safetensors");
  EXPECT_EQ(reg.AcquireIfOpen("a.safetensors"), nullptr);
  EXPECT_EQ(reg.opens(), 1);
}

TEST_F(CheckpointRegistryTest, ForACheckWhatAStrictOpenRefusesOpensLeniently) {
  // An index naming a shard that is a FIFO: INVALID_ARGUMENT for every
  // call, a shard-corrupt problem for a check, which never opens the FIFO
  // (it would block) and never caches what it opened.
  const std::string dir = root_ + "/sharded";
  fs::create_directory(dir);
  WriteFile(dir + "/s1.safetensors",
            BuildSafetensors({{"x", "I8", {2}, "ab"}}));
  ASSERT_EQ(::mkfifo((dir + "/s2.safetensors").c_str(), 0600), 0);
  WriteFile(
      dir + "/model.safetensors.index.json",
      R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  auto reg = Make(4);
  EXPECT_EQ(reg.Acquire("sharded").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto checked = reg.AcquireForCheck("sharded");
  ASSERT_TRUE(checked.ok()) << checked.status();
  ASSERT_EQ((*checked)->problems().size(), 1u);
  EXPECT_EQ((*checked)->problems()[0].rule, "shard-corrupt");
  EXPECT_THAT((*checked)->problems()[0].actual,
              ::testing::HasSubstr("is not a regular file"));
  EXPECT_EQ(reg.AcquireIfOpen("sharded"), nullptr);
}

TEST_F(CheckpointRegistryTest, ReopensWhenTheFileChanges) {
  auto reg = Make(4);
  auto before = reg.Acquire("a.safetensors");
  ASSERT_TRUE(before.ok());
  // Replace the file (new inode and size): the next call sees the new bytes,
  // while the old checkpoint stays valid for whoever still holds it.
  const std::string tmp = root_ + "/a.tmp";
  WriteFile(tmp, BuildSafetensors({{"x", "I8", {3}, "xyz"}}));
  fs::rename(tmp, root_ + "/a.safetensors");
  auto after = reg.Acquire("a.safetensors");
  ASSERT_TRUE(after.ok());
  EXPECT_NE(before->get(), after->get());
  EXPECT_EQ((*after)->FindTensor("x")->shape, std::vector<int64_t>{3});
  EXPECT_EQ((*before)->FindTensor("x")->shape, std::vector<int64_t>{2});
  EXPECT_EQ(reg.opens(), 2);
}

TEST_F(CheckpointRegistryTest, NoticesAFileRewrittenInPlace) {
  auto reg = Make(4);
  auto before = reg.Acquire("a.safetensors");
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(reg.AcquireIfOpen("a.safetensors"), *before);
  // The same inode, other bytes and size: the identity taken as the path
  // resolves (no second stat) still tells.
  WriteFile(root_ + "/a.safetensors",
            BuildSafetensors({{"x", "I8", {4}, "wxyz"}}));
  EXPECT_EQ(reg.AcquireIfOpen("a.safetensors"), nullptr);
  auto after = reg.Acquire("a.safetensors");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)->FindTensor("x")->shape, std::vector<int64_t>{4});
  EXPECT_EQ(reg.opens(), 2);
}

TEST_F(CheckpointRegistryTest, NoticesAFileReplacedByASymlinkOut) {
  auto reg = Make(4);
  ASSERT_TRUE(reg.Acquire("a.safetensors").ok());
  const std::string outside = fs::canonical(MakeTempDir()).string();
  WriteFile(outside + "/a.safetensors",
            BuildSafetensors({{"x", "I8", {2}, "ab"}}));
  fs::remove(root_ + "/a.safetensors");
  fs::create_symlink(outside + "/a.safetensors", root_ + "/a.safetensors");
  EXPECT_EQ(reg.AcquireIfOpen("a.safetensors"), nullptr);
  EXPECT_EQ(reg.Acquire("a.safetensors").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// A sharded checkpoint: three shards and their index in one directory.
class ShardedRegistryTest : public CheckpointRegistryTest {
 protected:
  void SetUp() override {
    CheckpointRegistryTest::SetUp();
    dir_ = root_ + "/sharded";
    fs::create_directory(dir_);
    for (int i = 0; i < 3; ++i) {
      WriteFile(Shard(i),
                BuildSafetensors({{absl::StrCat("t", i), "I8", {2}, "ab"}}));
    }
    WriteFile(dir_ + "/model.safetensors.index.json",
              R"({"weight_map": {"t0": "s0.safetensors",)"
              R"( "t1": "s1.safetensors", "t2": "s2.safetensors"}})");
  }
  std::string Shard(int i) const {
    return absl::StrCat(dir_, "/s", i, ".safetensors");
  }
  std::string dir_;
};

TEST_F(ShardedRegistryTest, CallsOnAnUnchangedCheckpointStatNoShard) {
  // Issue 35 point 6: no event in its directory, no full check (a stat of
  // every shard) but the backstop's, at most one a second.
  auto reg = Make(4);
  const absl::Time start = absl::Now();
  auto first = reg.Acquire("sharded");
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 200; ++i) {
    auto again = reg.Acquire("sharded");
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->get(), first->get());
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_LE(reg.full_checks(), static_cast<int64_t>(seconds) + 1);
  EXPECT_EQ(reg.opens(), 1);
}

TEST_F(ShardedRegistryTest, AShardRewrittenInPlaceIsSeenByTheNextCall) {
  auto reg = Make(4);
  auto before = reg.Acquire("sharded");
  ASSERT_TRUE(before.ok());
  // Same inode, other size: no sleep, no backstop; the event tells.
  WriteFile(Shard(1), BuildSafetensors({{"t1", "I8", {3}, "xyz"}}));
  EXPECT_EQ(reg.AcquireIfOpen("sharded"), nullptr);
  auto after = reg.Acquire("sharded");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->FindTensor("t1")->shape, std::vector<int64_t>{3});
  EXPECT_EQ(reg.opens(), 2);
}

TEST_F(ShardedRegistryTest, AShardReplacedByRenameIsSeenByTheNextCall) {
  auto reg = Make(4);
  ASSERT_TRUE(reg.Acquire("sharded").ok());
  WriteFile(dir_ + "/new.tmp", BuildSafetensors({{"t2", "I8", {4}, "wxyz"}}));
  fs::rename(dir_ + "/new.tmp", Shard(2));
  auto after = reg.Acquire("sharded");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->FindTensor("t2")->shape, std::vector<int64_t>{4});
}

TEST_F(ShardedRegistryTest, AChmodIsSeenByTheNextCall) {
  // ctime changes: the reopen checks access again.
  auto reg = Make(4);
  auto before = reg.Acquire("sharded");
  ASSERT_TRUE(before.ok());
  fs::permissions(Shard(0), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(reg.AcquireIfOpen("sharded"), nullptr);
}

TEST_F(ShardedRegistryTest, AConfigFileAppearingIsSeenByTheNextCall) {
  auto reg = Make(4);
  ASSERT_TRUE(reg.Acquire("sharded").ok());
  WriteFile(dir_ + "/config.json", "{}");
  EXPECT_EQ(reg.AcquireIfOpen("sharded"), nullptr);
}

TEST_F(ShardedRegistryTest, AnUnrelatedFileInTheDirectoryCostsOneFullCheck) {
  // An event is not a change: the full check finds the shards unchanged,
  // keeps the open and re-arms the shortcut.
  auto reg = Make(4);
  auto first = reg.Acquire("sharded");
  ASSERT_TRUE(first.ok());
  const int64_t checks = reg.full_checks();
  WriteFile(dir_ + "/notes.txt", "not a checkpoint file");
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(reg.AcquireIfOpen("sharded"), *first);
  }
  EXPECT_GE(reg.full_checks(), checks + 1);
  EXPECT_LE(reg.full_checks(), checks + 3);  // one, plus the backstop's
  EXPECT_EQ(reg.opens(), 1);
}

TEST_F(CheckpointRegistryTest, ClosesTheLeastRecentlyUsedPastTheLimit) {
  auto reg = Make(1);
  ASSERT_TRUE(reg.Acquire("a.safetensors").ok());
  ASSERT_TRUE(reg.Acquire("b.safetensors").ok());
  EXPECT_EQ(reg.open_count(), 1u);
  ASSERT_TRUE(reg.Acquire("a.safetensors").ok());
  EXPECT_EQ(reg.opens(), 3);  // a was closed and opened again
}

TEST_F(CheckpointRegistryTest, ShardSymlinkedOutOfTheRootIsRefused) {
  const std::string outside = fs::canonical(MakeTempDir()).string();
  WriteFile(outside + "/s.safetensors",
            BuildSafetensors({{"z", "I8", {1}, "q"}}));
  fs::create_directories(root_ + "/sharded");
  fs::create_symlink(outside + "/s.safetensors",
                     root_ + "/sharded/s.safetensors");
  WriteFile(root_ + "/sharded/model.safetensors.index.json",
            R"({"weight_map": {"z": "s.safetensors"}})");
  auto reg = Make(4);
  EXPECT_EQ(reg.Acquire("sharded").status().code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace tensormorph
