// Merging the parts of a diff: the whole diff's summary rebuilt from the
// parts, and every way the parts can fail to be one whole plan refused by
// name.
#include "client/cli/diff_merge.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;
using ::testing::ElementsAre;

v1::TensorDiffReport Report(const std::string& name, double steps,
                            bool flagged = false) {
  v1::TensorDiffReport r;
  r.set_name(name);
  r.set_max_err_steps(steps);
  r.set_flagged(flagged);
  return r;
}

// Part `index` of `count` of plan "p1" holding `reports`.
DiffPartEvents Part(int index, int count,
                    std::vector<v1::TensorDiffReport> reports,
                    int64_t plan_tensors) {
  DiffPartEvents p;
  p.label = absl::StrCat("part-", index, ".jsonl");
  v1::DiffSummary s;
  s.set_pairing(v1::DIFF_PAIRING_BY_NAME);
  s.add_only_in_reference("orphan");
  s.set_tensors_compared(static_cast<int64_t>(reports.size()));
  s.set_bytes_read(100 * static_cast<int64_t>(reports.size()));
  s.set_wall_seconds(1.0 + index);
  v1::DiffPartInfo* info = s.mutable_part();
  info->set_index(index);
  info->set_count(count);
  info->set_plan_tensors(plan_tensors);
  info->set_plan_fingerprint("00000000000000p1");
  info->add_fail_on("max_err_steps>0.5");
  info->set_checkpoint("quant");
  info->set_reference("source");
  p.reports = std::move(reports);
  p.summary = s;
  return p;
}

std::vector<DiffPartEvents> ThreeParts() {
  std::vector<DiffPartEvents> parts;
  parts.push_back(Part(0, 3, {Report("c", 0.2), Report("a", 0.6, true)}, 4));
  parts.push_back(Part(1, 3, {Report("b", 0.4)}, 4));
  parts.push_back(Part(2, 3, {Report("d", 0.1)}, 4));
  return parts;
}

TEST(DiffMergeTest, RebuildsTheWholeSummaryFromThePartsInAnyOrder) {
  std::vector<DiffPartEvents> parts = ThreeParts();
  std::swap(parts[0], parts[2]);
  auto m = MergeDiffParts(std::move(parts));
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::string> names;
  for (const auto& r : m->reports) names.push_back(r.name());
  EXPECT_THAT(names, ElementsAre("a", "b", "c", "d"));
  EXPECT_EQ(m->summary.tensors_compared(), 4);
  EXPECT_EQ(m->summary.bytes_read(), 400);
  EXPECT_EQ(m->summary.wall_seconds(), 3.0);  // the slowest part's
  EXPECT_THAT(m->summary.worst_tensors(), ElementsAre("a", "b", "c", "d"));
  EXPECT_THAT(m->summary.flagged(), ElementsAre("a"));
  EXPECT_THAT(m->summary.only_in_reference(), ElementsAre("orphan"));
  EXPECT_FALSE(m->summary.has_part());
  EXPECT_THAT(m->fail_on, ElementsAre("max_err_steps>0.5"));
  EXPECT_EQ(m->checkpoint, "quant");
  EXPECT_EQ(m->reference, "source");
}

// The excess totals are each part's added once: part 0's count no more than
// the others' (its summary is no starting point), and the undecodable
// tensors are listed once each, sorted.
TEST(DiffMergeTest, AddsTheExcessTotalsOfEveryPartOnce) {
  std::vector<DiffPartEvents> parts = ThreeParts();
  for (auto& p : parts) p.summary->mutable_part()->set_plan_tensors(6);
  const struct {
    int64_t not_nearest, clipped, zeroed_groups;
    double max_excess_steps;
    std::vector<std::string> undecodable;
  } kTotals[] = {{7299, 11, 2, 0.75, {"z: I3: no decoder"}},
                 {7191, 13, 0, 2.5, {}},
                 {5, 17, 3, 1.25, {"y: I3: no decoder"}}};
  for (int i = 0; i < 3; ++i) {
    v1::DiffSummary& s = *parts[i].summary;
    s.set_not_nearest(kTotals[i].not_nearest);
    s.set_clipped(kTotals[i].clipped);
    s.set_zeroed_groups(kTotals[i].zeroed_groups);
    s.set_max_excess_steps(kTotals[i].max_excess_steps);
    for (const std::string& u : kTotals[i].undecodable) s.add_undecodable(u);
  }
  auto m = MergeDiffParts(std::move(parts));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->summary.not_nearest(), 7299 + 7191 + 5);
  EXPECT_EQ(m->summary.clipped(), 11 + 13 + 17);
  EXPECT_EQ(m->summary.zeroed_groups(), 2 + 0 + 3);
  EXPECT_EQ(m->summary.max_excess_steps(), 2.5);
  EXPECT_THAT(m->summary.undecodable(),
              ElementsAre("y: I3: no decoder", "z: I3: no decoder"));
  // Without an imatrix no weighted figure appears.
  EXPECT_EQ(m->summary.imatrix_weighted(), 0);
  EXPECT_EQ(m->summary.weighted_sq_err(), 0);
}

// With an imatrix: the weighted totals of every part's reports, added in
// name order as one run adds them, and the tensors it did not weigh.
TEST(DiffMergeTest, AddsTheWeightedSumsOfAllPartsInNameOrder) {
  auto weighted = [](const std::string& name, int use, double se,
                     double energy) {
    v1::TensorDiffReport r = Report(name, 0.1);
    r.set_imatrix_use(static_cast<v1::ImatrixUse>(use));
    r.set_weighted_sq_err(se);
    r.set_weighted_source_energy(energy);
    if (use == 3) r.set_imatrix_note("30 values, needs 24");
    return r;
  };
  std::vector<DiffPartEvents> parts;
  parts.push_back(
      Part(0, 3, {weighted("c", 1, 1, 3), weighted("a", 1, 1e16, 5)}, 5));
  parts.push_back(Part(1, 3, {weighted("b", 2, 0, 0)}, 5));
  parts.push_back(
      Part(2, 3, {weighted("d", 3, 0, 0), weighted("e", 1, 1, 1)}, 5));
  // Part 0's own totals (a and c only) must not survive the merge.
  parts[0].summary->set_imatrix_weighted(2);
  parts[0].summary->set_weighted_sq_err(99);
  auto m = MergeDiffParts(std::move(parts));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->summary.imatrix_weighted(), 3);
  const double a = 1e16, c = 1, e = 1;
  EXPECT_EQ(m->summary.weighted_sq_err(), (a + c) + e);
  EXPECT_EQ(m->summary.weighted_source_energy(), 9);
  EXPECT_DOUBLE_EQ(m->summary.weighted_sqnr_db(),
                   10 * std::log10(9 / ((a + c) + e)));
  EXPECT_THAT(m->summary.imatrix_missing(), ElementsAre("b"));
  EXPECT_THAT(m->summary.imatrix_mismatched(),
              ElementsAre("d: 30 values, needs 24"));
}

TEST(DiffMergeTest, RefusesPartsThatAreNotOneWholePlan) {
  struct Case {
    const char* what;
    std::function<void(std::vector<DiffPartEvents>&)> change;
    // What the refusal names: the part files, parts and numbers at odds.
    std::vector<std::string> named;
  };
  const Case cases[] = {
      {"no summary",
       [](auto& p) { p[1].summary.reset(); },
       {"part-1.jsonl", "--part i/N --json"}},
      {"no part info",
       [](auto& p) { p[1].summary->clear_part(); },
       {"part-1.jsonl"}},
      {"a part count no split has",
       [](auto& p) { p[1].summary->mutable_part()->set_count(2147483647); },
       {"part-1.jsonl", "1/2147483647", "65536"}},
      {"an index past the count",
       [](auto& p) { p[2].summary->mutable_part()->set_index(7); },
       {"part-2.jsonl", "7/3"}},
      {"a negative size",
       [](auto& p) { p[0].summary->set_bytes_read(-1); },
       {"part-0.jsonl"}},
      {"source bytes that do not add up (an edited part)",
       [](auto& p) {
         for (auto& part : p) {
           part.summary->mutable_part()->set_plan_source_bytes(10);
           part.summary->mutable_part()->set_part_source_bytes(3);
         }
       },
       {"9", "10"}},
      {"truncated",
       [](auto& p) { p[0].reports.pop_back(); },
       {"part-0.jsonl", "0/3", "2 tensors", "1 tensor"}},
      {"another plan",
       [](auto& p) {
         p[2].summary->mutable_part()->set_plan_fingerprint("00000000000000p2");
       },
       {"part-0.jsonl", "00000000000000p1", "part-2.jsonl",
        "00000000000000p2"}},
      {"another count",
       [](auto& p) { p[2].summary->mutable_part()->set_count(4); },
       {"part-2.jsonl", "2/4"}},
      {"twice",
       [](auto& p) {
         p[2] = p[1];
         p[2].label = "copy.jsonl";
       },
       {"1/3", "part-1.jsonl", "copy.jsonl"}},
      {"missing",
       [](auto& p) { p.erase(p.begin() + 1); },
       {"1/3", "0/3 (part-0.jsonl)", "2/3 (part-2.jsonl)"}},
      {"lists disagree",
       [](auto& p) { p[2].summary->add_only_in_checkpoint("x"); },
       {"only_in_checkpoint", "part-2.jsonl (part 2/3)", "part-0.jsonl"}},
      {"a tensor twice",
       [](auto& p) { p[2].reports[0].set_name("b"); },
       {"'b'", "part-1.jsonl", "part-2.jsonl"}},
      {"short of the plan",
       [](auto& p) {
         for (auto& part : p) part.summary->mutable_part()->set_plan_tensors(5);
       },
       {"4 tensors", "5"}},
  };
  for (const Case& c : cases) {
    std::vector<DiffPartEvents> parts = ThreeParts();
    c.change(parts);
    auto m = MergeDiffParts(std::move(parts));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    for (const std::string& value : c.named) {
      EXPECT_THAT(m, MessageNames(value)) << c.what;
    }
  }
  EXPECT_THAT(MergeDiffParts({}), HasReason(ErrorReason::kRequestInvalid));
}

std::vector<DiffPartEvents> ThreePartsOfRun(const std::string& run_id) {
  std::vector<DiffPartEvents> parts = ThreeParts();
  for (DiffPartEvents& p : parts) p.summary->mutable_part()->set_run_id(run_id);
  return parts;
}

TEST(DiffMergeTest, MergesThePartsOfOneRunAsBefore) {
  auto unnamed = MergeDiffParts(ThreeParts());
  auto named = MergeDiffParts(ThreePartsOfRun("night-2"));
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->run_id, "night-2");
  EXPECT_EQ(unnamed->run_id, "");
  EXPECT_EQ(named->summary.SerializeAsString(),
            unnamed->summary.SerializeAsString());
  ASSERT_EQ(named->reports.size(), unnamed->reports.size());
  for (size_t i = 0; i < named->reports.size(); ++i) {
    EXPECT_EQ(named->reports[i].SerializeAsString(),
              unnamed->reports[i].SerializeAsString());
  }
}

TEST(DiffMergeTest, RefusesPartsOfDifferentRunsNamingBothRunsAndFiles) {
  // Last night's part 2 left beside tonight's 0 and 1: the same plan (same
  // names, shapes, fingerprint), other numbers.
  std::vector<DiffPartEvents> parts = ThreePartsOfRun("night-2");
  parts[2].summary->mutable_part()->set_run_id("night-1");
  parts[2].label = "old/part-2.jsonl";
  auto m = MergeDiffParts(std::move(parts));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DiffMergeReason(m.status()), kDiffPartsOfDifferentRuns);
  // A file of each run, its part and its run id.
  EXPECT_THAT(m, AllOf(MessageNames("part-0.jsonl is part 0/3"),
                       MessageNames("'night-2'"),
                       MessageNames("old/part-2.jsonl part 2/3"),
                       MessageNames("'night-1'")));
}

TEST(DiffMergeTest, APartOfNoRunIsARunOfItsOwn) {
  // A part written before run ids (or by hand without one) does not join a
  // named run.
  std::vector<DiffPartEvents> parts = ThreePartsOfRun("night-2");
  parts[0].summary->mutable_part()->clear_run_id();
  auto m = MergeDiffParts(std::move(parts));
  EXPECT_EQ(DiffMergeReason(m.status()), kDiffPartsOfDifferentRuns);
  EXPECT_THAT(m, AllOf(MessageNames("part-0.jsonl is part 0/3 of run (none)"),
                       MessageNames("part-1.jsonl part 1/3 of run 'night-2'")));
}

TEST(DiffMergeTest, ARunMismatchIsNamedBeforeAPlanMismatch) {
  std::vector<DiffPartEvents> parts = ThreePartsOfRun("night-2");
  parts[1].summary->mutable_part()->set_run_id("night-1");
  parts[1].summary->mutable_part()->set_plan_fingerprint("00000000000000p2");
  EXPECT_EQ(DiffMergeReason(MergeDiffParts(std::move(parts)).status()),
            kDiffPartsOfDifferentRuns);
}

TEST(DiffMergeTest, RefusalsOfAnIncompleteOrForeignSetCarryTheirReason) {
  std::vector<DiffPartEvents> missing = ThreeParts();
  missing.pop_back();
  EXPECT_EQ(DiffMergeReason(MergeDiffParts(std::move(missing)).status()),
            kDiffPartsIncomplete);
  std::vector<DiffPartEvents> twice = ThreeParts();
  twice[2] = twice[1];
  EXPECT_EQ(DiffMergeReason(MergeDiffParts(std::move(twice)).status()),
            kDiffPartsIncomplete);
  std::vector<DiffPartEvents> other_plan = ThreeParts();
  other_plan[1].summary->mutable_part()->set_plan_fingerprint(
      "0000000000000p2");
  EXPECT_EQ(DiffMergeReason(MergeDiffParts(std::move(other_plan)).status()),
            kDiffPartsOfDifferentPlans);
  // A refusal without a reason of its own has none.
  std::vector<DiffPartEvents> truncated = ThreeParts();
  truncated[0].reports.pop_back();
  EXPECT_EQ(DiffMergeReason(MergeDiffParts(std::move(truncated)).status()), "");
}

}  // namespace
}  // namespace tensormorph
