// ScanCheckpoints on a real tree: a scan stopped by its bounds resumes
// where it stopped, so any bound reassembles the same listing exactly once.
#include "core/format/checkpoint_scan.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/checkpoint_tree.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

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

// A safetensors directory is found before what lies beside its shards,
// which is found too; every bound resumes past the directory itself.
TEST(CheckpointScanTest, ASafetensorsDirectoryIsFollowedByWhatIsBesideIt) {
  namespace fs = std::filesystem;
  const fs::path dir = testing::MakeTempDir();
  fs::create_directories(dir / "sub");
  fs::create_directories(dir / "empty");
  const std::string st = testing::BuildSafetensors(
      {{"w", "F32", {2}, testing::Bytes<float>({1, 2})}});
  testing::WriteFile((dir / "a.safetensors").string(), st);
  testing::WriteFile((dir / "sub/c.safetensors").string(), st);
  fs::copy_file(testing::Fixture("gguf/Q4_0.gguf"), dir / "b.gguf");
  fs::copy_file(testing::Fixture("gguf/Q8_0.gguf"), dir / "sub/d.gguf");
  const std::vector<std::string> expected = {"", "b.gguf", "sub", "sub/d.gguf"};
  int calls = 0;
  CheckpointScanOptions o;
  EXPECT_THAT(ScanAll(dir.string(), o, &calls), ElementsAreArray(expected));
  for (int64_t scanned : {1, 2, 3}) {
    SCOPED_TRACE(scanned);
    o.max_scanned = scanned;
    EXPECT_THAT(ScanAll(dir.string(), o, &calls), ElementsAreArray(expected));
  }
  o.max_scanned = 100'000;
  o.max_found = 1;
  EXPECT_THAT(ScanAll(dir.string(), o, &calls), ElementsAreArray(expected));
  EXPECT_EQ(calls, 4);
  // The directory itself is what the scan found first: its shards alone.
  auto scan = ScanCheckpoints(dir.string(), {});
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(scan->found[0].format, CheckpointFormat::kSafetensors);
  EXPECT_EQ(scan->found[0].file_count, 1);
  EXPECT_EQ(scan->found[0].stored_tensor_count, 1);
  // Depth 0: what is directly in it, sub/ only as a checkpoint itself.
  o.max_found = 100;
  o.max_depth = 0;
  EXPECT_THAT(ScanAll(dir.string(), o, &calls),
              ElementsAreArray({"", "b.gguf", "sub"}));
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
  EXPECT_EQ(scan->found[0].broken, "split m-00001-of-00002.gguf is missing");
}

// Headers a file of its size cannot hold give no count, not the header's:
// a listing showed 4611686018427387904 tensors for a corrupt GGUF, and 1
// for one cut short inside its first tensor's info.
TEST(CheckpointScanTest, AGgufCountItsFileCannotHoldIsUnknown) {
  const std::string dir = testing::MakeTempDir();
  const auto header = [](uint32_t version, uint64_t count) {
    std::string h = "GGUF";
    for (int i = 0; i < 4; ++i)
      h.push_back(static_cast<char>(version >> (8 * i)));
    for (int i = 0; i < 8; ++i)
      h.push_back(static_cast<char>(count >> (8 * i)));
    for (int i = 0; i < 8; ++i) h.push_back('\0');  // no metadata
    return h;
  };
  testing::WriteFile(dir + "/huge.gguf",
                     header(3, uint64_t{1} << 62) + std::string(64, '\0'));
  testing::WriteFile(dir + "/cut.gguf", header(3, 1) + std::string(16, '\0'));
  testing::WriteFile(dir + "/v4.gguf", header(4, 1) + std::string(64, '\0'));
  testing::GgufSpec two;  // a whole file, which the listing parses
  for (const char* name : {"a", "b"}) {
    two.tensors.push_back({name, {8}, 0, std::string(32, '\0')});
  }
  testing::WriteFile(dir + "/fits.gguf", testing::BuildGguf(two));
  auto scan = ScanCheckpoints(dir, {});
  ASSERT_TRUE(scan.ok()) << scan.status();
  std::map<std::string, std::optional<int64_t>> counts;
  for (const FoundCheckpoint& f : scan->found) {
    counts[f.path] = f.stored_tensor_count;
  }
  EXPECT_EQ(counts.at("huge.gguf"), std::nullopt);
  EXPECT_EQ(counts.at("cut.gguf"), std::nullopt);
  EXPECT_EQ(counts.at("v4.gguf"), std::nullopt);
  EXPECT_EQ(counts.at("fits.gguf"), 2);
}

// What the header read finds broken is said (ls marks it), beside a count
// it could not take; a file whose header is only too big to read cheaply
// is not broken, and neither is a good one.
TEST(CheckpointScanTest, WhatTheHeaderReadFindsBrokenIsSaid) {
  namespace fs = std::filesystem;
  const std::string dir = testing::MakeTempDir();
  std::string gguf = "GGUF";
  gguf += std::string("\x03\0\0\0", 4);
  gguf += std::string("\x05\0\0\0\0\0\0\0", 8);  // 5 tensors
  gguf += std::string(8, '\0');
  testing::WriteFile(dir + "/cut.gguf", gguf + std::string(8, '\0'));
  testing::WriteFile(dir + "/empty.gguf", "");
  testing::WriteFile(dir + "/short.gguf", gguf.substr(0, 20));
  testing::WriteFile(dir + "/magic.gguf", std::string(64, 'x'));
  std::string v1 = gguf;
  v1[4] = 1;  // not broken: a version not read (UNIMPLEMENTED when opened)
  testing::WriteFile(dir + "/v1.gguf", v1 + std::string(256, '\0'));
  fs::create_directories(dir + "/badjson");
  testing::WriteFile(dir + "/badjson/model.safetensors",
                     std::string("\x04\0\0\0\0\0\0\0{no}", 12));
  fs::create_directories(dir + "/long");
  testing::WriteFile(dir + "/long/model.safetensors",
                     std::string("\xff\xff\0\0\0\0\0\0{}", 10));
  fs::create_directories(dir + "/index");
  testing::WriteFile(dir + "/index/model.safetensors.index.json", "[]");
  testing::WriteFile(dir + "/index/model-00001-of-00001.safetensors",
                     testing::BuildSafetensors(
                         {{"w", "F32", {1}, testing::Bytes<float>({1})}}));
  fs::copy_file(testing::Fixture("gguf/Q4_0.gguf"), dir + "/good.gguf");
  fs::copy_file(testing::Fixture("gguf/Q4_0.gguf"),
                dir + "/s-00001-of-00002.gguf");
  auto scan = ScanCheckpoints(dir, {});
  ASSERT_TRUE(scan.ok()) << scan.status();
  std::map<std::string, std::string> broken;
  for (const FoundCheckpoint& f : scan->found) broken[f.path] = f.broken;
  EXPECT_EQ(broken.at("cut.gguf"),
            "its header counts 5 tensors, more than its 32 bytes can "
            "describe (cut short?)");
  EXPECT_EQ(broken.at("empty.gguf"),
            "a file of 0 bytes: shorter than a GGUF header (24)");
  EXPECT_EQ(broken.at("short.gguf"),
            "a file of 20 bytes: shorter than a GGUF header (24)");
  EXPECT_EQ(broken.at("v1.gguf"), "");
  EXPECT_EQ(broken.at("magic.gguf"), "no GGUF magic");
  EXPECT_EQ(broken.at("badjson"), "its header is not a JSON object");
  EXPECT_EQ(broken.at("long"), "header length 65535 in a file of 10 bytes");
  EXPECT_EQ(broken.at("index"),
            "model.safetensors.index.json is not a JSON object");
  EXPECT_EQ(broken.at("s-00001-of-00002.gguf"),
            "split s-00002-of-00002.gguf is missing");
  EXPECT_EQ(broken.at("good.gguf"), "");
}

// A directory of shards none of which is a file it can read (a link to a
// FIFO here) and no index is no checkpoint: it listed as 0 files from 1970.
TEST(CheckpointScanTest, ShardsThatAreNoFilesMakeNoCheckpoint) {
  const std::string dir = testing::MakeTempDir();
  std::filesystem::create_directories(dir + "/odd");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  std::filesystem::create_symlink(dir + "/fifo",
                                  dir + "/odd/model.safetensors");
  auto scan = ScanCheckpoints(dir, {});
  ASSERT_TRUE(scan.ok()) << scan.status();
  for (const FoundCheckpoint& f : scan->found) EXPECT_NE(f.path, "odd");
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
