// ListCheckpoints through a real server on loopback: what a browser sees of
// a tree of checkpoints. Paths come back as the other calls take them;
// symlinks never lead out of the roots or round a loop; depth is bounded;
// pages reassemble the listing exactly once; and every refusal names its
// reason.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/checkpoint_tree.h"
#include "tests/support/loopback_server.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::CheckpointTree;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::MakeCheckpointTree;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

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
    EXPECT_THAT(page.status().message(), HasSubstr("directory '" + dir + "'"));
  }
}

TEST_F(ListCheckpointsTest, RefusalsNameTheirReason) {
  v1::ListCheckpointsRequest req;
  req.set_directory("Q4_K.gguf");
  auto page = Page(req);
  EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(page.status().message(), HasSubstr("not a directory"));

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

}  // namespace
}  // namespace tensormorph
