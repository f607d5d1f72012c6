// QuantDiff in parts (QuantDiffRequest.part) and over named tensors
// (QuantDiffRequest.tensors), through a real server on loopback and a
// sharded checkpoint: the parts of a plan cover its pairs exactly once with
// the reports of the whole run, every part says which part of which plan it
// is, and a bad part or name is refused before any work.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/support/loopback_server.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ShardedDiffCheckpoint;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

struct DiffRun {
  absl::Status status;
  std::map<std::string, v1::TensorDiffReport> reports;
  std::vector<v1::DiffProgress> progress;
  v1::DiffSummary summary;
  int events = 0;
};

class QuantDiffPartsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ckpt = new ShardedDiffCheckpoint(
        ::tensormorph::testing::WriteShardedDiffCheckpoint());
    server = new LoopbackServer(StartLoopbackServer({ckpt->root}, 2));
  }
  static void TearDownTestSuite() {
    delete server;
    delete ckpt;
  }

  static v1::QuantDiffRequest Request() {
    v1::QuantDiffRequest req;
    req.set_checkpoint(ckpt->quant);
    req.set_reference(ckpt->reference);
    req.add_fail_on("max_err_steps>0.5");
    return req;
  }
  static v1::QuantDiffRequest Part(int32_t index, int32_t count) {
    v1::QuantDiffRequest req = Request();
    req.mutable_part()->set_index(index);
    req.mutable_part()->set_count(count);
    return req;
  }

  static DiffRun Diff(const v1::QuantDiffRequest& req) {
    DiffRun r;
    r.status = server->client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
      ++r.events;
      if (e.has_tensor()) {
        EXPECT_TRUE(r.reports.emplace(e.tensor().name(), e.tensor()).second)
            << e.tensor().name() << " reported twice";
      }
      if (e.has_progress()) r.progress.push_back(e.progress());
      if (e.has_summary()) r.summary = e.summary();
      return true;
    });
    return r;
  }

  static ShardedDiffCheckpoint* ckpt;
  static LoopbackServer* server;
};

ShardedDiffCheckpoint* QuantDiffPartsTest::ckpt = nullptr;
LoopbackServer* QuantDiffPartsTest::server = nullptr;

TEST_F(QuantDiffPartsTest, PartsCoverThePlanOnceWithTheWholeRunsReports) {
  const DiffRun whole = Diff(Request());
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_EQ(whole.reports.size(), ckpt->compared.size());
  EXPECT_FALSE(whole.summary.has_part());
  for (const int32_t n : {1, 2, 3, 7, 64}) {
    SCOPED_TRACE(absl::StrCat(n, " parts"));
    std::map<std::string, v1::TensorDiffReport> merged;
    std::set<std::string> fingerprints;
    int64_t plan_bytes = 0, part_bytes = 0, empty_parts = 0;
    for (int32_t i = 0; i < n; ++i) {
      const DiffRun part = Diff(Part(i, n));
      ASSERT_TRUE(part.status.ok()) << i << ": " << part.status;
      const v1::DiffSummary& s = part.summary;
      ASSERT_TRUE(s.has_part()) << i;
      EXPECT_EQ(s.part().index(), i);
      EXPECT_EQ(s.part().count(), n);
      EXPECT_EQ(s.part().plan_tensors(),
                static_cast<int64_t>(ckpt->compared.size()));
      EXPECT_EQ(s.tensors_compared(),
                static_cast<int64_t>(part.reports.size()));
      // What the part read is what it says it holds; progress counts the
      // part alone.
      EXPECT_EQ(s.bytes_read(), s.part().part_source_bytes());
      ASSERT_FALSE(part.progress.empty());
      EXPECT_EQ(part.progress.back().tensors_total(), s.tensors_compared());
      EXPECT_EQ(part.progress.back().bytes_total(),
                s.part().part_source_bytes());
      // The pairing lists are the whole plan's in every part.
      EXPECT_THAT(s.only_in_checkpoint(), ElementsAre(ckpt->only_in_quant));
      EXPECT_THAT(s.only_in_reference(), ElementsAre(ckpt->only_in_reference));
      ASSERT_EQ(s.shape_mismatches_size(), 1);
      EXPECT_THAT(s.part().fail_on(), ElementsAre("max_err_steps>0.5"));
      EXPECT_EQ(s.part().checkpoint(), ckpt->quant);
      EXPECT_EQ(s.part().reference(), ckpt->reference);
      fingerprints.insert(s.part().plan_fingerprint());
      plan_bytes = s.part().plan_source_bytes();
      part_bytes += s.part().part_source_bytes();
      empty_parts += s.tensors_compared() == 0;
      for (const auto& [name, r] : part.reports) {
        EXPECT_TRUE(merged.emplace(name, r).second) << name << " in 2 parts";
      }
    }
    EXPECT_EQ(fingerprints.size(), 1u);
    EXPECT_EQ(part_bytes, plan_bytes);
    EXPECT_EQ(plan_bytes, whole.summary.bytes_read());
    if (n > static_cast<int32_t>(ckpt->compared.size())) {
      EXPECT_GE(empty_parts, n - static_cast<int32_t>(ckpt->compared.size()));
    }
    ASSERT_EQ(merged.size(), whole.reports.size());
    for (const auto& [name, r] : whole.reports) {
      EXPECT_TRUE(MessageDifferencer::Equals(merged[name], r)) << name;
    }
  }
}

// Parts of another plan carry another fingerprint: a merge tells them apart.
TEST_F(QuantDiffPartsTest, TheFingerprintNamesThePlan) {
  auto fingerprint = [&](v1::QuantDiffRequest req) {
    const DiffRun r = Diff(req);
    EXPECT_TRUE(r.status.ok()) << r.status;
    return r.summary.part().plan_fingerprint();
  };
  const std::string base = fingerprint(Part(0, 3));
  EXPECT_EQ(fingerprint(Part(2, 3)), base);
  EXPECT_NE(fingerprint(Part(0, 4)), base);
  v1::QuantDiffRequest gates = Part(0, 3);
  gates.add_fail_on("sqnr_db<20");
  EXPECT_NE(fingerprint(gates), base);
  v1::QuantDiffRequest filtered = Part(0, 3);
  filtered.set_filter("model.layers.*");
  EXPECT_NE(fingerprint(filtered), base);
  v1::QuantDiffRequest top = Part(0, 3);
  top.set_top_k(3);
  EXPECT_NE(fingerprint(top), base);
  top.set_top_k(10);  // the default, asked for: the same plan
  EXPECT_EQ(fingerprint(top), base);
}

TEST_F(QuantDiffPartsTest, ThePartCarriesItsRunIdWhichIsNoPartOfThePlan) {
  v1::QuantDiffRequest night1 = Part(1, 3);
  night1.mutable_part()->set_run_id("night-1");
  v1::QuantDiffRequest night2 = Part(1, 3);
  night2.mutable_part()->set_run_id("night-2");
  const DiffRun a = Diff(night1);
  const DiffRun b = Diff(night2);
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(a.summary.part().run_id(), "night-1");
  EXPECT_EQ(b.summary.part().run_id(), "night-2");
  // The same plan: only the run id tells the two nights' parts apart.
  EXPECT_EQ(a.summary.part().plan_fingerprint(),
            b.summary.part().plan_fingerprint());
  v1::QuantDiffRequest bad = Part(0, 3);
  bad.mutable_part()->set_run_id("night/1");
  const DiffRun refused = Diff(bad);
  EXPECT_THAT(refused.status,
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("part.run_id"), MessageNames("'/'")));
  EXPECT_EQ(refused.events, 0);
}

TEST_F(QuantDiffPartsTest, ABadPartIsRefusedNamingTheFieldBeforeAnyWork) {
  const struct {
    int32_t index, count;
    const char* field;  // the one the refusal names
  } cases[] = {
      {3, 3, "part.index"},  {-1, 3, "part.index"}, {0, 65537, "part.count"},
      {0, -1, "part.count"}, {2, 0, "part.index"},
  };
  for (const auto& c : cases) {
    const DiffRun r = Diff(Part(c.index, c.count));
    EXPECT_THAT(r.status, AllOf(HasReason(ErrorReason::kRequestInvalid),
                                MessageNames(c.field)));
    EXPECT_EQ(r.events, 0);
  }
  // count 0 is the whole diff.
  const DiffRun whole = Diff(Part(0, 0));
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  EXPECT_FALSE(whole.summary.has_part());
  EXPECT_EQ(whole.reports.size(), ckpt->compared.size());
}

TEST_F(QuantDiffPartsTest, NamedTensorsAloneAreCompared) {
  const std::string a = ckpt->compared[0], b = ckpt->compared[5];
  v1::QuantDiffRequest req = Request();
  req.add_tensors(b);
  req.add_tensors(a);
  req.add_tensors(ckpt->shape_mismatch);
  const DiffRun r = Diff(req);
  ASSERT_TRUE(r.status.ok()) << r.status;
  std::vector<std::string> names;
  for (const auto& [name, report] : r.reports) names.push_back(name);
  EXPECT_THAT(names, ElementsAre(a, b));
  EXPECT_EQ(r.summary.tensors_compared(), 2);
  // The lists of quantized tensors hold the named ones only; the source's
  // leftovers are the whole checkpoint's.
  EXPECT_THAT(r.summary.only_in_checkpoint(), IsEmpty());
  ASSERT_EQ(r.summary.shape_mismatches_size(), 1);
  EXPECT_THAT(r.summary.shape_mismatches(0),
              ::testing::StartsWith(ckpt->shape_mismatch + ": [4,8]"));
  EXPECT_THAT(r.summary.only_in_reference(),
              ElementsAre(ckpt->only_in_reference));

  // With a part: the named tensors' plan, split.
  v1::QuantDiffRequest part = req;
  part.mutable_part()->set_index(1);
  part.mutable_part()->set_count(2);
  const DiffRun p = Diff(part);
  ASSERT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.summary.part().plan_tensors(), 2);
  EXPECT_EQ(p.summary.tensors_compared(), 1);
}

TEST_F(QuantDiffPartsTest, AnUnknownOrFilteredOutNameIsRefused) {
  v1::QuantDiffRequest req = Request();
  req.add_tensors(ckpt->compared[0]);
  req.add_tensors("model.nope.weight");
  DiffRun r = Diff(req);
  EXPECT_THAT(r.status, AllOf(HasReason(ErrorReason::kRequestInvalid),
                              MessageNames("'model.nope.weight'")));
  EXPECT_EQ(r.events, 0);
  // A name of the source only is no tensor of the quantized checkpoint.
  req.clear_tensors();
  req.add_tensors(ckpt->only_in_reference);
  r = Diff(req);
  EXPECT_THAT(r.status, AllOf(HasReason(ErrorReason::kRequestInvalid),
                              MessageNames(ckpt->only_in_reference)));
  // Every name filtered out: nothing to compare, said as such.
  req.clear_tensors();
  req.add_tensors(ckpt->compared[0]);
  req.set_filter("nothing.*");
  r = Diff(req);
  EXPECT_THAT(r.status, AllOf(HasReason(ErrorReason::kRequestInvalid),
                              MessageNames("'nothing.*'")));
  // Names whose pairs all differ in shape: the whole plan's refusal.
  req.clear_tensors();
  req.clear_filter();
  req.add_tensors(ckpt->shape_mismatch);
  r = Diff(req);
  EXPECT_THAT(r.status, HasReason(ErrorReason::kFailedPrecondition));
}

}  // namespace
}  // namespace tensormorph
