// ScanCheckpoints on a real tree: a scan stopped by its bounds resumes
// where it stopped, so any bound reassembles the same listing exactly once.
#include "core/format/checkpoint_scan.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/checkpoint_tree.h"

namespace tensormorph {
namespace {

using ::testing::ElementsAreArray;

std::vector<std::string> ScanAll(const std::string& dir,
                                 CheckpointScanOptions o, int* calls) {
  std::vector<std::string> paths;
  *calls = 0;
  while (true) {
    auto scan = ScanCheckpoints(dir, o);
    EXPECT_TRUE(scan.ok()) << scan.status();
    if (!scan.ok() || ++*calls > 1000) break;
    for (const FoundCheckpoint& f : scan->found) paths.push_back(f.path);
    if (scan->resume_after.empty()) break;
    EXPECT_TRUE(ScanOrderLess(o.after, scan->resume_after) || o.after.empty());
    o.after = scan->resume_after;
  }
  return paths;
}

TEST(CheckpointScanTest, EveryScanLimitResumesToTheSameListing) {
  const auto tree = testing::MakeCheckpointTree();
  int calls = 0;
  CheckpointScanOptions o;
  o.allowed = [&](const std::string& canonical) {
    return canonical.rfind(tree.root, 0) == 0;
  };
  EXPECT_THAT(ScanAll(tree.root, o, &calls), ElementsAreArray(tree.expected));
  EXPECT_EQ(calls, 1);
  for (int64_t scanned : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(scanned);
    o.max_scanned = scanned;
    EXPECT_THAT(ScanAll(tree.root, o, &calls), ElementsAreArray(tree.expected));
    EXPECT_GT(calls, 1);
  }
  o.max_scanned = 100'000;
  o.max_found = 1;
  EXPECT_THAT(ScanAll(tree.root, o, &calls), ElementsAreArray(tree.expected));
  EXPECT_EQ(calls, static_cast<int>(tree.expected.size()));
}

TEST(CheckpointScanTest, ASplitSetWithoutItsFirstSplitListsWhatIsThere) {
  const auto tree = testing::MakeCheckpointTree();
  const std::string split = tree.root + "/models/split";
  ASSERT_EQ(std::remove((split + "/m-00001-of-00002.gguf").c_str()), 0);
  auto scan = ScanCheckpoints(split, {});
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(scan->found.size(), 1u);
  EXPECT_EQ(scan->found[0].path, "m-00002-of-00002.gguf");
  EXPECT_EQ(scan->found[0].file_count, 1);
  EXPECT_EQ(scan->found[0].stored_tensor_count, 1);
}

TEST(CheckpointScanTest, OrderComparesPathComponents) {
  EXPECT_TRUE(ScanOrderLess("a/b", "a-c"));  // '/' sorts after '-' bytewise
  EXPECT_TRUE(ScanOrderLess("a", "a/b"));
  EXPECT_FALSE(ScanOrderLess("a/b", "a/b"));
}

TEST(CheckpointScanTest, AFileIsNotADirectoryToScan) {
  const auto tree = testing::MakeCheckpointTree();
  EXPECT_EQ(ScanCheckpoints(tree.root + "/Q4_K.gguf", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScanCheckpoints(tree.root + "/none", {}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensormorph
