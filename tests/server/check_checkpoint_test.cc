// CheckCheckpoint through a real server on loopback: every rule's broken
// checkpoint yields its finding as an event, then a summary whose `failed`
// follows the fail level; hashes come when asked and a manifest verifies a
// copy; refusals name their reason.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "core/check/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/check_cases.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::CheckCase;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Events {
  std::vector<v1::CheckEvent> all;
  std::vector<v1::CheckFinding> findings;
  std::vector<v1::CheckTensorHash> hashes;
  v1::CheckSummary summary;
};

class CheckCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases = new std::vector<CheckCase>(testing::CheckCases());
    // Every case lives in its own temporary directory beside the others.
    root = new std::string(fs::path(cases->front().dir).parent_path());
    server = new LoopbackServer(StartLoopbackServer({*root}));
  }
  static void TearDownTestSuite() {
    delete server;
    delete root;
    delete cases;
  }

  static absl::StatusOr<Events> Check(const v1::CheckCheckpointRequest& req) {
    Events ev;
    absl::Status s =
        server->client->CheckCheckpoint(req, [&](const v1::CheckEvent& e) {
          ev.all.push_back(e);
          if (e.has_finding()) ev.findings.push_back(e.finding());
          if (e.has_hash()) ev.hashes.push_back(e.hash());
          if (e.has_summary()) ev.summary = e.summary();
          return true;
        });
    if (!s.ok()) return s;
    return ev;
  }
  static absl::StatusOr<Events> Check(const std::string& path) {
    v1::CheckCheckpointRequest req;
    req.set_checkpoint(path);
    return Check(req);
  }

  static std::vector<CheckCase>* cases;
  static std::string* root;
  static LoopbackServer* server;
};
std::vector<CheckCase>* CheckCheckpointTest::cases = nullptr;
std::string* CheckCheckpointTest::root = nullptr;
LoopbackServer* CheckCheckpointTest::server = nullptr;

v1::CheckSeverity SeverityOf(const std::string& name) {
  return name == "error"     ? v1::CHECK_SEVERITY_ERROR
         : name == "warning" ? v1::CHECK_SEVERITY_WARNING
                             : v1::CHECK_SEVERITY_INFO;
}

TEST_F(CheckCheckpointTest, EveryRuleIsFoundThroughTheRpc) {
  for (const CheckCase& c : *cases) {
    SCOPED_TRACE(c.rule);
    v1::CheckCheckpointRequest req;
    req.set_checkpoint(c.dir);
    req.set_source(c.source);
    auto ev = Check(req);
    ASSERT_TRUE(ev.ok()) << ev.status();
    bool found = false;
    for (const v1::CheckFinding& f : ev->findings) {
      if (f.rule() != c.rule || f.tensor() != c.tensor) continue;
      found = true;
      EXPECT_EQ(f.severity(), SeverityOf(c.severity));
      EXPECT_THAT(f.actual() + " | " + f.expected(), HasSubstr(c.says));
      EXPECT_FALSE(f.hint().empty());
    }
    EXPECT_TRUE(found);
    // Progress first, the summary last.
    ASSERT_GE(ev->all.size(), 3u);
    EXPECT_TRUE(ev->all.front().has_progress());
    EXPECT_TRUE(ev->all.back().has_summary());
    const v1::CheckProgress& p = ev->all[ev->all.size() - 2].progress();
    EXPECT_EQ(p.bytes_done(), p.bytes_total());
    EXPECT_EQ(ev->summary.failed(), c.severity == "error");
    EXPECT_EQ(ev->summary.fail_level(), v1::CHECK_SEVERITY_ERROR);
    bool tallied = false;
    for (const v1::CheckRuleTally& t : ev->summary.rules()) {
      tallied |= t.rule() == c.rule && t.findings() >= 1;
    }
    EXPECT_TRUE(tallied);
  }
}

TEST_F(CheckCheckpointTest, TheFailLevelDecidesFailed) {
  for (const CheckCase& c : *cases) {
    if (c.rule != "zero-scale") continue;
    v1::CheckCheckpointRequest req;
    req.set_checkpoint(c.dir);
    auto ev = Check(req);
    ASSERT_TRUE(ev.ok());
    EXPECT_FALSE(ev->summary.failed());
    EXPECT_EQ(ev->summary.warnings(), 2);  // zero-scale, all-zero-group
    req.set_fail_level(v1::CHECK_SEVERITY_WARNING);
    ev = Check(req);
    ASSERT_TRUE(ev.ok());
    EXPECT_TRUE(ev->summary.failed());
  }
}

TEST_F(CheckCheckpointTest, HashesVerifyACopyAndNameTheTensorThatChanged) {
  // Both under a fresh directory of the root.
  const std::string original = testing::WriteCleanCheckCheckpoint();
  const std::string copy = testing::MakeTempDir();
  v1::CheckCheckpointRequest req;
  req.set_checkpoint(original);
  req.set_hashes(true);
  auto ev = Check(req);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->hashes.size(), 3u);
  std::vector<ManifestEntry> manifest;
  uint64_t weight_offset = 0;
  for (const v1::CheckTensorHash& h : ev->hashes) {
    EXPECT_EQ(h.xxh3_64().size(), 16u);
    EXPECT_EQ(h.file(), "model.safetensors");
    manifest.push_back({h.name(), h.file(), h.offset(), h.size(), h.dtype(),
                        std::stoull(h.xxh3_64(), nullptr, 16)});
    if (h.name() == testing::kCheckWeight) weight_offset = h.offset();
  }
  std::string bytes = testing::ReadFileBytes(original + "/model.safetensors");
  bytes[weight_offset + 100] ^= 0x40;
  testing::WriteFile(copy + "/model.safetensors", bytes);
  req.set_checkpoint(copy);
  req.set_hashes(false);
  req.set_verify_manifest(ManifestJson(manifest));
  ev = Check(req);
  ASSERT_TRUE(ev.ok()) << ev.status();
  ASSERT_EQ(ev->findings.size(), 1u);
  EXPECT_EQ(ev->findings[0].rule(), "manifest-mismatch");
  EXPECT_EQ(ev->findings[0].tensor(), testing::kCheckWeight);
  EXPECT_EQ(ev->findings[0].severity(), v1::CHECK_SEVERITY_ERROR);
  EXPECT_TRUE(ev->summary.failed());
  EXPECT_TRUE(ev->hashes.empty());
}

TEST_F(CheckCheckpointTest, RefusalsNameTheirReason) {
  v1::CheckCheckpointRequest req;
  req.set_checkpoint(cases->front().dir);
  req.set_verify_manifest(R"({"format": "tensormorph-manifest", "version": 1,
      "hash": "xxh3-64", "tensors": [{"name": "w", "file": "f",
      "offset": "8"}]})");
  EXPECT_THAT(Check(req), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                MessageNames(".tensors[0].offset")));
  EXPECT_THAT(Check(*root + "/no-such-checkpoint"),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    MessageNames("no-such-checkpoint")));
  EXPECT_THAT(Check("/etc"), AllOf(HasReason(ErrorReason::kOutsideRoots),
                                   MessageNames("/etc")));
  req.set_verify_manifest("");
  req.set_fail_level(static_cast<v1::CheckSeverity>(9));
  EXPECT_THAT(Check(req), AllOf(HasReason(ErrorReason::kEnumValueInvalid),
                                HasMetadata("field", "fail_level")));
}

TEST_F(CheckCheckpointTest, ALenientOpenServesTheCheckOnly) {
  // The check opens what GetCheckpoint refuses, and reports it; the other
  // calls still refuse it, before and after (nothing broken is cached).
  for (const CheckCase& c : *cases) {
    if (c.rule != "index-tensor-missing") continue;
    EXPECT_THAT(server->client->GetCheckpoint(c.dir),
                AllOf(HasReason(ErrorReason::kIndexInvalid),
                      HasMetadata("rule", "index-tensor-missing")));
    auto ev = Check(c.dir);
    ASSERT_TRUE(ev.ok()) << ev.status();
    ASSERT_EQ(ev->findings.size(), 1u);
    EXPECT_EQ(ev->findings[0].rule(), "index-tensor-missing");
    EXPECT_TRUE(ev->summary.failed());
    EXPECT_THAT(server->client->GetCheckpoint(c.dir),
                AllOf(HasReason(ErrorReason::kIndexInvalid),
                      HasMetadata("rule", "index-tensor-missing")));
  }
}

TEST_F(CheckCheckpointTest, TheSourceIsServedInsideTheRootsOnly) {
  v1::CheckCheckpointRequest req;
  req.set_checkpoint(testing::WriteCleanCheckCheckpoint());
  req.set_source("/etc");
  EXPECT_THAT(Check(req), AllOf(HasReason(ErrorReason::kOutsideRoots),
                                MessageNames("/etc")));
  req.set_source(*root + "/no-such-source");
  EXPECT_THAT(Check(req), AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                                MessageNames("no-such-source")));
}

TEST_F(CheckCheckpointTest, ACancelledCheckEndsAndGivesItsSlotsBack) {
  v1::CheckCheckpointRequest req;
  req.set_checkpoint(cases->front().dir);
  // max_concurrent_diffs is 2: were a cancelled check's slot kept, every
  // check after the second would be refused for good. The client hears
  // CANCELLED before the server's task has noticed it, so the slots come
  // back a moment later: a refusal is retried for a while (30 s at most),
  // and each call must then end as asked.
  auto with_retry = [](const std::function<absl::Status()>& call) {
    absl::Status s = call();
    for (int tries = 0; tries < 300 && absl::IsResourceExhausted(s); ++tries) {
      absl::SleepFor(absl::Milliseconds(100));
      s = call();
    }
    return s;
  };
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(with_retry([&] {
                  return server->client->CheckCheckpoint(
                      req, [](const v1::CheckEvent&) { return false; });
                }),
                HasReason(ErrorReason::kCancelled));
  }
  EXPECT_TRUE(with_retry([&] { return Check(req).status(); }).ok());
}

}  // namespace
}  // namespace tensormorph
