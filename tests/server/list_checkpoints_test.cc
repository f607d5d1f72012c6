// ListCheckpoints through a real server on loopback: what a browser sees of
// a tree of checkpoints. Paths come back as the other calls take them;
// symlinks never lead out of the roots or round a loop; depth is bounded;
// pages reassemble the listing exactly once; and every refusal names its
// reason.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/checkpoint_tree.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::CheckpointTree;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::MakeCheckpointTree;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::AllOf;
using ::testing::ElementsAreArray;

std::vector<std::string> AllPathsOf(Client& client,
                                    v1::ListCheckpointsRequest req) {
  std::vector<std::string> paths;
  absl::Status s = client.ListAllCheckpoints(
      req, [&](const v1::CheckpointEntry& e) { paths.push_back(e.path()); });
  EXPECT_TRUE(s.ok()) << s;
  return paths;
}

class ListCheckpointsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tree = new CheckpointTree(MakeCheckpointTree());
    server = new LoopbackServer(StartLoopbackServer({tree->root}));
  }
  static void TearDownTestSuite() {
    delete server;
    delete tree;
  }

  // Every entry of one call, token-only entries too.
  static absl::StatusOr<std::vector<v1::CheckpointEntry>> Page(
      const v1::ListCheckpointsRequest& req) {
    std::vector<v1::CheckpointEntry> out;
    absl::Status s =
        server->client->ListCheckpoints(req, [&](const v1::CheckpointEntry& e) {
          out.push_back(e);
          return true;
        });
    if (!s.ok()) return s;
    return out;
  }
  static std::vector<std::string> AllPaths(v1::ListCheckpointsRequest req) {
    std::vector<std::string> paths;
    absl::Status s = server->client->ListAllCheckpoints(
        req, [&](const v1::CheckpointEntry& e) { paths.push_back(e.path()); });
    EXPECT_TRUE(s.ok()) << s;
    return paths;
  }

  static CheckpointTree* tree;
  static LoopbackServer* server;
};
CheckpointTree* ListCheckpointsTest::tree = nullptr;
LoopbackServer* ListCheckpointsTest::server = nullptr;

TEST_F(ListCheckpointsTest, UnderTheRootsListsEveryCheckpointOnceInOrder) {
  auto page = Page(v1::ListCheckpointsRequest());
  ASSERT_TRUE(page.ok()) << page.status();
  std::vector<std::string> paths;
  for (const auto& e : *page) {
    paths.push_back(e.path());
    EXPECT_TRUE(e.next_page_token().empty()) << e.path();
  }
  EXPECT_THAT(paths, ElementsAreArray(tree->expected));
}

TEST_F(ListCheckpointsTest, EntriesDescribeTheirFilesAndOpenByTheirPath) {
  auto page = Page(v1::ListCheckpointsRequest());
  ASSERT_TRUE(page.ok()) << page.status();
  for (const auto& e : *page) {
    SCOPED_TRACE(e.path());
    auto info = server->client->GetCheckpoint(e.path());
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(e.format(), info->format());
    EXPECT_EQ(e.file_count(), info->files_size());
    EXPECT_EQ(e.total_bytes(), info->total_bytes());
    ASSERT_TRUE(e.has_stored_tensor_count());
    EXPECT_EQ(e.stored_tensor_count(), info->stored_tensor_count());
    EXPECT_GT(e.modified_unix_seconds(), 1'600'000'000);
  }
}

TEST_F(ListCheckpointsTest, ASplitGgufIsOneCheckpointOfItsSplits) {
  auto page = Page(v1::ListCheckpointsRequest());
  ASSERT_TRUE(page.ok()) << page.status();
  const auto& split = page->back();
  ASSERT_EQ(split.path(), "models/split/m-00001-of-00002.gguf");
  EXPECT_EQ(split.format(), v1::CHECKPOINT_FORMAT_GGUF);
  EXPECT_EQ(split.file_count(), 2);
  EXPECT_EQ(
      split.total_bytes(),
      static_cast<int64_t>(
          fs::file_size(tree->root + "/models/split/m-00001-of-00002.gguf") +
          fs::file_size(tree->root + "/models/split/m-00002-of-00002.gguf")));
}

TEST_F(ListCheckpointsTest, ADirectoryIsListedAsTheCallerSpelledIt) {
  v1::ListCheckpointsRequest req;
  req.set_directory("models/");
  EXPECT_THAT(
      AllPaths(req),
      ElementsAreArray({"models/Q8_0.gguf", "models/gptq", "models/sharded",
                        "models/split/m-00001-of-00002.gguf"}));
  req.set_directory(tree->root + "/models");
  EXPECT_THAT(AllPaths(req),
              ElementsAreArray(
                  {tree->root + "/models/Q8_0.gguf",
                   tree->root + "/models/gptq", tree->root + "/models/sharded",
                   tree->root + "/models/split/m-00001-of-00002.gguf"}));
}

TEST_F(ListCheckpointsTest, ACheckpointDirectoryListsItselfOnly) {
  v1::ListCheckpointsRequest req;
  req.set_directory("models/sharded");
  auto page = Page(req);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].path(), "models/sharded");
  EXPECT_EQ((*page)[0].format(), v1::CHECKPOINT_FORMAT_SAFETENSORS);
  EXPECT_EQ((*page)[0].file_count(), 2);
}

TEST_F(ListCheckpointsTest, DepthIsBoundedAndMaxDepthReachesFurther) {
  v1::ListCheckpointsRequest req;
  std::vector<std::string> paths = AllPaths(req);
  EXPECT_THAT(paths, ::testing::Not(::testing::Contains(tree->deep)));
  req.set_max_depth(5);
  paths = AllPaths(req);
  EXPECT_THAT(paths, ::testing::Contains(tree->deep));
  req.set_max_depth(0);  // what is directly in the root
  EXPECT_THAT(AllPaths(req),
              ElementsAreArray({"Q4_K.gguf", "inside_link.gguf"}));
  req.set_directory("models");  // a checkpoint subdirectory is directly in it
  EXPECT_THAT(
      AllPaths(req),
      ElementsAreArray({"models/Q8_0.gguf", "models/gptq", "models/sharded"}));
}

TEST_F(ListCheckpointsTest, SymlinkLoopsEndAtTheDeepestBound) {
  v1::ListCheckpointsRequest req;
  req.set_max_depth(16);
  std::vector<std::string> paths = AllPaths(req);
  std::vector<std::string> expected = tree->expected;
  expected.insert(expected.begin() + 1, tree->deep);  // d4/ before x.gguf
  EXPECT_THAT(paths, ElementsAreArray(expected));
}

TEST_F(ListCheckpointsTest, PagesOfTwoReassembleTheListingExactlyOnce) {
  v1::ListCheckpointsRequest req;
  req.set_page_size(2);
  std::vector<std::string> paths;
  int pages = 0;
  while (true) {
    auto page = Page(req);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    // AIP-158: the token is the page's own last message (an entry with an
    // empty path), never on a checkpoint's entry.
    std::string next;
    if (!page->empty() && !page->back().next_page_token().empty()) {
      EXPECT_EQ(page->back().path(), "");
      next = page->back().next_page_token();
      page->pop_back();
    }
    ASSERT_LE(page->size(), 2u);
    for (const auto& e : *page) {
      paths.push_back(e.path());
      EXPECT_TRUE(e.next_page_token().empty()) << e.path();
    }
    if (next.empty()) break;
    req.set_page_token(next);
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 4);  // 7 checkpoints, and no empty page after the last
  EXPECT_THAT(paths, ElementsAreArray(tree->expected));
}

TEST_F(ListCheckpointsTest, ADirectoryOutsideTheRootsIsPermissionDenied) {
  v1::ListCheckpointsRequest req;
  for (const std::string& dir :
       {tree->outside, std::string("escape"), std::string("../outside")}) {
    SCOPED_TRACE(dir);
    req.set_directory(dir);
    auto page = Page(req);
    ASSERT_THAT(page, HasReason(ErrorReason::kOutsideRoots));
    EXPECT_THAT(page, MessageNames("directory '" + dir + "'"));
  }
}

TEST_F(ListCheckpointsTest, RefusalsNameTheirReason) {
  v1::ListCheckpointsRequest req;
  req.set_directory("Q4_K.gguf");
  auto page = Page(req);
  EXPECT_THAT(page, AllOf(HasReason(ErrorReason::kRequestInvalid),
                          MessageNames("Q4_K.gguf")));

  req.set_directory("no/such/dir");
  EXPECT_THAT(Page(req), HasReason(ErrorReason::kCheckpointNotFound));

  req.clear_directory();
  req.set_max_depth(17);
  page = Page(req);
  EXPECT_THAT(page, HasReason(ErrorReason::kLimitExceeded));
  EXPECT_THAT(ErrorMetadataOf(page.status()),
              ::testing::Contains(::testing::Pair("limit", "max_list_depth")));
  req.set_max_depth(-1);
  EXPECT_EQ(Page(req).status().code(), absl::StatusCode::kInvalidArgument);

  req.clear_max_depth();
  req.set_page_size(0);
  req.set_page_token("not a token");
  EXPECT_THAT(Page(req), HasReason(ErrorReason::kPageTokenInvalid));
  req.set_page_token("bGMxCjcK");  // "lc1\n7\n": a root that is not there
  EXPECT_THAT(Page(req), HasReason(ErrorReason::kPageTokenInvalid));
}

// AIP-158: a page_size past the cap is lowered to it, not refused.
TEST_F(ListCheckpointsTest, APageSizePastTheCapIsLoweredToIt) {
  v1::ListCheckpointsRequest req;
  req.set_page_size(5000);
  auto page = Page(req);
  ASSERT_TRUE(page.ok()) << page.status();
  std::vector<std::string> paths;
  for (const auto& e : *page) paths.push_back(e.path());
  EXPECT_THAT(paths, ElementsAreArray(tree->expected));
}

TEST_F(ListCheckpointsTest, IsCountedAsAStream) {
  auto before = server->client->GetServerInfo();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(Page(v1::ListCheckpointsRequest()).ok());
  auto after = server->client->GetServerInfo();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->counters().streams_started(),
            before->counters().streams_started() + 1);
  // The slot is given back once the call is done on the server too.
  for (int i = 0; i < 100 && after->counters().active_streams() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    after = server->client->GetServerInfo();
    ASSERT_TRUE(after.ok()) << after.status();
  }
  EXPECT_EQ(after->counters().active_streams(), 0);
}

TEST(ListCheckpointsRootsTest, UnderSeveralRootsAShadowedPathIsAbsolute) {
  const CheckpointTree a = MakeCheckpointTree();
  const std::string b = ::tensormorph::testing::MakeTempDir();
  fs::create_directories(b + "/models");
  fs::copy_file(::tensormorph::testing::Fixture("gguf/Q4_0.gguf"),
                b + "/models/Q8_0.gguf");  // the first root has this path
  fs::copy_file(::tensormorph::testing::Fixture("gguf/Q4_0.gguf"),
                b + "/only_b.gguf");
  LoopbackServer s = StartLoopbackServer({a.root, b});
  std::vector<std::string> paths;
  v1::ListCheckpointsRequest req;
  req.set_page_size(3);  // pages that cross from one root to the next
  ASSERT_TRUE(s.client
                  ->ListAllCheckpoints(req,
                                       [&](const v1::CheckpointEntry& e) {
                                         paths.push_back(e.path());
                                       })
                  .ok());
  std::vector<std::string> expected = a.expected;
  expected.push_back(b + "/models/Q8_0.gguf");
  expected.push_back("only_b.gguf");
  EXPECT_THAT(paths, ElementsAreArray(expected));
  for (const std::string& p : paths) {
    EXPECT_TRUE(s.client->GetCheckpoint(p).ok()) << p;
  }
}

// A safetensors directory with more beside its shards:
//   root/mixed/a.safetensors                 the directory's checkpoint
//   root/mixed/b.gguf                        a GGUF beside it
//   root/mixed/empty/                        no checkpoint: not listed
//   root/mixed/s-0000{1,2}-of-00002.gguf     a split set beside it
//   root/mixed/sub/c.safetensors             a safetensors subdirectory
//   root/mixed/sub2/e.gguf                   a GGUF in a subdirectory
class MixedDirectoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root = new std::string(::tensormorph::testing::MakeTempDir());
    const fs::path mixed = fs::path(*root) / "mixed";
    fs::create_directories(mixed / "empty");
    fs::create_directories(mixed / "sub");
    fs::create_directories(mixed / "sub2");
    using ::tensormorph::testing::Bytes;
    using ::tensormorph::testing::WriteFile;
    WriteFile((mixed / "a.safetensors").string(),
              ::tensormorph::testing::BuildSafetensors(
                  {{"w", "F32", {2}, Bytes(std::vector<float>{1, 2})}}));
    WriteFile((mixed / "sub/c.safetensors").string(),
              ::tensormorph::testing::BuildSafetensors(
                  {{"v", "F32", {1}, Bytes(std::vector<float>{3})}}));
    fs::copy_file(::tensormorph::testing::Fixture("gguf/Q4_0.gguf"),
                  mixed / "b.gguf");
    fs::copy_file(::tensormorph::testing::Fixture("gguf/Q8_0.gguf"),
                  mixed / "sub2/e.gguf");
    for (int i = 0; i < 2; ++i) {
      ::tensormorph::testing::GgufSpec g;
      g.kv.push_back({"general.architecture",
                      ::tensormorph::testing::GgufString("llama")});
      g.kv.push_back({"split.no", ::tensormorph::testing::GgufU16(
                                      static_cast<uint16_t>(i))});
      g.kv.push_back({"split.count", ::tensormorph::testing::GgufU16(2)});
      g.tensors.push_back(
          {absl::StrCat("t", i), {4}, 0, std::string(16, '\0')});
      WriteFile(
          absl::StrCat(mixed.string(), "/s-0000", i + 1, "-of-00002.gguf"),
          ::tensormorph::testing::BuildGguf(g));
    }
    server = new LoopbackServer(StartLoopbackServer({*root}));
  }
  static void TearDownTestSuite() {
    delete server;
    delete root;
  }

  static std::string* root;
  static LoopbackServer* server;
};
std::string* MixedDirectoryTest::root = nullptr;
LoopbackServer* MixedDirectoryTest::server = nullptr;

TEST_F(MixedDirectoryTest, ListsTheDirectoryThenEverythingBesideItsShards) {
  const std::vector<std::string> expected = {"mixed", "mixed/b.gguf",
                                             "mixed/s-00001-of-00002.gguf",
                                             "mixed/sub", "mixed/sub2/e.gguf"};
  v1::ListCheckpointsRequest req;
  EXPECT_THAT(AllPathsOf(*server->client, req), ElementsAreArray(expected));
  req.set_directory("mixed");
  EXPECT_THAT(AllPathsOf(*server->client, req), ElementsAreArray(expected));
  // Pages of one pass through the directory's contents exactly once.
  req.set_page_size(1);
  EXPECT_THAT(AllPathsOf(*server->client, req), ElementsAreArray(expected));
}

TEST_F(MixedDirectoryTest, TheDirectoryOpensAsItsSafetensorsAlone) {
  std::vector<v1::CheckpointEntry> entries;
  v1::ListCheckpointsRequest req;
  req.set_directory("mixed");
  ASSERT_TRUE(
      server->client
          ->ListAllCheckpoints(
              req, [&](const v1::CheckpointEntry& e) { entries.push_back(e); })
          .ok());
  ASSERT_EQ(entries.size(), 5u);
  const std::vector<v1::CheckpointFormat> formats = {
      v1::CHECKPOINT_FORMAT_SAFETENSORS, v1::CHECKPOINT_FORMAT_GGUF,
      v1::CHECKPOINT_FORMAT_GGUF, v1::CHECKPOINT_FORMAT_SAFETENSORS,
      v1::CHECKPOINT_FORMAT_GGUF};
  const std::vector<int64_t> files = {1, 1, 2, 1, 1};
  for (size_t i = 0; i < entries.size(); ++i) {
    const v1::CheckpointEntry& e = entries[i];
    SCOPED_TRACE(e.path());
    EXPECT_EQ(e.format(), formats[i]);
    EXPECT_EQ(e.file_count(), files[i]);
    auto info = server->client->GetCheckpoint(e.path());
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->format(), e.format());
    EXPECT_EQ(info->files_size(), e.file_count());
    EXPECT_EQ(info->total_bytes(), e.total_bytes());
    EXPECT_EQ(info->stored_tensor_count(), e.stored_tensor_count());
  }
}

TEST_F(MixedDirectoryTest, DepthCountsFromTheListedDirectory) {
  v1::ListCheckpointsRequest req;
  req.set_max_depth(0);  // mixed/ is looked at only as a checkpoint
  EXPECT_THAT(AllPathsOf(*server->client, req), ElementsAreArray({"mixed"}));
  req.set_directory("mixed");  // sub/ is; sub2/ only holds one
  EXPECT_THAT(AllPathsOf(*server->client, req),
              ElementsAreArray({"mixed", "mixed/b.gguf",
                                "mixed/s-00001-of-00002.gguf", "mixed/sub"}));
}

}  // namespace
}  // namespace tensormorph
